"""The docs agree with the options as declared: each command page's synopsis (the first code
block of docs/CMD.md, or of a subcommand's section: `## mltool export geojson`) names every option `mltool help CMD --json` lists, and nothing else;
an option with allowed values shows them all, in order (`--feed auto|pinned|host|sync`);
an option with a default shows it or a placeholder (`--epochs 10`, `--shard I/N`). And the
run.json schema lists train's recorded options with the same allowed values.

    options_docs_test.py MLTOOL DOCS_DIR SCHEMAS_DIR
"""
import json
import os
import re
import sys

from cli_common import expect, run

mltool, docs, schemas = sys.argv[1:4]
PAGES = {"info": "info.md", "tile": "tile.md", "extract": "extract.md", "pack": "pack.md", "inspect": "inspect.md",
         "train": "train.md", "predict": "predict.md", "index": "dali-index.md", "export h5": "export.md",
         "import h5": "import.md", "export geojson": "export.md", "view": "view.md"}
SHARED = {"--threads", "--json", "--verbose", "--quiet", "-v", "-q", "--log-format"}  # docs/cli.md


def synopsis(page, cmd):
    """The first code block of the page that starts with `mltool CMD` (a page of subcommands,
    docs/export.md, has one per subcommand), else the page's first block."""
    blocks, block, plain = [], None, False
    for line in open(os.path.join(docs, page)):  # fences pair up in order: ```sh ... ``` too
        if line.startswith("```"):
            if block is None:
                block, plain = [], line.strip() == "```"
            else:
                if plain:
                    blocks.append("".join(block))
                block = None
        elif block is not None:
            block.append(line)
    expect(blocks, f"docs/{page} starts with a synopsis block")
    mine = [b for b in blocks if re.match(rf"mltool {re.escape(cmd)}(\s|$)", b)]
    return mine[0] if mine else blocks[0]


def occurrences(text, name):
    """The token after each `name` in the synopsis ('' when none follows)."""
    return [m.group(1) or "" for m in re.finditer(re.escape(name) + r"(?![\w-])(?:[ =]([^\s\]\[]+))?", text)]


code, _, _ = run([mltool, "--help"])
for cmd, page in PAGES.items():
    code, out, err = run([mltool, "help", *cmd.split(), "--json"])
    expect(code == 0, f"mltool help {cmd} --json exits 0: {err}")
    options = json.loads(out)
    text = synopsis(page, cmd)
    declared = set()
    for o in options:
        if o["positional"]:
            continue
        names = o["names"]
        declared.update(names)
        if SHARED & set(names):
            continue
        name = names[-1]
        after = occurrences(text, name)
        if not after and len(names) > 1:
            after = occurrences(text, names[0])
        expect(after, f"docs/{page}: the synopsis does not name {name} ({o['help']})")
        if o["flag"]:
            continue
        if "choices" in o:
            want = "|".join(o["choices"])
            expect(any(a == want or a.startswith(want + "|") for a in after),
                   f"docs/{page}: {name} should show its values {want}, shows {after}")
        elif "default" in o:
            ok = any(a == o["default"] or re.search(r"[A-Z]", a) for a in after)
            expect(ok, f"docs/{page}: {name} shows {after}, but its default is {o['default']}")
    for m in re.finditer(r"(?<![\w-])(--[a-z][\w-]*)", text):
        expect(m.group(1) in declared, f"docs/{page}: the synopsis names {m.group(1)}, "
                                       f"which mltool {cmd} does not have")

# train's run.json: the options it records are the schema's, with the same values.
code, out, _ = run([mltool, "help", "train", "--json"])
train = {o["names"][-1][2:].replace("-", "_"): o for o in json.loads(out) if not o["positional"]}
schema = json.load(open(os.path.join(schemas, "train-run.schema.json")))
for section in ("options", "runtime"):
    for key, prop in schema["properties"][section]["properties"].items():
        o = train.get(key)
        if o and "choices" in o and "enum" in prop:
            allowed = [c for c in o["choices"] if c != "auto"]  # auto is resolved before recording
            expect(prop["enum"] == allowed,
                   f"train-run.schema.json: {section}.{key} allows {prop['enum']}, "
                   f"--{key.replace('_', '-')} {allowed}")
print("ok")
