"""Helpers for the CLI tests: run the real mltool binary and check what a user sees.

Two kinds of script use them:
- flat ones (help_test.py, index_test.py): `expect` raises Failure, and a Failure that ends
  the script prints "FAIL: MESSAGE" (no traceback) and exits 1;
- ones of named checks (tile_test.py, extract_test.py, tests/gpu/extract_gpu_test.py):
  `run_checks` runs the fixtures and each check_* function in a temporary directory (`tmp`
  names files in it), reporting each Failure and going on to the next check.
"""
import csv
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback

TMP = None  # run_checks' temporary directory, while it runs


class Failure(Exception):
    """A check that did not hold; the message says what was seen."""


def expect(cond, message):
    if not cond:
        raise Failure(message)


def _report_failure(kind, value, tb):
    if issubclass(kind, Failure):
        print("FAIL: " + str(value), file=sys.stderr)  # the exit status is 1, as for any
    else:                                               # uncaught exception
        sys.__excepthook__(kind, value, tb)


sys.excepthook = _report_failure


def run(args, stdin=None, env=None):
    """Runs a command, with `env` added to the environment; returns (exit code, stdout,
    stderr) as text."""
    p = subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, **env) if env else None)
    return p.returncode, p.stdout, p.stderr


def run_json(args, stdin=None, env=None):
    """Runs a command that prints one JSON document (`--json`); returns (exit code, the
    document or None when stdout is empty or the run failed, stderr). Anything else on stdout
    is a Failure; so is a failed run's summary that does not hold its error and exit code."""
    code, out, err = run(args, stdin=stdin, env=env)
    doc = None
    if out.strip():
        try:
            doc = json.loads(out)
        except ValueError:
            raise Failure(f"stdout is not one JSON document: {out[:500]!r}")
        if code not in (0, 4):  # a failed run's summary (docs/cli.md): checked, then None
            expect(isinstance(doc, dict) and set(doc) == {"command", "status", "error", "exit_code"}
                   and doc["exit_code"] == code and doc["error"] in err
                   and doc["status"] == ("stopped" if code == 75 else "failed"),
                   f"the --json summary of a run that exited {code}: {doc}")
            doc = None
    return code, doc, err


# Job-array variables a scheduler may have set around the test, emptied so that a command
# run by a test never takes itself for one task of an array.
ARRAY_UNSET = {"SLURM_ARRAY_TASK_ID": "", "JOB_COMPLETION_INDEX": ""}


def command_json(mltool, command, *args, env=None):
    """mltool COMMAND ARGS --json -q outside any job array; (code, summary or None, stderr)."""
    return run_json([mltool, command, *args, "--json", "-q"], env=dict(ARRAY_UNSET, **(env or {})))


def command_ok(mltool, command, *args, env=None):
    """command_json that must succeed; its summary."""
    code, summary, err = command_json(mltool, command, *args, env=env)
    expect(code == 0, f"{command} {' '.join(args)}: exit {code}: {err.strip()}")
    return summary


def csv_rows(path):
    """The rows of a CSV file with a header, as dicts."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# For tests of results that must not depend on the machine: the math library's other code paths, forced the way a different machine would choose them.
MATH_PATHS = [("default", {}), ("MKL_CBWR=COMPATIBLE", {"MKL_CBWR": "COMPATIBLE"}),
              ("ONEDNN_MAX_CPU_ISA=SSE41", {"ONEDNN_MAX_CPU_ISA": "SSE41"}),
              ("OMP_NUM_THREADS=1", {"OMP_NUM_THREADS": "1"})]
# MATH_PATHS' others and those of code outside the math libraries: LibTorch's kernels without
# AVX2 or AVX-512, and glibc's libm without FMA and AVX2 (its x86-64-v3 variants of exp, log,
# pow, atan2, sin, cos), for results made of more than the math libraries' calls.
OTHER_MACHINES = [*MATH_PATHS[1:],
                  ("ATEN_CPU_CAPABILITY=default", {"ATEN_CPU_CAPABILITY": "default"}),
                  ("GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX2,-FMA,-AVX512F",
                   {"GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX2,-FMA,-AVX512F"})]


def tmp(*parts):
    """A path in run_checks' temporary directory."""
    return os.path.join(TMP, *parts)


