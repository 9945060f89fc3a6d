"""`mltool export h5` and `mltool import h5` run with --json for the h5 tests
(export_h5_test.py, export_h5_layouts_test.py): the exit code wanted, and on success every
field of the summary (docs/export.md, docs/import.md)."""
from cli_common import expect, run_json

EXPORT_FIELDS = ("command", "output", "format", "layout", "dtype", "encoder", "status", "slides",
                 "written", "resumed", "rows", "dims", "invalid_rows", "no_mpp", "coordinates",
                 "seconds")
IMPORT_FIELDS = ("command", "output", "input", "status", "layout", "dtype", "encoder", "files",
                 "slides", "empty", "rows", "dims", "resumed_from", "seconds")


def a_slides(tmp):
    """make_slides.generate's specs of the slides both tests tile: A (2048 x 1536) and A-2
    (1024 x 768), 0.25 µm/px, tissue nearly everywhere, levels down to 256 pixels."""
    return [
        ["generic_tiff", [tmp("A.tif"), 2048, 1536, 0.25, [(0, 0, 2048, 1280)]],
         {"min_level": 256}],
        ["generic_tiff", [tmp("A-2.tif"), 1024, 768, 0.25, [(0, 0, 1024, 768)]],
         {"min_level": 256}],
    ]


def _run(what, args, fields, code_wanted):
    code, s, err = run_json(args + ["--json"])
    expect(code == code_wanted, f"{what} exits {code_wanted} (got {code}): {err[-1500:]}")
    if code == 0:
        missing = [f for f in fields if f not in s]
        expect(not missing, f"{what}: the summary lacks {missing}: {s}")
    return s, err


def export(mltool, features, out, *args, code_wanted=0):
    """(summary, stderr) of `mltool export h5 FEATURES -o OUT ARGS`."""
    return _run(f"export h5 {' '.join(args)}", [mltool, "export", "h5", features, "-o", out,
                                                *args], EXPORT_FIELDS, code_wanted)


def import_h5(mltool, d, out, *args, code_wanted=0):
    """(summary, stderr) of `mltool import h5 D -o OUT ARGS`."""
    return _run(f"import h5 {d} {' '.join(args)}", [mltool, "import", "h5", d, "-o", out, *args],
                IMPORT_FIELDS, code_wanted)
