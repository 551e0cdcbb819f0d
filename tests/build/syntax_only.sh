#!/bin/sh
# The header check's compiler launcher (tests/CMakeLists.txt): runs the compile command "$@" with
# -fsyntax-only (the check is that each public header compiles on its own and the examples compile; no
# code is generated, and no ccache pass: ~25 % of each compile) and leaves an empty
# object file where -o points, so that ninja counts the step as done and repeats it only when a
# header changes (the compiler still writes the -MD depfile that lists them).
out=
prev=
for a in "$@"; do
  [ "$prev" = "-o" ] && out=$a
  prev=$a
done
"$@" -fsyntax-only || exit
if [ -n "$out" ]; then : > "$out"; fi