def run_checks(title, checks, only, fixtures=None, timed=True, teardown=None):
    """In a new temporary directory: runs fixtures() if given, then each of `checks` (check_*
    functions) whose name without check_ is in `only` (all of them if `only` names none), less
    those `only` names with a leading '-' (`-sigterm`: all but check_sigterm), then teardown()
    if given (also after a failure, before the directory is removed).

    Prints "ok: fixtures[, WHAT] (S s)", WHAT being what fixtures() returns if anything, or
    "FAIL: fixtures: MESSAGE" and exits 1 on a Failure (other exceptions go up); per check
    "ok: NAME (S s)", or on stderr "FAIL: NAME: MESSAGE" (a traceback for an exception other
    than Failure). At the end, if any failed, "FAILED: NAMES" on stderr and exit 1, else
    "ok: TITLE (S s)" ("ok: TITLE" if not `timed`)."""
    global TMP
    failed = []
    start = time.time()
    with tempfile.TemporaryDirectory() as d:
        TMP = os.path.realpath(d)
        try:
            _run_in(checks, only, fixtures, failed)
        finally:
            if teardown is not None:
                teardown()
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
        sys.exit(1)
    print(f"ok: {title} ({time.time() - start:.1f} s)" if timed else f"ok: {title}")


def _run_in(checks, only, fixtures, failed):
    """run_checks' fixtures and checks; the names of failed checks go into `failed`."""
    if fixtures is not None:
        t0 = time.time()
        try:
            what = fixtures()
        except Failure as e:
            print(f"FAIL: fixtures: {e}", file=sys.stderr)
            sys.exit(1)
        what = f", {what}" if what else ""
        print(f"ok: fixtures{what} ({time.time() - t0:.1f} s)", flush=True)
    include = {n for n in only if not n.startswith("-")}
    exclude = {n[1:] for n in only if n.startswith("-")}
    for check in checks:
        name = check.__name__[len("check_"):]
        if (include and name not in include) or name in exclude:
            continue
        t0 = time.time()
        try:
            check()
            print(f"ok: {name} ({time.time() - t0:.1f} s)", flush=True)
        except Failure as e:
            failed.append(name)
            print(f"FAIL: {name}: {e}", file=sys.stderr, flush=True)
        except Exception:
            failed.append(name)
            print(f"FAIL: {name}: unexpected error\n{traceback.format_exc()}",
                  file=sys.stderr, flush=True)


_SHIM = {}


def rename_shim():
    """scripts/reliability/kill_at_rename.c built once per run_checks directory: an LD_PRELOAD
    library that SIGKILLs (or SIGSTOPs) a process just before its N-th rename."""
    if TMP not in _SHIM:
        so = tmp("kill_at_rename.so")
        src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                           "reliability", "kill_at_rename.c")
        code, _, err = run(["cc", "-shared", "-fPIC", "-O2", "-o", so, src, "-ldl"])
        expect(code == 0, f"building the rename shim: {err}")
        _SHIM[TMP] = so
    return _SHIM[TMP]


