#!/usr/bin/python3
"""Every relative link in the repository's Markdown files leads somewhere: the file (or folder)
exists, and a #fragment into a Markdown page names one of its headings (GitHub's anchors:
lower case, punctuation dropped, spaces as '-').

    /usr/bin/python3 tests/build/doc_links.py --source .

Exit 1 naming every broken link as FILE:LINE.
"""
import argparse
import os
import re
import subprocess
import sys

LINK = re.compile(r"\]\(([^)\s]+)\)|<img[^>]*src=\"([^\"]+)\"")
CODE = re.compile(r"`[^`]*`")


def slug(heading):
    s = re.sub(r"`", "", heading.strip().lower())
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        names, seen, fence = set(), {}, False
        for line in open(path, encoding="utf-8"):
            if line.startswith("```"):
                fence = not fence
            if fence:
                continue
            m = re.match(r"#{1,6} (.*)", line)
            if m:
                a = slug(m.group(1))
                n = seen.get(a, 0)
                names.add(a if n == 0 else f"{a}-{n}")
                seen[a] = n + 1
            names.update(re.findall(r"<a (?:name|id)=\"([^\"]+)\"", line))
        cache[path] = names
    return cache[path]


def md_files(src):
    try:
        out = subprocess.run(["git", "-C", src, "ls-files", "--cached", "--others", "--exclude-standard", "*.md"],
                             capture_output=True, text=True, check=True).stdout
        return [f for f in out.splitlines() if os.path.isfile(os.path.join(src, f))]
    except (OSError, subprocess.CalledProcessError):
        return [os.path.relpath(os.path.join(r, n), src) for r, d, ns in os.walk(src)
                if not os.path.relpath(r, src).startswith(("build", ".")) for n in ns if n.endswith(".md")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    a = ap.parse_args()
    src = os.path.abspath(a.source)
    bad = 0
    files = md_files(src)
    for f in sorted(files):
        fence = False
        for n, line in enumerate(open(os.path.join(src, f), encoding="utf-8"), 1):
            if line.startswith("```"):
                fence = not fence
            if fence:
                continue
            for m in LINK.finditer(CODE.sub("", line)):
                target = m.group(1) or m.group(2)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                    continue  # http:, https:, mailto:
                path, _, frag = target.partition("#")
                dest = os.path.normpath(os.path.join(src, os.path.dirname(f), path)) if path else os.path.join(src, f)
                if not os.path.exists(dest):
                    print(f"{f}:{n}: '{target}': no such file ({os.path.relpath(dest, src)})")
                    bad += 1
                elif frag and dest.endswith(".md") and frag not in anchors(dest):
                    print(f"{f}:{n}: '{target}': {os.path.relpath(dest, src)} has no heading '#{frag}'")
                    bad += 1
    if bad:
        print(f"doc_links: error: {bad} broken link(s) in {len(files)} Markdown files", file=sys.stderr)
        return 1
    print(f"doc_links: {len(files)} Markdown files, every link resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main())
