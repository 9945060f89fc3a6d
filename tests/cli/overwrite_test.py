"""--overwrite never empties an output for a typo (docs/cli.md#overwrite): for every command
that takes --overwrite — found in the program's own help, so that a command that gains the
option without a case here fails this test — a valid output is made, then the command is run
into it with --overwrite and a mistyped input (a slide path, a store, a model, a labels table,
a DICOMweb token file, ...). Each such run must fail, name the bad input, log no "emptied", and
leave every file of the output as it was, byte for byte.

    overwrite_test.py MLTOOL [CHECK...]
"""
import csv
import json
import os
import re
import shutil
import sys

from cli_common import expect, run, run_checks, tmp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "fixtures"))
import make_slides  # noqa: E402

mltool = os.path.abspath(sys.argv[1])
only = set(sys.argv[2:])

CPU = ["--device", "cpu", "--math-threads", "1"]
MODEL = ["--model", "builtin:color-texture"]
# A series URL of a server that is not there: the token file is read before any request.
URL = "http://127.0.0.1:9/dicom-web/studies/1.2.3/series/4.5.6"


def slides():
    return [tmp("slides", f"S{i}.tif") for i in range(2)]


def C(name):
    """A fixture output in clean/: the inputs of the cases, and what each output starts as."""
    return tmp("clean", name)


def mltool_ok(*args):
    code, _, err = run([mltool, *args])
    expect(code == 0, f"mltool {' '.join(args[:2])}: exit {code}: {err.strip()[-1500:]}")


def fixtures():
    """A valid output of every command in clean/: tiles.lmdb, feat/, ds/, run/, pred/, h5/,
    imp/, gj/, site/."""
    os.makedirs(tmp("slides"))
    os.makedirs(tmp("clean"))
    make_slides.generate([["generic_tiff", [p, 1024, 768, 0.25, [(0, 0, 1024 - 256 * i, 768)]]]
                          for i, p in enumerate(slides())])
    mltool_ok("tile", *slides(), "-o", C("tiles.lmdb"), "--mpp", "0.5")
    mltool_ok("extract", C("tiles.lmdb"), "-o", C("feat"), *MODEL, *CPU)
    keys = open(C("feat/keys.txt")).read().split()
    with open(tmp("labels.csv"), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["key", "label"])
        for i, k in enumerate(keys):
            w.writerow([k, "tumor" if i % 2 else "normal"])
    with open(tmp("no_label_column.csv"), "w") as f:
        f.write("key,diagnosis\n" + keys[0] + ",tumor\n")
    mltool_ok("pack", C("feat"), "--labels", tmp("labels.csv"), "-o", C("ds"), "--seed", "1",
              "--split", "train=0.5,val=0.5")
    with open(tmp("mlp.json"), "w") as f:
        json.dump({"family": "mlp", "hidden": [4]}, f)
    mltool_ok("train", C("ds"), "--model", tmp("mlp.json"), "-o", C("run"), "--epochs", "1",
              *CPU)
    mltool_ok("predict", C("run"), C("feat"), "-o", C("pred"), *CPU)
    mltool_ok("export", "h5", C("feat"), "-o", C("h5"))
    mltool_ok("import", "h5", C("h5"), "-o", C("imp"))
    mltool_ok("export", "geojson", C("tiles.lmdb"), "-o", C("gj"))
    mltool_ok("view", C("tiles.lmdb"), "-o", C("site"))
    return f"{len(keys)} tiles"


