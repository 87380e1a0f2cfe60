"""Quiet by default: `rafka demo` and every CLI command print only rafka's own
lines; what Ray, Spark (the JVM RayDP starts) and the libraries under them write
goes to a log file, and `--verbose` shows it instead.

How: the process's file descriptor 2 is pointed at the log file for the command's
run, so everything written to stderr lands there: Python's logging and warnings,
Ray's C++ core, and child processes, which inherit it (Spark's JVM logs through
log4j to its stderr). Actors' output is not forwarded to the driver (ray.init's
log_to_driver=False): it stays in Ray's session logs. rafka's own lines go to
stdout, and its own warnings and errors to the terminal's stderr (`own_stderr()`).

Invariant: when the `with` block ends, fd 2 and sys.stderr are what they were.
Callers: rafka.cli (every command), rafka.demo.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import tempfile
from collections.abc import Iterator
from typing import TextIO


_own_stderr: TextIO | None = None   # the terminal's stderr while a quiet_logs block runs


def own_stderr() -> TextIO:
    """Where rafka's own warnings and errors go: the terminal, also in quiet mode."""
    return _own_stderr or sys.stderr


@dataclasses.dataclass
class Logs:
    path: str | None           # where Ray's and Spark's output went (None: --verbose, the terminal)
    log_to_driver: bool        # forward actors' output to this driver (only when verbose)

    def where(self) -> str:
        """One line saying where the logs are (the demo ends with it)."""
        ray_logs = ray_session_logs()
        parts = ([f"this process's Ray and Spark output: {self.path}"] if self.path else []) + (
            [f"the actors' logs: {ray_logs}"] if ray_logs else [])
        return "logs: " + "; ".join(parts) if parts else "logs: shown above (--verbose)"


def ray_session_logs() -> str | None:
    """The logs directory of the Ray session this process is connected to, if any."""
    try:
        import ray
        node = ray._private.worker._global_node   # no public API names the session's log dir
        return node.get_logs_dir_path() if node is not None else None
    except Exception:   # not connected, or Ray's internals moved: nothing to point at
        return None


@contextlib.contextmanager
def quiet_logs(verbose: bool, command: str) -> Iterator[Logs]:
    if verbose:
        yield Logs(None, log_to_driver=True)
        return
    directory = tempfile.mkdtemp(prefix=f"rafka-{command}-")
    path = os.path.join(directory, "output.log")
    sys.stdout.flush()
    sys.stderr.flush()
    saved_fd = os.dup(2)
    log_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    saved_stderr = sys.stderr
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    terminal = open(os.dup(saved_fd), "w", buffering=1)
    global _own_stderr
    _own_stderr = terminal
    try:
        yield Logs(path, log_to_driver=False)
    finally:
        _own_stderr = None
        sys.stderr.flush()
        sys.stderr = saved_stderr
        os.dup2(saved_fd, 2)
        os.close(saved_fd)
        terminal.close()
