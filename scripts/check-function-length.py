#!/usr/bin/env python3
"""Fail when a function in lib/ or apps/ has more than 100 lines of code.

Relies on the tree being clang-formatted (scripts/check-format.sh): a function definition
starts at column 0 (namespaces are not indented) and its body ends with the first `}` at
column 0. Lines of code exclude blank lines and lines holding only a comment; a lambda or a
local struct counts toward the function that holds it.

  scripts/check-function-length.py [--max N] [--list K]   (--list: the K longest, no check)
"""
import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOT_FUNCTION = re.compile(r"^(namespace|struct|class|enum|union|extern|template\s*<[^>]*>\s*(struct|class))\b")


def functions(path):
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line[:1] in ("", " ", "#", "/", "}", "{") or NOT_FUNCTION.match(line):
            i += 1
            continue
        # a declaration at column 0: read on to its `;` (not a definition) or its `{`
        start, j = i, i
        while j < len(lines) and not lines[j].rstrip().endswith((";", "{", "}")):
            j += 1
        if j >= len(lines) or not lines[j].rstrip().endswith("{") or "(" not in " ".join(lines[i:j + 1]) \
                or "=" in " ".join(lines[i:j + 1]).split("(")[0]:
            i = j + 1
            continue
        k = j + 1
        while k < len(lines) and not lines[k].startswith("}"):
            k += 1
        body = [l.strip() for l in lines[j + 1:k]]
        code = sum(1 for l in body if l and not l.startswith("//"))
        signature = re.sub(r"\s+", " ", " ".join(l.strip() for l in lines[start:j + 1]))
        m = re.search(r"([\w:~<>=!+\-*/\[\]]+)\s*\(", signature)
        yield (m.group(1) if m else signature[:60]), start + 1, code
        i = k + 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max", type=int, default=100)
    ap.add_argument("--list", type=int, default=0)
    args = ap.parse_args()
    found = []
    for top in ("lib", "apps"):
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix in (".cpp", ".hpp", ".cu", ".h", ".cc"):
                for name, line, code in functions(path):
                    found.append((code, f"{path.relative_to(ROOT)}:{line}", name))
    found.sort(reverse=True)
    if args.list:
        for code, where, name in found[:args.list]:
            print(f"{code:5d}  {where}  {name}")
        return 0
    over = [f for f in found if f[0] > args.max]
    for code, where, name in over:
        print(f"{where}: {name} has {code} lines of code (at most {args.max}); split it into its phases",
              file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