def second_writer_refused(first, second, output, timeout=120):
    """Starts the command `first` with the rename shim stopping it (SIGSTOP) just before its
    first rename — after it has taken `output`'s lock, before it has published anything —,
    runs `second` on the same output, lets the first go on (SIGCONT) and waits for it. The
    second must exit 3 at once (a run that waited would wait forever) naming the output and
    the first's pid and host. Returns (first's exit code, its stderr)."""
    import signal
    import socket
    env = dict(os.environ, LD_PRELOAD=rename_shim(), KILL_AT_RENAME="1", KILL_SIGNAL="STOP")
    p = subprocess.Popen(first, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         env=env)
    try:
        deadline = time.time() + timeout
        while time.time() < deadline and p.poll() is None:
            with open(f"/proc/{p.pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "T":
                    break
            time.sleep(0.005)
        if p.poll() is not None:
            raise Failure(f"the first run ended ({p.returncode}) before it stopped at a rename: "
                          f"{p.stderr.read()[-1000:]}")
        try:
            code, _, err = run(second)
        finally:
            os.kill(p.pid, signal.SIGCONT)
        _, first_err = p.communicate(timeout=timeout)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    expect(code == 3, f"a second run on {output} exits 3 (got {code}): {err[-1000:]}")
    expect(output.rstrip("/") in err and f"pid {p.pid}" in err and socket.gethostname() in err,
           f"the refusal names {output}, pid {p.pid} and this host: {err[-1000:]}")
    return p.returncode, first_err


def write_feature_store(d, matrix, keys, dtype="float32", invalid=None, source=None):
    """A feature store exactly as docs/formats.md#feature-store describes it, written with
    numpy (npy 1.0, little-endian, C order): `matrix` rows × dims as `dtype` (float32 or
    float16), `keys` one per row, `invalid` row numbers, `source` the features.json field."""
    import numpy as np
    os.makedirs(d, exist_ok=True)
    matrix = np.ascontiguousarray(matrix, dtype="<f4" if dtype == "float32" else "<f2")
    np.save(os.path.join(d, "features.npy"), matrix)
    with open(os.path.join(d, "keys.txt"), "w", newline="\n") as f:
        f.writelines(k + "\n" for k in keys)
    meta = {"created_by": os.path.basename(sys.argv[0]), "dims": int(matrix.shape[1]),
            "dtype": dtype, "files": {"keys": "keys.txt", "matrix": "features.npy"},
            "format": "mltool.features", "format_version": 1,
            "model": {"name": "synthetic"}, "rows": int(matrix.shape[0])}
    if invalid:
        meta["invalid_rows"] = sorted(invalid)
    if source:
        meta["source"] = source
    schema = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                         "schemas", "features.schema.json")))
    expect(all(k in meta for k in schema["required"]), "store manifest misses a field")
    with open(os.path.join(d, "features.json"), "w") as f:
        json.dump(meta, f, indent=2, sort_keys=True)


def wait_for_sigterm_handler(p, timeout=60):
    """Waits until process `p` catches SIGTERM (its /proc status SigCgt mask says so: main()
    has installed the handler) or has ended."""
    deadline = time.time() + timeout
    while p.poll() is None and time.time() < deadline:
        try:
            with open(f"/proc/{p.pid}/status") as f:
                caught = next((int(line.split()[1], 16) for line in f if line.startswith("SigCgt:")), 0)
        except OSError:
            return
        if caught & (1 << (signal.SIGTERM - 1)):
            return
        time.sleep(0.005)


def run_with_sigterms(args, rng, most_delay, resume_args=(), env=None, rounds=6):
    """Preemption as Slurm and Kubernetes do it: runs `args`, sends SIGTERM a random delay (0 to
    `most_delay` s, from `rng`) after its handler is installed, and runs `args + resume_args` again the same way until a
    run finishes (exit 0) or `rounds` runs were stopped (then one last run without a signal).
    Every run a signal reached must exit 75 (it committed what it had) or 0 (it finished
    first). Returns the number of runs that exited 75."""
    stopped = 0
    for i in range(rounds + 1):
        cmd = list(args) + (list(resume_args) if stopped else [])
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, **env) if env else None)
        if i < rounds:
            wait_for_sigterm_handler(p)
            delay = rng.uniform(0, most_delay)
            try:
                p.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=300)
        if p.returncode == 0:
            return stopped
        expect(p.returncode == 75 and "SIGTERM" in err,
               f"{' '.join(cmd)}: SIGTERM gave exit {p.returncode}, expected 75: {err[-2000:]}")
        stopped += 1
    raise Failure(f"{' '.join(args)}: never finished")
