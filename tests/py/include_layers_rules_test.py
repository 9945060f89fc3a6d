#!/usr/bin/env python3
"""include_layers_test.py's rules on a made-up repository: an include of another module's
private header by a relative path is refused naming file:line, and so is a `may include`
entry of the table that no include uses; a tree that keeps the table passes."""
import pathlib
import subprocess
import sys
import tempfile

CHECKER = pathlib.Path(__file__).resolve().parent / "include_layers_test.py"
TABLE = """| module | holds | may include | namespace |
|---|---|---|---|
| `util/` | u | nothing | |
| `cuda/` | c | nothing | |
| `train/` | t | `util/`, `cuda/` | |
"""


def check(files):
    """(exit code, stderr) of the checker on a repository of `files` {path: text}."""
    with tempfile.TemporaryDirectory() as d:
        repo = pathlib.Path(d)
        (repo / "docs").mkdir()
        (repo / "docs/development.md").write_text(TABLE)
        for path, text in files.items():
            (repo / path).parent.mkdir(parents=True, exist_ok=True)
            (repo / path).write_text(text)
        r = subprocess.run([sys.executable, str(CHECKER), str(repo)], capture_output=True, text=True)
        return r.returncode, r.stderr


def main():
    base = {"lib/util/u.cpp": "", "lib/cuda/k.hpp": "", "lib/include/mltool/cuda/k.hpp": "",
            "lib/include/mltool/util/u.hpp": ""}
    ok = dict(base, **{"lib/train/t.cpp": '#include "mltool/util/u.hpp"\n#include "mltool/cuda/k.hpp"\n'})
    bad = []
    code, err = check(ok)
    if code != 0:
        bad.append(f"a tree that keeps the table failed: {err}")
    private = dict(base, **{"lib/train/t.cpp": '#include "mltool/util/u.hpp"\n\n#include "../cuda/k.hpp"\n'})
    code, err = check(private)
    if code == 0 or "lib/train/t.cpp:3: includes ../cuda/k.hpp, a private header of cuda/" not in err:
        bad.append(f"a relative include of cuda's private header passed: {err}")
    unused = dict(base, **{"lib/train/t.cpp": '#include "mltool/util/u.hpp"\n'})
    code, err = check(unused)
    if code == 0 or "train/ may include cuda/, but no file of train/ includes a header of cuda/" not in err:
        bad.append(f"a permission nothing uses passed: {err}")
    for b in bad:
        print("FAIL:", b, file=sys.stderr)
    print("ok: include_layers' rules" if not bad else f"{len(bad)} rule(s) not enforced")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
