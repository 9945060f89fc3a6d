"""Helpers for the CLI tests: run the real mltool binary and check what a user sees."""
import subprocess
import sys


def run(args, stdin=None):
    """Runs a command; returns (exit code, stdout, stderr) as text."""
    p = subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def expect(cond, message):
    if not cond:
        print("FAIL: " + message, file=sys.stderr)
        sys.exit(1)
