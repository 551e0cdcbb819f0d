#!/usr/bin/python3
"""Runs the README's runnable commands as written: every fenced `sh` block that follows a
`<!-- runnable -->` line, from the repository root, with `build/` meaning this build's folder and
`out/` a fresh temporary folder. Exit 1 naming the first block that fails.

    /usr/bin/python3 tests/build/readme_commands.py --source . --build build
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile


def blocks(readme):
    lines = open(readme, encoding="utf-8").read().splitlines()
    out, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "<!-- runnable -->":
            j = i + 1
            if j >= len(lines) or not lines[j].startswith("```sh"):
                raise SystemExit(f"readme_commands: error: line {i + 1}: '<!-- runnable -->' must precede a ```sh block")
            k = j + 1
            while k < len(lines) and not lines[k].startswith("```"):
                k += 1
            out.append((j + 1, "\n".join(lines[j + 1:k])))
            i = k
        i += 1
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--build", required=True)
    a = ap.parse_args()
    src, build = os.path.abspath(a.source), os.path.abspath(a.build)
    found = blocks(os.path.join(src, "README.md"))
    if not found:
        print("readme_commands: error: the README has no runnable block", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="fovea-readme-") as out:
        for line, text in found:
            script = re.sub(r"(?<![\w/.-])build/", build + "/", text)
            script = re.sub(r"(?<![\w/.-])out/", out + "/", script)
            r = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=src, capture_output=True, text=True,
                               timeout=600)
            if r.returncode != 0:
                print(f"readme_commands: error: the block at README.md line {line} exited {r.returncode}:\n"
                      f"{r.stderr[-2000:]}", file=sys.stderr)
                return 1
            print(f"README.md line {line}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
