#!/usr/bin/python3
"""Writes docs/reference/python-api.md from the module's type stubs (python/fovea/_fovea.pyi):
every class with its methods and properties, every function (and the package's own functions
that wrap no stub, from fovea/__init__.py), each with its signature and its docstring. With --check, exit 1 when the page is not what it would write (test
build.python_reference).

    /usr/bin/python3 scripts/gen_python_reference.py [--check]
"""
import argparse
import ast
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STUBS = os.path.join(ROOT, "python", "fovea", "_fovea.pyi")
PACKAGE = os.path.join(ROOT, "python", "fovea", "__init__.py")
PAGE = os.path.join(ROOT, "docs", "reference", "python-api.md")


def signature(fn, drop_self):
    a = fn.args
    parts = []
    pos = a.posonlyargs + a.args
    defaults = [None] * (len(pos) - len(a.defaults)) + list(a.defaults)
    for arg, d in zip(pos, defaults):
        if drop_self and arg is pos[0] and arg.arg in ("self", "cls"):
            continue
        s = arg.arg + (f": {ast.unparse(arg.annotation)}" if arg.annotation else "")
        parts.append(s + (" = ..." if d is not None else ""))
    if a.vararg:
        parts.append("*" + a.vararg.arg)
    elif a.kwonlyargs:
        parts.append("*")
    for arg, d in zip(a.kwonlyargs, a.kw_defaults):
        s = arg.arg + (f": {ast.unparse(arg.annotation)}" if arg.annotation else "")
        parts.append(s + (" = ..." if d is not None else ""))
    if a.kwarg:
        parts.append("**" + a.kwarg.arg)
    ret = f" -> {ast.unparse(fn.returns)}" if fn.returns else ""
    return f"{fn.name}({', '.join(parts)}){ret}"


def doc(node):
    """The docstring: its first paragraph as prose, the rest (arguments, examples) as written."""
    d = ast.get_docstring(node)
    if not d:
        return ""
    first, _, rest = d.strip().partition("\n\n")
    out = " ".join(first.split())
    if rest.strip():
        out += "\n\n```text\n" + rest.rstrip() + "\n```"
    return out


def package_docs():
    """Docstrings of the package's own functions and classes (fovea/__init__.py wraps the stubs'
    functions with the documented keyword handling): name -> docstring node."""
    tree = ast.parse(open(PACKAGE, encoding="utf-8").read())
    return {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and not n.name.startswith("_")}


def render():
    tree = ast.parse(open(STUBS, encoding="utf-8").read())
    pkg = package_docs()
    out = ["# The Python API", "",
           "<!-- Written by scripts/gen_python_reference.py from python/fovea/_fovea.pyi: edit the stubs, not this page. -->",
           "", "`import fovea` (the module built into `build/python`, or installed with `cmake --install build "
           "--component python`). The package re-exports these types and adds `fovea.Fixation`, `fovea.distributed` "
           "(Dask), `fovea.serve` (HTTP), `fovea.handoff` and `fovea.Client`; how to use them: "
           "[how-to/python-and-dask.md](../how-to/python-and-dask.md). Errors: `ValueError`, `OSError`, "
           "`MemoryError`, `RuntimeError` with the CLI's one-line message ([errors.md](errors.md)).", ""]
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    # The package's own functions that wrap no stub (fovea.encode routes to several), after them.
    stubbed = {f.name for f in funcs}
    funcs += [n for n in pkg.values() if isinstance(n, ast.FunctionDef) and n.name not in stubbed]
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    out += ["## Functions", ""]
    for f in funcs:
        wrapper = pkg.get(f.name)
        shown = wrapper if isinstance(wrapper, ast.FunctionDef) else f
        out += [f"### `fovea.{f.name}`", "", "```python", signature(shown, False), "```", ""]
        text = doc(wrapper) if wrapper is not None and doc(wrapper) else doc(f)
        if text:
            out += [text, ""]
    out += ["## Classes", ""]
    for c in classes:
        out += [f"### `fovea.{c.name}`", ""]
        wrapper = pkg.get(c.name)
        text = doc(wrapper) if wrapper is not None and doc(wrapper) else doc(c)
        if text:
            out += [text, ""]
        props, methods = [], []
        for n in c.body:
            if not isinstance(n, ast.FunctionDef):
                continue
            is_prop = any(isinstance(d, ast.Name) and d.id == "property" for d in n.decorator_list)
            (props if is_prop else methods).append(n)
        if props:
            out += ["| property | type | |", "| --- | --- | --- |"]
            for p in props:
                t = ast.unparse(p.returns) if p.returns else ""
                out.append(f"| `{p.name}` | `{t}` | {' '.join(doc(p).split()).replace('|', '/')} |")
            out.append("")
        for m in methods:
            out += ["```python", signature(m, True), "```", ""]
            if doc(m):
                out += [doc(m), ""]
    return "\n".join(out).rstrip() + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    text = render()
    if a.check:
        have = open(PAGE, encoding="utf-8").read() if os.path.exists(PAGE) else None
        if have != text:
            print("gen_python_reference: error: docs/reference/python-api.md is stale; run "
                  "/usr/bin/python3 scripts/gen_python_reference.py", file=sys.stderr)
            return 1
        print("gen_python_reference: docs/reference/python-api.md is up to date")
        return 0
    open(PAGE, "w", encoding="utf-8").write(text)
    print("wrote docs/reference/python-api.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
