"""Many `rafka` CLI commands in one process, for tests that run dozens of them.

A command run as `python -m rafka.cli ...` spends ~3 s before it does anything:
Python's start, rafka's imports, and above all the Ray driver's connection. A
CliSession starts that process once and runs each command in it through
`rafka.cli.main(argv)`, as the console script does, with the command's own stdin,
stdout and stderr: stdout is what the command printed, stderr what reached the
terminal's stderr (fd 2, so rafka's quiet mode, which points fd 2 at a log file
for the command's run, is exercised as in a real run), the exit code main's
answer (or argparse's SystemExit). Only the Ray connection is shared: commands
that make their own (`up`, `down`) are run as processes of their own.

Callers: tests/cluster/test_cli.py, tests/cluster/test_auth.py.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys

# The session process: one JSON line in per command ({"argv", "stdin"}), one out
# ({"code", "out", "err"}) on a copy of its stdout made before anything can write
# there (fd 1 itself goes to /dev/null: Ray's C++ core may write to it).
_WORKER = r"""
import contextlib, io, json, os, sys, tempfile, traceback
replies = os.fdopen(os.dup(1), "w", buffering=1)
devnull = os.open(os.devnull, os.O_WRONLY)
os.dup2(devnull, 1)
from rafka.cli import main
for line in sys.stdin:
    command = json.loads(line)
    with tempfile.TemporaryFile("w+") as err_file:
        saved_fd2 = os.dup(2)
        os.dup2(err_file.fileno(), 2)
        saved_stderr, sys.stderr = sys.stderr, open(2, "w", buffering=1, closefd=False)
        saved_stdin, sys.stdin = sys.stdin, io.StringIO(command["stdin"] or "")
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                try:
                    code = main(command["argv"])
                except SystemExit as exit:
                    code = exit.code if isinstance(exit.code, int) else 1
                except BaseException:   # as the console script: a traceback on stderr, exit 1
                    traceback.print_exc()
                    code = 1
        finally:
            sys.stderr.flush()
            sys.stdin, sys.stderr = saved_stdin, saved_stderr
            os.dup2(saved_fd2, 2)
            os.close(saved_fd2)
        err_file.seek(0)
        err = err_file.read()
    replies.write(json.dumps({"code": code, "out": out.getvalue(), "err": err}) + "\n")
"""


class CliSession:
    def __init__(self, ray_address: str, *, env: dict[str, str] | None = None, timeout_s: float = 120.0) -> None:
        """`env`: the session's environment (default: this process's), RAY_ADDRESS set."""
        self.timeout_s = timeout_s
        self._process = subprocess.Popen([sys.executable, "-c", _WORKER],
                                         env=dict(os.environ if env is None else env, RAY_ADDRESS=ray_address),
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                         text=True)

    def run(self, *argv: str, stdin: str | None = None) -> tuple[int, str, str]:
        """(exit code, stdout, stderr) of `rafka <argv>`."""
        self._process.stdin.write(json.dumps({"argv": list(argv), "stdin": stdin}) + "\n")
        self._process.stdin.flush()
        ready, _, _ = select.select([self._process.stdout], [], [], self.timeout_s)
        if not ready:   # nothing is buffered ahead of a reply: one line per command, read before the next
            self._end()
            raise TimeoutError(f"`rafka {' '.join(argv)}` did not finish in {self.timeout_s} s")
        line = self._process.stdout.readline()
        if not line:
            self._end()
            raise RuntimeError(f"the CLI session process ended (exit code {self._process.returncode}) "
                               f"running {argv}")
        reply = json.loads(line)
        return reply["code"], reply["out"], reply["err"]

    @property
    def alive(self) -> bool:
        return self._process.poll() is None

    def close(self) -> None:
        if self.alive:
            self._process.stdin.close()
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._end()

    def _end(self) -> None:
        self._process.kill()
        self._process.wait()


class CliSessions:
    """One CliSession per Ray address, made when first asked for and made again
    after one ended (a hung command killed it); `close()` ends them all (a test
    module's teardown, before its Ray cluster stops)."""

    def __init__(self) -> None:
        self._by_address: dict[str, CliSession] = {}

    def run(self, ray_address: str, *argv: str, stdin: str | None = None) -> tuple[int, str, str]:
        session = self._by_address.get(ray_address)
        if session is None or not session.alive:
            session = self._by_address[ray_address] = CliSession(ray_address)
        return session.run(*argv, stdin=stdin)

    def close(self) -> None:
        while self._by_address:
            self._by_address.popitem()[1].close()
