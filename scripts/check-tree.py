#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The house stays a tree: a static reading of src/*.c.

An arrow A -> B is drawn when A names a function that B alone defines with
external linkage (a call, or a function pointer taken), or includes B.h. Files that reach
each other through such arrows form a circle; the check fails on any circle
and on any src/*.c longer than MAX_LINES lines. It reads the sources as text
(comments, strings and character constants removed; a definition is a name
followed by a parenthesised list and a body at file scope), so it needs no
compiler and no tags program.

Usage: scripts/check-tree.py [ROOT]   (default: the tree this script is in)
       scripts/check-tree.py --arrows     (also print every arrow)
       scripts/check-tree.py --self-test  (the check finds a circle and a
                                           long file it is shown, and
                                           passes a tree without them)
"""
import os
import re
import sys

MAX_LINES = 1300

TOKEN = re.compile(r"""
    (?P<comment>/\*.*?\*/|//[^\n]*)
  | (?P<string>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')
  | (?P<pre>^[ \t]*\#(?:\\\n|[^\n])*)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<punct>[{}();,=\[\]])
""", re.S | re.M | re.X)


def tokens(text):
    """Identifiers and the punctuation that shapes declarations, in order."""
    for m in TOKEN.finditer(text):
        kind = m.lastgroup
        if kind in ("comment", "string", "pre"):
            continue
        yield kind, m.group(kind)


def read_file(path, header=False):
    """Return (functions the file defines for others, every identifier it
    names). A source defines its functions of external linkage; a header
    its static inline functions."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    defined, named, local = set(), set(), set()
    depth = 0          # brace depth
    paren = 0          # parenthesis depth at file scope
    decl = []          # identifiers of the file-scope declaration so far
    candidate = None   # name seen right before a '(' at file scope
    after_params = False
    prev = None
    for kind, tok in tokens(text):
        tagged, prev = prev in ("struct", "union", "enum"), tok
        if kind == "ident":
            if not tagged:   # `struct config_show_row` is no call
                named.add(tok)
            if depth == 0 and paren == 0:
                decl.append(tok)
                after_params = False
            continue
        if depth > 0:
            if tok == "{":
                depth += 1
            elif tok == "}":
                depth -= 1
                if depth == 0:
                    decl, candidate, after_params = [], None, False
            continue
        if tok == "(":
            if paren == 0 and decl and candidate is None:
                candidate = decl[-1]
            paren += 1
        elif tok == ")":
            paren = max(0, paren - 1)
            if paren == 0 and candidate is not None:
                after_params = True
        elif paren > 0:
            continue
        elif tok == "{":
            if after_params and candidate:
                if "static" not in decl if not header else "inline" in decl:
                    defined.add(candidate)
                elif not header:
                    local.add(candidate)
            depth = 1
        elif tok in (";", "="):
            if tok == ";":
                decl = []
            candidate, after_params = None, False
        else:
            after_params = False
    # A static function of the file's own hides a namesake elsewhere.
    return defined, named - local


def circles(graph):
    """Strongly connected components of more than one file (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def self_test():
    """Small trees with a known answer: the check must fail where it should."""
    import contextlib
    import io
    import tempfile

    def tree(files):
        root = tempfile.mkdtemp(prefix="check-tree.")
        for d in ("src", "include"):
            os.mkdir(os.path.join(root, d))
        for path, text in files.items():
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = main([root])
        return rc, out.getvalue()

    base = {
        "src/a.c": "#include \"a.h\"\nstruct a_state { int n; };\nint a_run(int x)\n{\n\treturn b_step(x) + 1;\n}\n",
        "src/b.c": "/* a_run( in a comment is no call */\nstatic int a_run(int y) { return y; }\n"
                   "int b_step(int x)\n{\n\tconst char *s = \"a_run(\";\n\treturn a_run(x) + (s != 0);\n}\n",
        "include/a.h": "struct a_state;\nstatic inline int a_twice(int x) { return 2 * x; }\n",
    }
    rc, out = tree(base)
    assert rc == 0, "a tree without a circle failed:\n" + out
    circle = dict(base)
    circle["src/b.c"] = "int b_step(int x)\n{\n\treturn a_twice(x);\n}\n"
    rc, out = tree(circle)
    assert rc == 1 and "circle of 2 files: a.c, b.c" in out, "an inline function's call was not seen:\n" + out
    circle["src/b.c"] = "int b_step(int x)\n{\n\tint (*f)(int) = a_run;\n\treturn f(x);\n}\n"
    rc, out = tree(circle)
    assert rc == 1 and "b.c -> a.c: a_run" in out, "a function pointer taken was not seen:\n" + out
    long_file = dict(base)
    long_file["src/c.c"] = "\n" * (MAX_LINES + 1)
    rc, out = tree(long_file)
    assert rc == 1 and f"src/c.c: {MAX_LINES + 1} lines" in out, "a long file was not seen:\n" + out
    print("check-tree self-test: passed")
    return 0


def main(argv):
    if "--self-test" in argv:
        return self_test()
    show_arrows = "--arrows" in argv
    args = [a for a in argv if a != "--arrows"]
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    src, inc = os.path.join(root, "src"), os.path.join(root, "include")
    files = sorted(f for f in os.listdir(src) if f.endswith(".c"))
    defs, names, lines = {}, {}, {}
    for f in files:
        path = os.path.join(src, f)
        defs[f], names[f] = read_file(path)
        header = os.path.join(inc, f[:-2] + ".h")
        if os.path.exists(header):
            # What the header names (its prototypes among them) is not a
            # call: a file depends on what its source's code names.
            defs[f] |= read_file(header, header=True)[0]
        with open(path, encoding="utf-8", errors="replace") as fh:
            lines[f] = sum(1 for _ in fh)
    owner = {}
    for f in files:
        for name in defs[f]:
            owner.setdefault(name, []).append(f)
    graph = {f: set() for f in files}
    why = {}
    for f in files:
        for name in names[f]:
            where = owner.get(name)
            if not where or len(where) != 1 or where[0] == f:
                continue
            graph[f].add(where[0])
            why.setdefault((f, where[0]), []).append(name)
    failed = False
    if show_arrows:
        for (a, b), ns in sorted(why.items()):
            print(f"{a} -> {b}: {', '.join(sorted(ns))}")
    for comp in circles(graph):
        failed = True
        members = set(comp)
        print(f"circle of {len(comp)} files: {', '.join(comp)}")
        for (a, b), ns in sorted(why.items()):
            if a in members and b in members:
                print(f"  {a} -> {b}: {', '.join(sorted(ns))}")
    for f in files:
        if lines[f] > MAX_LINES:
            failed = True
            print(f"src/{f}: {lines[f]} lines, over {MAX_LINES}")
    if not failed:
        print(f"tree: {len(files)} files in src/, no circle, none over {MAX_LINES} lines")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
