"""mltool's usage surface: every command in the table has --help equal to `mltool help CMD`,
prints its usage when run bare, and the top-level flags behave as docs/cli.md says.

    help_test.py MLTOOL
"""
import re
import sys

from cli_common import expect, run

mltool = sys.argv[1]

code, top, _ = run([mltool, "--help"])
expect(code == 0, "mltool --help exits 0")
section = top.split("Subcommands:", 1)
expect(len(section) == 2, "mltool --help lists subcommands")
commands = [m.group(1) for m in re.finditer(r"^\s+(\S+)\s", section[1], re.M) if m.group(1) != "help"]
expect(len(commands) >= 1, "at least one command is registered")

code, bare, _ = run([mltool])
expect(code == 1 and "Subcommands:" in bare, "mltool with no command prints usage and exits 1")

for cmd in commands:
    code, a, _ = run([mltool, cmd, "--help"])
    expect(code == 0, f"mltool {cmd} --help exits 0")
    code, b, _ = run([mltool, "help", cmd])
    expect(code == 0, f"mltool help {cmd} exits 0")
    expect(a == b, f"mltool {cmd} --help and mltool help {cmd} agree")
    expect(a.startswith("") and f"mltool {cmd}" in a, f"help of {cmd} shows its usage line")
    for shared in ("--threads", "--json", "--verbose", "--quiet"):
        expect(shared in a, f"{cmd} accepts the shared option {shared}")
    code, c, _ = run([mltool, cmd])
    expect(code == 1 and c == a, f"mltool {cmd} with no arguments prints its usage and exits 1")
    # A command of subcommands (export h5): the same rules one level down.
    subs = a.split("Subcommands:", 1)
    for sub in ([m.group(1) for m in re.finditer(r"^\s+(\S+)\s", subs[1], re.M)]
                if len(subs) == 2 else []):
        code, a2, _ = run([mltool, cmd, sub, "--help"])
        code2, b2, _ = run([mltool, "help", cmd, sub])
        expect(code == code2 == 0 and a2 == b2 and f"mltool {cmd} {sub}" in a2,
               f"mltool {cmd} {sub} --help and mltool help {cmd} {sub} agree")
        for shared in ("--threads", "--json", "--verbose", "--quiet"):
            expect(shared in a2, f"{cmd} {sub} accepts the shared option {shared}")
        code, c2, _ = run([mltool, cmd, sub])
        expect(code == 1 and c2 == a2, f"mltool {cmd} {sub} alone prints its usage, exit 1")

code, _, err = run([mltool, "no-such-command"])
expect(code == 1 and "no-such-command" in err, "an unknown command is a usage error naming it")
code, _, err = run([mltool, "help", "no-such-command"])
expect(code == 1 and "no-such-command" in err, "help for an unknown command is a usage error")

code, version, _ = run([mltool, "--version"])
expect(code == 0, "mltool --version exits 0")
for component in ("mltool", "LibTorch", "CUDA", "OpenSlide", "libvips"):
    expect(re.search(rf"^{component} \S", version, re.M), f"--version names {component}")

print(f"ok: {len(commands)} command(s): {' '.join(commands)}")
