"""Small text files replaced atomically: written to a temp file, fsynced, renamed.

A reader sees the old content or the new, never a mix. The format is Kafka's
checkpoint layout: a version line, a count line, then one entry per line.
"""

from __future__ import annotations

import os
from pathlib import Path

VERSION = 0


def write_entries(path: Path, entries: list[tuple[object, ...]]) -> None:
    lines = [str(VERSION), str(len(entries))] + [" ".join(str(field) for field in e) for e in entries]
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def read_entries(path: Path) -> list[list[str]] | None:
    """The entries, or None when the file does not exist or is malformed."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return None
    try:
        if int(lines[0]) != VERSION or int(lines[1]) != len(lines) - 2:
            return None
    except (IndexError, ValueError):
        return None
    return [line.split() for line in lines[2:]]


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
