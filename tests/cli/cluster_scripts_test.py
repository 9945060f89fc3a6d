"""The cluster recipes (scripts/cluster/) against docs/scaling-out.md, without a cluster:
every file is shown in the page exactly as it is (an `<!-- include PATH -->` line, then a
fenced block with the file's text), every shell script and every Job's pod script parses
(`bash -n`), the #SBATCH lines come before the first command, an array's default SHARDS is
its size and a Job's --shards its completions, and no script masks an exit status
(`|| [ $? -eq 4 ]`, `|| true`): Slurm and Kubernetes must see mltool's. The recipes run on a
real Slurm in tests/cluster/slurm_test.py (label slurm).

    cluster_scripts_test.py REPO
"""
import os
import re
import subprocess
import sys

import yaml

from cli_common import expect

REPO = os.path.abspath(sys.argv[1])
SCRIPTS = os.path.join(REPO, "scripts", "cluster")
DOC = os.path.join(REPO, "docs", "scaling-out.md")


def included_blocks(text):
    """{path: the fenced block after its include line}."""
    out = {}
    for m in re.finditer(r"^<!-- include (\S+) -->\n```[a-z]*\n(.*?)^```$", text, re.S | re.M):
        expect(m.group(1) not in out, f"{DOC}: {m.group(1)} included twice")
        out[m.group(1)] = m.group(2)
    return out


def bash_parses(script, what):
    p = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
    expect(p.returncode == 0, f"{what}: bash -n: {p.stderr.strip()}")


def no_masking(script, what):
    for bad in (r"\|\|\s*\[\s*\$\?\s*-eq", r"\|\|\s*true\b", r"set \+e"):
        expect(not re.search(bad, script), f"{what}: masks an exit status ({bad})")


def check_sbatch(name, text):
    bash_parses(text, name)
    no_masking(text, name)
    lines = text.splitlines()
    first_command = next(i for i, l in enumerate(lines) if l.strip() and not l.startswith("#"))
    late = [l for l in lines[first_command:] if l.startswith("#SBATCH")]
    expect(not late, f"{name}: #SBATCH after the first command is ignored by sbatch: {late}")
    directives = [l.split(None, 1)[1] for l in lines if l.startswith("#SBATCH")]
    expect(any(d.startswith("--output=logs/") for d in directives), f"{name}: logs/ output")
    expect("--requeue" in directives and "--open-mode=append" in directives,
           f"{name}: --requeue and --open-mode=append")
    expect(any(d.startswith("--mem=") for d in directives), f"{name}: --mem")
    array = [d for d in directives if d.startswith("--array=")]
    shards = re.search(r"shards=\$\{SHARDS:-(\d+)\}", text)
    if shards:
        expect(array, f"{name}: SHARDS without an --array")
        lo, hi = map(int, re.fullmatch(r"--array=(\d+)-(\d+)", array[0]).groups())
        expect(lo == 0 and hi + 1 == int(shards.group(1)),
               f"{name}: {array[0]} but SHARDS defaults to {shards.group(1)}")
        expect('--shard auto --shards "$shards"' in text, f"{name}: --shard auto --shards")
    if "srun" in text:
        expect('[ "$code" -ne 75 ] || scontrol requeue "$SLURM_JOB_ID"' in text
               and any(d.startswith("--signal=TERM@") for d in directives),
               f"{name}: --signal=TERM@S, and a requeue of itself when its step exits 75")


def check_job(name, text):
    job = yaml.safe_load(text)
    spec = job["spec"]
    expect(job["kind"] == "Job" and spec["completionMode"] == "Indexed", f"{name}: indexed Job")
    pod = spec["template"]["spec"]
    expect(pod["restartPolicy"] == "Never", f"{name}: podFailurePolicy needs restartPolicy Never")
    rules = spec["podFailurePolicy"]["rules"]
    expect(any(r["action"] == "Ignore" and 75 in r["onExitCodes"]["values"] for r in rules),
           f"{name}: exit 75 (preempted) retried without counting")
    (container,) = pod["containers"]
    script = container["args"][0]
    bash_parses(script, name)
    no_masking(script, name)
    n = re.search(r"--shards (\d+)", script)
    expect(n and int(n.group(1)) == spec["completions"],
           f"{name}: --shards {n and n.group(1)} but completions {spec['completions']}")


def main():
    doc = open(DOC).read()
    blocks = included_blocks(doc)
    files = sorted(f"scripts/cluster/{f}" for f in os.listdir(SCRIPTS))
    expect(sorted(blocks) == files, f"{DOC} includes {sorted(blocks)}; scripts/cluster has {files}")
    for path in files:
        text = open(os.path.join(REPO, path)).read()
        expect(blocks[path] == text, f"{DOC}: the block of {path} is not the file as it is")
        (check_job if path.endswith(".yaml") else check_sbatch)(path, text)
    print(f"ok: {len(files)} cluster scripts, as docs/scaling-out.md shows them")


main()
