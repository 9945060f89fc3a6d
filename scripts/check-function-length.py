#!/usr/bin/env python3
"""Fail when a function in lib/ or apps/ is longer than 80 lines or has a cyclomatic
complexity over 25.

Both are counted as lizard (https://github.com/terryyin/lizard) counts them, so `lizard -C 25
-L 80 lib apps` agrees (checked on this tree; the script itself needs only Python):
- length: the lines from the function's name to its closing brace, comments and blank lines
  included (a `template <...>` line or a return type on the line above is not counted);
- complexity: 1 + each `if`, `for`, `while`, `catch`, `case`, `&&`, `||` and `?` in the
  function, and each `#if`, `#ifdef` and `#elif` inside it; an `&&` that declares an rvalue
  reference bound by `=` (`auto&& x = ...`) does not count.
Functions are found anywhere, member functions defined in a class body included; a lambda or
a local struct counts toward the function that holds it.

  scripts/check-function-length.py [--max N] [--max-ccn C] [--list K]
  (--list: the K longest and the K most complex, no check)
"""
import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCES = (".cpp", ".hpp", ".cu", ".cuh", ".h", ".cc")

TOKEN = re.compile(r"""
    (?P<raw>R"(?P<delim>[^()\\\s]{0,16})\((?:.|\n)*?\)(?P=delim)")   # raw string
  | (?P<str>"(?:\\.|[^"\\\n])*")
  | (?P<chr>'(?:\\.|[^'\\\n])+')
  | (?P<line_comment>//[^\n]*)
  | (?P<block_comment>/\*(?:.|\n)*?\*/)
  | (?P<pp>^[ \t]*\#(?:[^\n\\]|\\(?:.|\n))*)                       # a directive, continued
  | (?P<num>\.?\d(?:[\w.']|[eEpP][+-])*)
  | (?P<word>[A-Za-z_]\w*)
  | (?P<op>::|->\*?|&&|\|\||<<=|>>=|[=!<>+\-*/%&|^]=|<<|\+\+|--|[{}()\[\];:,=?<>&])
  | (?P<nl>\n)
  | (?P<other>\S)
""", re.VERBOSE | re.MULTILINE)

CONDITIONS = {"if", "for", "while", "catch", "case", "&&", "||", "?"}
PP_CONDITION = re.compile(r"\s*#\s*(if|ifdef|elif)\b")
NOT_FUNCTION_HEAD = {"namespace", "class", "struct", "enum", "union"}
ACCESS = {"public", "protected", "private"}
QUALIFIERS = {"const", "noexcept", "override", "final", "mutable", "volatile", "&", "&&"}


def tokens(text):
    """(kind, text, line) for each token; comments dropped, strings kept as one token."""
    line = 1
    for m in TOKEN.finditer(text):
        kind, value = m.lastgroup, m.group(0)
        if kind not in ("line_comment", "block_comment", "nl"):
            yield kind, value, line
        line += value.count("\n")


class Function:
    def __init__(self, name, start):
        self.name, self.start, self.end, self.ccn = name, start, start, 1


def skip_group(words, i):
    """The index after the bracketed group that opens at words[i] (`(`, `[` or `<`)."""
    close = {"(": ")", "[": "]", "<": ">"}[words[i]]
    depth = 0
    for j in range(i, len(words)):
        depth += words[j] == words[i]
        depth -= words[j] == close
        if depth == 0:
            return j + 1
    return len(words)


def parameters_at(words):
    """The index of the `(` that opens a function head's parameters: the first `(` that is
    not part of `template <...>`, `__attribute__((...))`, `alignas(...)` or `[[...]]`."""
    i = 0
    while i < len(words):
        w = words[i]
        if w == "template" and i + 1 < len(words) and words[i + 1] == "<":
            i = skip_group(words, i + 1)
        elif w in ("__attribute__", "alignas", "__declspec") and i + 1 < len(words) and \
                words[i + 1] == "(":
            i = skip_group(words, i + 1)
        elif w == "[" and i + 1 < len(words) and words[i + 1] == "[":
            i = skip_group(words, i)
        elif w == "(":
            return i
        else:
            i += 1
    return -1


def name_at(words, i):
    """The index where the (qualified) name before words[i] (the parameters) begins."""
    j = i - 1
    if j >= 1 and words[j - 1] == "operator":  # operator==, operator(), operator[]
        j -= 1
    elif j >= 2 and words[j] in (")", "]") and words[j - 2] == "operator":
        j -= 2
    while j >= 1 and words[j - 1] in ("::", "~"):
        j -= 2 if words[j - 1] == "::" else 1
    return max(j, 0)


