#!/usr/bin/env python3
"""The layer rules of docs/development.md against every include of lib/ and apps/.

Reads the table of modules in docs/development.md (its `may include` column), maps each file
to its module (lib/<module>/, lib/include/mltool/<module>/, apps/) and each `#include` of
`mltool/...` or of a relative path to the module of the file it names, and fails naming
file:line for each include of a module the table does not allow, and for each include of
another module's private header (lib/<module>/X, by a relative path such as `../cuda/X.hpp`):
what a module offers others is in lib/include/mltool/<module>/. It also fails for each
permission of the table that no include uses (a `may include` entry nothing needs), so the
table says what the code does. Includes of files outside lib/ and apps/ (system headers,
generated protobuf code, third_party/) are not checked.

  tests/py/include_layers_test.py [REPO]   (default: the checkout this file is in)
"""
import pathlib
import re
import sys

SOURCES = (".cpp", ".hpp", ".h", ".cc", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]')
DOC = "docs/development.md"
# A module's entry point: inside the module only the files that implement it include it (the
# pieces below it take the job from train_job.hpp and progress.hpp), so no arrow points up.
ENTRY_POINTS = {("train", "train.hpp"): {"train.cpp", "report.cpp", "cross_validate.cpp"}}


def read_rules(repo):
    """{module: {other module: None (all of it) or the set of its headers it may include}},
    from the table in DOC whose header has the columns `module` and `may include`; in that
    column `` `io/` `` allows a module, `` `slide/tile_pixels.hpp` `` one header of it."""
    lines = (repo / DOC).read_text().splitlines()
    for i, line in enumerate(lines):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and "module" in cells and "may include" in cells:
            name_col, rule_col = cells.index("module"), cells.index("may include")
            break
    else:
        sys.exit(f"{DOC}: no table with the columns `module` and `may include`")
    rules = {}
    for line in lines[i + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        module = re.match(r"`(\w+)/`", cells[name_col])
        if not module:
            sys.exit(f"{DOC}: a row of the layer table names no `module/`: {line}")
        allowed = rules.setdefault(module.group(1), {})
        for other, header in re.findall(r"`(\w+)/([\w./]*)`", cells[rule_col]):
            if not header:
                allowed[other] = None
            elif allowed.get(other, set()) is not None:
                allowed.setdefault(other, set()).add(header)
    for module, allowed in rules.items():
        unknown = set(allowed) - set(rules)
        if unknown:
            sys.exit(f"{DOC}: {module}/ may include {sorted(unknown)}, which the table lacks")
    return rules


def describe(allowed):
    """`util/, io/, slide/tile_pixels.hpp` for a row's permissions."""
    if not allowed:
        return "no other module"
    return ", ".join(f"{m}/" if h is None else ", ".join(f"{m}/{x}" for x in sorted(h))
                     for m, h in allowed.items())


def module_of(repo, path):
    """(module, path within it) of a file of lib/ or apps/, or (None, None) for a file
    elsewhere: lib/<module>/X and lib/include/mltool/<module>/X are both X of <module>."""
    parts = path.relative_to(repo).parts
    if parts[0] == "apps":
        return "apps", "/".join(parts[1:])
    if parts[0] != "lib" or len(parts) < 3:
        return None, None
    if parts[1] == "include":
        if len(parts) > 4 and parts[2] == "mltool":
            return parts[3], "/".join(parts[4:])
        return None, None
    return parts[1], "/".join(parts[2:])


def target_of(repo, path, name):
    """The file an include names, if it is in the repository: `mltool/...` from
    lib/include/, anything else relative to the including file."""
    candidates = [path.parent / name]
    if name.startswith("mltool/"):
        candidates = [repo / "lib" / "include" / name]
    for c in candidates:
        c = pathlib.Path(*_normalised(c.parts))
        if c.is_file():
            return c
    if name.startswith("mltool/"):  # a header that does not exist yet still names its module
        return repo / "lib" / "include" / name
    return None


def _normalised(parts):
    out = []
    for p in parts:
        if p == "..":
            out.pop()
        elif p != ".":
            out.append(p)
    return out


def is_private(repo, target):
    """Whether `target` is a module's internal header: under lib/<module>/, not lib/include/."""
    parts = target.relative_to(repo).parts
    return parts[0] == "lib" and parts[1] != "include"


def violations(repo, rules, used):
    """The includes against `rules`; `used` gets {module: {other: set of headers}} of every
    include of another module."""
    found, unknown = [], set()
    for top in ("lib", "apps"):
        for path in sorted((repo / top).rglob("*")):
            if path.suffix not in SOURCES:
                continue
            module, inner = module_of(repo, path)
            base = pathlib.PurePath(inner).name if inner else inner
            if module is None:
                continue
            if module not in rules:
                unknown.add(module)
                continue
            allowed = rules[module]
            for n, line in enumerate(path.read_text().splitlines(), 1):
                m = INCLUDE.match(line)
                target = target_of(repo, path, m.group(1)) if m else None
                if target is None:
                    continue
                other, header = module_of(repo, target)
                users = ENTRY_POINTS.get((other, header))
                if other == module and users is not None and base not in users:
                    found.append(f"{path.relative_to(repo)}:{n}: includes {m.group(1)}, the "
                                 f"entry point above it; only {sorted(users)} may ({__file__})")
                    continue
                if other is None or other == module:
                    continue
                used.setdefault(module, {}).setdefault(other, set()).add(header)
                if is_private(repo, target):
                    found.append(f"{path.relative_to(repo)}:{n}: includes {m.group(1)}, a private "
                                 f"header of {other}/; include its public headers "
                                 f"(lib/include/mltool/{other}/) ({DOC})")
                    continue
                if other in allowed and (allowed[other] is None or header in allowed[other]):
                    continue
                found.append(f"{path.relative_to(repo)}:{n}: includes {m.group(1)} ({other}/); "
                             f"{module}/ may include {describe(allowed)} ({DOC})")
    for module in sorted(unknown):
        found.append(f"{module}/: a module the layer table of {DOC} does not list")
    return found


def unused(rules, used):
    """The permissions of the table that no include uses."""
    found = []
    for module, allowed in rules.items():
        for other, headers in allowed.items():
            have = used.get(module, {}).get(other, set())
            if headers is None and not have:
                found.append(f"{DOC}: {module}/ may include {other}/, but no file of {module}/ "
                             f"includes a header of {other}/: drop it from the table")
            for h in sorted(headers or ()):
                if h not in have:
                    found.append(f"{DOC}: {module}/ may include {other}/{h}, but no file of "
                                 f"{module}/ includes it: drop it from the table")
    return found


def main():
    repo = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else __file__).resolve()
    if len(sys.argv) <= 1:
        repo = repo.parents[2]
    rules = read_rules(repo)
    used = {}
    found = violations(repo, rules, used)
    found += unused(rules, used)
    for f in found:
        print(f, file=sys.stderr)
    print(f"{len(found)} finding(s) against the layers of {DOC}" if found else
          f"every include of lib/ and apps/ keeps the layers of {DOC} ({len(rules)} modules)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
