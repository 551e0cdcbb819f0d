#!/usr/bin/python3
"""The product speaks of itself only: no file in the tree (README, docs, code comments, help
texts, scripts, benchmark results) speaks of how it was made: sessions, helpers, stops,
branches, issue numbers. History lives in git.

Every text file git knows of (tracked, or new and not ignored) is read line by line; a line
fails when, after the allowed spans of tests/build/process_words_allow.txt are blanked out, it
still matches one of WORDS (case-insensitive). Binary files (a NUL in the first 8 KiB) are
skipped; so are the files git ignores.

    /usr/bin/python3 tests/build/process_words.py --source .
    /usr/bin/python3 tests/build/process_words.py --source . docs/how-to/video.md   # some files only

Exit 0 with no hit, 1 naming every hit as FILE:LINE.
"""
import argparse
import fnmatch
import os
import re
import subprocess
import sys

# What the product must not say of itself (case-insensitive).
WORDS = [
    ("session", re.compile(r"session", re.I)),
    ("stop N", re.compile(r"\bstop [0-9]", re.I)),
    ("helper", re.compile(r"helper", re.I)),
    ("issue N", re.compile(r"\bissue[ #-]*[0-9]", re.I)),
    ("branch", re.compile(r"\bbranch ", re.I)),
]

ALLOW_FILE = "tests/build/process_words_allow.txt"
SELF = "tests/build/process_words.py"  # names the words it looks for


def load_allow(path):
    """Lines of `GLOB  REGEX  # why`: in files matching GLOB, spans matching REGEX are allowed."""
    rules = []
    for n, raw in enumerate(open(path, encoding="utf-8").read().splitlines(), 1):
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        parts = line.split(None, 1)
        if len(parts) != 2:
            raise SystemExit(f"process_words: error: {path}:{n}: want 'GLOB REGEX  # why', got {raw!r}")
        try:
            rules.append((parts[0], re.compile(parts[1]), n))
        except re.error as e:
            raise SystemExit(f"process_words: error: {path}:{n}: bad regex {parts[1]!r}: {e}")
    return rules


def tree_files(src):
    try:
        out = subprocess.run(["git", "-C", src, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, check=True).stdout
        files = sorted({f for f in out.decode("utf-8", "surrogateescape").split("\0") if f})
        return [f for f in files if os.path.isfile(os.path.join(src, f))]
    except (OSError, subprocess.CalledProcessError):
        # Not a git checkout (a source archive): walk it, leaving build folders out.
        files = []
        for root, dirs, names in os.walk(src):
            dirs[:] = [d for d in dirs if not d.startswith((".", "build"))]
            files += [os.path.relpath(os.path.join(root, n), src) for n in names]
        return sorted(files)


def hits_in(path, text, rules):
    mine = [rx for glob, rx, _ in rules if fnmatch.fnmatchcase(path, glob)]
    for n, line in enumerate(text.splitlines(), 1):
        clean = line
        for rx in mine:
            clean = rx.sub(lambda m: " " * len(m.group(0)), clean)
        for name, rx in WORDS:
            m = rx.search(clean)
            if m:
                yield n, name, line.strip()
                break


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True, help="the repository's root")
    ap.add_argument("files", nargs="*", help="files to check (relative to --source); default: the whole tree")
    a = ap.parse_args()
    src = os.path.abspath(a.source)
    rules = load_allow(os.path.join(src, ALLOW_FILE))
    files = a.files or tree_files(src)
    found = 0
    for f in files:
        if f in (ALLOW_FILE, SELF):
            continue
        try:
            data = open(os.path.join(src, f), "rb").read()
        except OSError as e:
            print(f"process_words: error: cannot read {f}: {e.strerror}", file=sys.stderr)
            return 1
        if b"\0" in data[:8192]:
            continue
        for n, name, line in hits_in(f, data.decode("utf-8", "replace"), rules):
            found += 1
            print(f"{f}:{n}: '{name}': {line[:160]}")
    if found:
        print(f"process_words: error: {found} line(s) speak of how the product was made (sessions, helpers, "
              f"stops, branches, issue numbers). Say what the product does instead, and leave history to git; "
              f"a genuine use (an HTTP session, a video session, an API's name) goes in {ALLOW_FILE} with its reason.",
              file=sys.stderr)
        return 1
    print(f"process_words: {len(files)} files, no hit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
