#!/usr/bin/env bash
# Lists the C++ functions longer than N lines (default 120), longest first, as
#   LINES  NAME  FILE:LINE
# from Universal Ctags' end-line field (Debian's universal-ctags), over src, tools, python/src,
# include, tests and bench (or the folders given after N). A reading aid for finding functions
# worth splitting, not a check: a long table of bindings or a test's fixture can be right as it is.
#   bash scripts/long_functions.sh            # over 120 lines
#   bash scripts/long_functions.sh 100 src    # over 100 lines, src/ only
set -euo pipefail
cd "$(dirname "$0")/.."
limit=${1:-120}
shift || true
folders=("$@")
[ "${#folders[@]}" -gt 0 ] || folders=(src tools python/src include tests bench)
command -v ctags >/dev/null 2>&1 || { echo "long_functions.sh: error: needs ctags (apt-get install universal-ctags)" >&2; exit 2; }
ctags -R -x --_xformat='%{end} %{line} %N %F' --kinds-c++=f --languages=C++ "${folders[@]}" 2>/dev/null |
  awk -v limit="$limit" '$1 != "-" { n = $1 - $2 + 1; if (n > limit) print n, $3, $4 ":" $2 }' | sort -rn
