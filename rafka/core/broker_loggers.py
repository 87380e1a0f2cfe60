"""A broker's loggers: Kafka's BROKER_LOGGER config resource (KIP-412), what
`kafka-configs.sh --entity-type broker-loggers` and admin clients describe and
set on one broker.

Invariants:
  * a broker's levels are one map {logger name: Kafka level}, kept in the
    metadata log (core.metadata `broker_loggers` records) and carried by every
    image; each rafka process on the broker's node applies its broker's map
    whenever an image changes it (`LoggerLevels.apply`), so the broker's network
    processes, replicas and coordinators log alike, and a process that restarts
    takes the map again (the controller, which builds images rather than being
    offered them, does not: it is no broker's). (Kafka keeps the levels in the broker's memory and
    loses them when it restarts: a rafka broker is many processes, which only
    the image keeps alike; so here they last until deleted.)
  * a level is one of Kafka's six, upper case as Kafka checks them (TRACE,
    DEBUG, INFO, WARN, ERROR, FATAL), on Python's scale (TRACE = 5, WARN =
    WARNING, FATAL = CRITICAL); a described level is the logger's effective one
    in those names (the nearest Kafka level at or below it).
  * the loggers a broker has are the root (as "root"), every rafka module's (each
    logs under its module's name, whether or not a process imported it) and
    every one the map names: the same set from each of the broker's processes
    (what a process happens to have made, Ray's or asyncio's, differs between
    them, and a describe and an alter may meet different ones); SET and DELETE
    name one of them, never a new one, as Kafka's broker refuses.
  * DELETE takes the logger out of the map: each process gives it back the level
    it had before the map first named it (none for almost every logger, so it
    follows its parent, as Kafka's DELETE does); the root's cannot be deleted.
  * every change of a resource is checked before any is applied
    (`check_changes`, Kafka's RuntimeLoggerManager order and wording).

Pure: the standard library's logging only. Callers: protocol.handlers
(describe_configs, alter_configs), core.metadata (`altered`), actors.serving
(`LoggerLevels`).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path

from rafka.core.config import APPEND, DELETE, SET, SUBTRACT, ConfigOp
from rafka.core.errors import InvalidConfig, InvalidRequest

ROOT = "root"
TRACE = 5
KAFKA_LEVELS = {"TRACE": TRACE, "DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING,
                "ERROR": logging.ERROR, "FATAL": logging.CRITICAL}
_VALID = ", ".join(sorted(KAFKA_LEVELS))
_OPERATION_NAMES = {APPEND: "APPEND", SUBTRACT: "SUBTRACT"}
logging.addLevelName(TRACE, "TRACE")


def kafka_level_name(level: int) -> str:
    """Kafka's name for a Python level: the highest Kafka level at or below it."""
    return max((value, name) for name, value in KAFKA_LEVELS.items() if value <= max(level, TRACE))[1]


def _logger(name: str) -> logging.Logger:
    return logging.getLogger() if name == ROOT else logging.getLogger(name)


@cache
def _rafka_module_loggers() -> frozenset[str]:
    """Every rafka module's name (its logger's), from the package's files: nothing imported."""
    package = Path(__file__).resolve().parents[1]
    names = set()
    for directory, _, files in os.walk(package):
        parts = Path(directory).relative_to(package.parent).parts
        names.update(".".join(parts + (f[:-3],)) if f != "__init__.py" else ".".join(parts)
                     for f in files if f.endswith(".py"))
    return frozenset(names)


def broker_loggers(levels: Mapping[str, str]) -> list[str]:
    """The loggers of a broker whose map is `levels`, sorted."""
    return sorted({ROOT, *_rafka_module_loggers(), *levels})


def describe(levels: Mapping[str, str], wanted: Iterable[str] | None) -> list[tuple[str, str]]:
    """(logger, its effective Kafka level) for DescribeConfigs: every logger of the
    broker, or those of `wanted` it has (None or empty: all; others left out, as
    Kafka leaves unknown names out)."""
    wanted = set(wanted or ())
    return [(name, kafka_level_name(_logger(name).getEffectiveLevel())) for name in broker_loggers(levels)
            if not wanted or name in wanted]


def check_changes(ops: Iterable[ConfigOp], known: Iterable[str]) -> None:
    """Every change of one resource, as Kafka's broker checks them before applying
    any (RuntimeLoggerManager): the first bad one raises."""
    known = set(known)
    for operation, name, value in ops:
        if operation in (SET, DELETE) and name not in known:
            raise InvalidConfig(f"Logger {name} does not exist!")
        if operation == SET:
            check_level(name, value)
        elif operation == DELETE:
            if name == ROOT:
                raise InvalidRequest("Removing the log level of the root logger is not allowed")
        elif operation in _OPERATION_NAMES:
            raise InvalidRequest(f"{_OPERATION_NAMES[operation]} operation is not allowed for the "
                                 "BROKER_LOGGER resource")
        else:
            raise InvalidRequest(f"Unknown operation type {operation} is not allowed for the BROKER_LOGGER resource")


def check_level(name: str, value) -> None:
    if value not in KAFKA_LEVELS:
        raise InvalidConfig(f"Cannot set the log level of {name} to {value} as it is not a supported log level. "
                            f"Valid log levels are {_VALID}")


def altered(levels: Mapping[str, str], ops: Iterable[ConfigOp]) -> dict[str, str]:
    """The map after `ops` (the broker checked that their loggers exist; the rest
    is checked again here)."""
    ops = list(ops)
    check_changes(ops, {name for _, name, _ in ops})
    result = dict(levels)
    for operation, name, value in ops:
        if operation == SET:
            result[name] = value
        else:
            result.pop(name, None)
    return result


class LoggerLevels:
    """The broker's map applied to this process's loggers (see the module's invariants)."""

    def __init__(self) -> None:
        self._applied: dict[str, str] = {}
        self._before: dict[str, int] = {}   # each logger's own level before the map first named it

    def apply(self, levels: Mapping[str, str]) -> None:
        if levels == self._applied:
            return
        for name, level in levels.items():
            logger = _logger(name)
            self._before.setdefault(name, logger.level)
            logger.setLevel(KAFKA_LEVELS[level])
        for name in self._applied.keys() - levels.keys():
            _logger(name).setLevel(self._before.pop(name))
        self._applied = dict(levels)


def _node_id_of(name: str, not_an_integer: str) -> int:
    """`name` read as Java's Integer.parseInt reads it (a sign and digits, 32 bits)."""
    if re.fullmatch(r"[+-]?[0-9]+", name or "") is None or not -(1 << 31) <= int(name) < 1 << 31:
        raise InvalidRequest(f"{not_an_integer}{name}")
    return int(name)


def check_described_broker(name: str, broker_id: int) -> None:
    """DescribeConfigs of BROKER_LOGGER `name` on broker `broker_id` (ConfigHelper's wording)."""
    if not name:
        raise InvalidRequest("Broker id must not be empty")
    if _node_id_of(name, "Broker id must be an integer, but it is: ") != broker_id:
        raise InvalidRequest(f"Unexpected broker id, expected {broker_id} but received {name}")


def check_altered_broker(name: str, broker_id: int) -> None:
    """IncrementalAlterConfigs of BROKER_LOGGER `name` on broker `broker_id` (RuntimeLoggerManager's wording)."""
    requested = _node_id_of(name, "Node id must be an integer, but it is: ")
    if requested != broker_id:
        raise InvalidRequest(f"Unexpected node id. Expected {broker_id}, but received {requested}")
