#!/usr/bin/env python3
"""The shared library's exported symbols against tests/build/fovea.symbols (test build.symbols).

Builds libfovea.so (target fovea_shared; a static build makes it only for this test), lists its
exports with `nm -D --defined-only -C` and fails when
  - a symbol the file lists for a stage this build has is no longer exported (an API function
    removed or its signature changed: users' programs would no longer link), or
  - an exported symbol is not fovea's: its demangled name must start with `fovea::`, or be the
    run-time type information of a fovea class (typeinfo, typeinfo name, vtable, VTT, thunks),
    which programs need to catch fovea::Error, derive from fovea::Codec and the like.
Exported symbols the file does not list are printed (new API: add them with --update). Weak
symbols count like the others: what the library exports weak is the explicit instantiations of
its class templates (Image<uint8_t>::clone) and the type information of its polymorphic
classes (typeinfo for fovea::Error), which programs need as much as its functions; inline
functions are not exported (-fvisibility-inlines-hidden).

The file lists one symbol per line, after the stage that defines it (a tab between):
  core<TAB>fovea::Error::printable(std::basic_string_view<char, std::char_traits<char> >)
  store+ffmpeg+vulkan<TAB>fovea::...   (only in builds with those optional parts)
A line applies when this build has its stage (the encoder and video stages are optional) and
the optional parts it names (encoder, vulkan, ffmpeg), so one file serves every configuration.

  symbols.py --build BUILD_DIR --lib LIB --symbols FILE --parts "encoder vulkan ffmpeg"
             --stage NAME=ARCHIVE ... [--update]
--update: of the lines that apply to this build, drops those no longer exported and adds the
symbols exported but not listed, each after the stage that defines it (from the stage archives)
and this build's optional parts; lines that do not apply are kept. A tokenize-only build's
update (scripts/test-reduced.sh's) adds the symbols every build has; a full build's adds the rest.
"""
import argparse
import re
import subprocess
import sys

ALLOWED = re.compile(r"^(fovea::|typeinfo for fovea::|typeinfo name for fovea::|vtable for fovea::|VTT for fovea::|"
                     r"virtual thunk to fovea::|non-virtual thunk to fovea::)")


def nm(path, dynamic):
    cmd = ["nm", "--defined-only", "-C"] + (["-D"] if dynamic else []) + [path]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    syms = {}
    for line in out.splitlines():
        m = re.match(r"^[0-9a-fA-F]+ (\S) (.*)$", line)
        if m:
            syms.setdefault(m.group(2), m.group(1))
    return syms


def read_file(path):
    entries = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            stage, _, sym = line.partition("\t")
            entries.append((stage, sym))
    return entries


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--symbols", required=True)
    ap.add_argument("--stage", action="append", default=[], help="NAME=ARCHIVE, upstream first")
    ap.add_argument("--parts", default="", help="the optional parts this build has")
    ap.add_argument("--update", action="store_true")
    ap.add_argument("--no-build", action="store_true", help="the library is built already")
    args = ap.parse_args()

    if not args.no_build:
        subprocess.run(["cmake", "--build", args.build, "--target", "fovea_shared"], check=True,
                       stdout=subprocess.DEVNULL)
    exported = nm(args.lib, dynamic=True)
    stages = [s.split("=", 1) for s in args.stage]
    built = {name for name, _ in stages}
    parts = set(args.parts.split())

    def applies(tag):
        stage, *needs = tag.split("+")
        return stage in built and set(needs) <= parts

    foreign = sorted(s for s in exported if not ALLOWED.match(s))
    listed_now = {s for s, t in exported.items() if t != "A"}
    foreign = [s for s in foreign if exported[s] != "A"]  # ABS: a version node, if any

    if args.update:
        where = {}
        for name, archive in stages:  # the most upstream stage that defines it
            for s, t in nm(archive, dynamic=False).items():
                if s in listed_now and s not in where:
                    where[s] = name
        old = read_file(args.symbols)
        kept = [(st, s) for st, s in old if not applies(st) or s in listed_now]
        have = {s for _, s in kept}
        def tag(stage):
            return stage + "".join("+" + p for p in sorted(parts) if p != stage)
        lines = kept + [(tag(where.get(s, "?")), s) for s in listed_now if s not in have]
        header = [l for l in open(args.symbols, encoding="utf-8") if l.startswith("#")]
        order = {name: i for i, (name, _) in enumerate(stages)}
        lines.sort(key=lambda e: (order.get(e[0].split("+")[0], len(order)), e[0], e[1]))
        with open(args.symbols, "w", encoding="utf-8") as f:
            f.writelines(header)
            for st, s in lines:
                f.write(f"{st}\t{s}\n")
        print(f"symbols: wrote {len(lines)} lines ({len(listed_now)} from this build) to {args.symbols}")
        if foreign:
            print("symbols: exported, not fovea's:\n  " + "\n  ".join(foreign))
            return 1
        return 0

    listed = read_file(args.symbols)
    required = {s for st, s in listed if applies(st)}
    missing = sorted(required - set(exported))
    new = sorted(listed_now - {s for _, s in listed})
    ok = True
    if missing:
        ok = False
        print(f"symbols: {len(missing)} symbols of {args.symbols} are no longer exported by {args.lib} "
              "(an API function removed or changed; if on purpose, run tests/build/symbols.py --update):")
        for s in missing:
            print("  - " + s)
    if foreign:
        ok = False
        print(f"symbols: {len(foreign)} exported symbols are not in namespace fovea (cmake/fovea.version "
              "lets through only fovea's):")
        for s in foreign:
            print("  ! " + s)
    if new:
        print(f"symbols: {len(new)} exported symbols are new (not in {args.symbols}; add them with --update):")
        for s in new:
            print("  + " + s)
    print(f"symbols: {len(exported)} exported, {len(required)} required by the file for "
          f"stages {' '.join(sorted(built))}, parts {' '.join(sorted(parts)) or 'none'}")
    if ok:
        print("symbols: ok")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