# Per command: its output (a copy of clean/NAME in work/), and runs into it with --overwrite,
# each (what, args, the bad input the message must name).
def cases():
    s0 = slides()[0]
    return {
        "tile": ("tiles.lmdb", [
            ("a mistyped slide path", [s0, tmp("slides", "S9-typo.tif"), "--mpp", "0.5"],
             "S9-typo.tif"),
            ("a missing --dicomweb-token-file",
             [URL, "--dicomweb-token-file", tmp("nope-token.txt"), "--mpp", "0.5"],
             "nope-token.txt"),
            ("--merge of a mistyped store", ["--merge", tmp("nope-shard.lmdb")], "nope-shard.lmdb"),
        ]),
        "extract": ("feat", [
            ("a mistyped tile store", [tmp("nope-tiles.lmdb"), *MODEL, *CPU], "nope-tiles.lmdb"),
            ("a missing --model file", [C("tiles.lmdb"), "--model", tmp("nope-model.pt"), *CPU],
             "nope-model.pt"),
            ("a mistyped built-in --model", [C("tiles.lmdb"), "--model", "builtin:colour",
                                             *CPU], "builtin:colour"),
            ("a mistyped slide path", [s0, tmp("slides", "S8-typo.tif"), *MODEL, *CPU],
             "S8-typo.tif"),
            ("a missing --stain-reference", [C("tiles.lmdb"), *MODEL, *CPU, "--stain-norm",
                                             "macenko", "--stain-reference",
                                             tmp("nope-reference.png")], "nope-reference.png"),
        ]),
        "pack": ("ds", [
            ("a mistyped feature store", [tmp("nope-feat"), "--labels", tmp("labels.csv")],
             "nope-feat"),
            ("a mistyped --labels", [C("feat"), "--labels", tmp("nope-labels.csv")],
             "nope-labels.csv"),
            ("a labels table without the label column",
             [C("feat"), "--labels", tmp("no_label_column.csv")], "no_label_column.csv"),
        ]),
        "train": ("run", [
            ("a mistyped dataset", [tmp("nope-ds"), "--model", tmp("mlp.json"), *CPU], "nope-ds"),
            ("a missing --model spec", [C("ds"), "--model", tmp("nope-spec.json"), *CPU],
             "nope-spec.json"),
        ]),
        "predict": ("pred", [
            ("a mistyped run", [tmp("nope-run"), C("feat"), *CPU], "nope-run"),
            ("a mistyped feature store", [C("run"), tmp("nope-feat"), *CPU], "nope-feat"),
        ]),
        "export h5": ("h5", [
            ("a mistyped feature store", [tmp("nope-feat")], "nope-feat"),
        ]),
        "import h5": ("imp", [
            ("a mistyped input directory", [tmp("nope-h5")], "nope-h5"),
        ]),
        "export geojson": ("gj", [
            ("a mistyped tile store", [tmp("nope-geo.lmdb")], "nope-geo.lmdb"),
        ]),
        "view": ("site", [
            ("a mistyped tile store", [tmp("nope-view.lmdb")], "nope-view.lmdb"),
            ("a mistyped --roi", [C("tiles.lmdb"), "--roi", tmp("nope-roi.geojson")],
             "nope-roi.geojson"),
        ]),
    }


def subcommands(text):
    parts = text.split("Subcommands:", 1)
    if len(parts) < 2:
        return []
    return [m.group(1) for m in re.finditer(r"^\s+(\S+)\s", parts[1], re.M) if m.group(1) != "help"]


def commands_taking_overwrite():
    """Every command and subcommand (`export h5`) whose help lists --overwrite as an option."""
    code, top, err = run([mltool, "--help"])
    expect(code == 0, f"mltool --help: exit {code}: {err}")
    found = []
    pending = [[c] for c in subcommands(top)]
    while pending:
        words = pending.pop(0)
        code, text, err = run([mltool, "help", *words])
        expect(code == 0, f"mltool help {' '.join(words)}: exit {code}: {err}")
        subs = subcommands(text)
        pending += [[*words, s] for s in subs]
        if not subs and re.search(r"^\s*--overwrite\b", text, re.M):
            found.append(" ".join(words))
    return found


def files_of(path):
    """{relative path: bytes} of every file under `path` (a directory or one file)."""
    if os.path.isfile(path):
        return {"": open(path, "rb").read()}
    out = {}
    for root, _, names in os.walk(path):
        for n in names:
            full = os.path.join(root, n)
            out[os.path.relpath(full, path)] = open(full, "rb").read()
    return out


def check_every_command_has_a_case():
    taking = commands_taking_overwrite()
    expect(taking, "no command's help lists --overwrite")
    known = cases()
    missing = sorted(set(taking) - set(known))
    expect(not missing, f"commands taking --overwrite without a case in {__file__}: {missing}")
    stale = sorted(set(known) - set(taking))
    expect(not stale, f"cases for commands whose help lists no --overwrite: {stale}")
    return taking


def check_typos_leave_outputs():
    problems = []
    for command, (output, runs) in cases().items():
        out = tmp("work", output)
        before = files_of(C(output))
        expect(before, f"{command}: the fixture output {C(output)} holds no file")
        for what, args, bad in runs:
            shutil.rmtree(out, ignore_errors=True)  # each run starts from the valid output
            shutil.copytree(C(output), out)
            code, _, err = run([mltool, *command.split(), *args, "-o", out, "--overwrite"])
            after = files_of(out)
            changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
            ok = (code != 0 and bad in err and "emptied" not in err and not changed)
            if not ok:
                problems.append(f"{command} --overwrite with {what}: exit {code}, "
                                f"names {bad}: {bad in err}, changed {changed[:5]}: "
                                f"{err.strip()[-400:]}")
    expect(not problems, "\n  ".join(["outputs touched or errors unclear:"] + problems))


if __name__ == "__main__":
    run_checks("--overwrite checks before it empties", [check_every_command_has_a_case,
                                                       check_typos_leave_outputs], only, fixtures)