def is_function_head(words):
    """Whether `{` after these tokens opens a function body (else a class, a namespace, an
    initializer)."""
    i = parameters_at(words)
    first = 0
    while first < len(words) and words[first] == "template" and words[first + 1:first + 2] == ["<"]:
        first = skip_group(words, first + 1)
    if i < 0 or first >= len(words) or words[first] in NOT_FUNCTION_HEAD:
        return False
    depth = 0
    for k, w in enumerate(words[:i]):  # a top-level `=` before the parameters: a variable
        depth += w == "<"
        depth -= w == ">"
        if w == "=" and depth <= 0 and words[k - 1] != "operator":
            return False
    last = words[-1]
    if last in (")", "}") or last in QUALIFIERS:
        return True
    # a trailing return type: `) -> T {`
    close = len(words) - 1 - words[::-1].index(")")
    return "->" in words[close:]


def in_head_initializer(words):
    """Whether a `{` now opens an initializer inside the head: within parentheses, or after a
    name in a constructor's member initializer list (`) : a_(x), b_{y}`)."""
    if words.count("(") > words.count(")"):
        return True
    prev = words[-1] if words else ""
    return bool(re.match(r"\w", prev) or prev == ">") and any(
        words[k] == ":" and words[k - 1] == ")" for k in range(1, len(words)))


def functions(path):
    """Each function definition in the file: name, first and last line, length in lines,
    complexity."""
    toks = list(tokens(path.read_text()))
    found = []
    stack = []  # per open `{`: "function", "scope" (class, namespace), "data" (an initializer
    #             at namespace scope), "head" (an initializer inside a head), "block"
    head = []   # tokens since the last `;`, `{` or `}` at class or namespace scope
    current = None
    for n, (kind, value, line) in enumerate(toks):
        if kind == "pp":
            if current is not None and PP_CONDITION.match(value):
                current.ccn += 1
            continue
        if current is not None:
            current.end = line
            if value in CONDITIONS and kind in ("word", "op") and \
                    not (value == "&&" and binds_rvalue_ref(toks, n)):
                current.ccn += 1
            if value == "{":
                stack.append("block")
            elif value == "}" and stack.pop() == "function":
                found.append(current)
                current, head = None, []
            continue
        if stack and stack[-1] == "data":  # inside an initializer at namespace scope
            if value == "{":
                stack.append("data")
            elif value == "}":
                stack.pop()
            continue
        words = [v for _, v, _ in head]
        if value == "{" and in_head_initializer(words):
            stack.append("head")
            head.append((kind, value, line))
        elif value == "{" and is_function_head(words):
            name = name_at(words, parameters_at(words))
            current = Function("".join(words[name:parameters_at(words)]), head[name][2])
            stack.append("function")
        elif value == "{":
            stack.append("data" if "=" in words or "return" in words else "scope")
            head = []
        elif value == "}":
            if stack and stack.pop() == "head":
                head.append((kind, value, line))
            else:
                head = []
        elif value == ";" or (value == ":" and words and words[-1] in ACCESS):
            head = []
        else:
            head.append((kind, value, line))
    return [(f.name, f.start, f.end, f.end - f.start + 1, f.ccn) for f in found]


def binds_rvalue_ref(toks, n):
    """Whether the `&&` at toks[n] declares a reference bound by `=` (lizard's rule: the next
    of `=`, `;`, `{`, `}`, `)` is `=`)."""
    for _, v, _ in toks[n + 1:]:
        if v in ("=", ";", "{", "}", ")"):
            return v == "="
    return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max", type=int, default=80, help="lines per function")
    ap.add_argument("--max-ccn", type=int, default=25, help="cyclomatic complexity per function")
    ap.add_argument("--list", type=int, default=0)
    args = ap.parse_args()
    found = []
    for top in ("lib", "apps"):
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix in SOURCES:
                for name, line, _, code, ccn in functions(path):
                    found.append((code, ccn, f"{path.relative_to(ROOT)}:{line}", name))
    if args.list:
        for title, key in (("lines", 0), ("cyclomatic complexity", 1)):
            print(f"{title}:")
            for f in sorted(found, key=lambda f: f[key], reverse=True)[:args.list]:
                print(f"{f[key]:5d}  {f[2]}  {f[3]}")
        return 0
    bad = 0
    for code, ccn, where, name in sorted(found, reverse=True):
        if code > args.max:
            print(f"{where}: {name} is {code} lines long (at most {args.max}); "
                  "split it into its phases", file=sys.stderr)
            bad += 1
        if ccn > args.max_ccn:
            print(f"{where}: {name} has a cyclomatic complexity of {ccn} (at most "
                  f"{args.max_ccn}); split it into its phases", file=sys.stderr)
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
