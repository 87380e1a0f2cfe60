"""Building kio entities for any version of an API from one set of values.

A field that a version does not have is dropped, so one handler serves a version
range: Kafka's schemas add fields version by version and rarely rename them.
`load_request_schema` / `load_response_schema` are kio's lookups, cached (a
schema's module is imported at its first use; `schema_known` checks one exists): kio
resolves the module by name on every call (pkgutil.resolve_name showed in the
broker's profile), and every request and answer needs one. Versions kio no longer
has (Kafka 4 dropped them) come from legacy_schemas first.

Callers: the handlers, dispatch, the client connection.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
from types import ModuleType
from typing import Any

from kio import index as _kio_index
from kio.schema.index import api_key_map, schema_name_map
from kio.static.constants import EntityType

from rafka.protocol.legacy_schemas import OWN_SCHEMAS


@functools.cache
def load_request_schema(api_key: int, api_version: int) -> type:
    own = OWN_SCHEMAS.get((api_key, api_version))
    return own[0] if own else _kio_index.load_request_schema(api_key, api_version)


@functools.cache
def load_response_schema(api_key: int, api_version: int) -> type:
    own = OWN_SCHEMAS.get((api_key, api_version))
    return own[1] if own else _kio_index.load_response_schema(api_key, api_version)


def schema_known(api_key: int, api_version: int) -> bool:
    """Whether both schemas of this version exist (rafka's own or named in kio's
    index), without importing them: a node's table names ~90 versions, each a
    request and a response module; importing all of them at every actor's start
    held ~400 modules (MBs) in every process for versions no client sends."""
    if (api_key, api_version) in OWN_SCHEMAS:
        return True
    try:
        paths = schema_name_map[api_key_map[api_key]][api_version]
    except KeyError:
        return False
    return EntityType.request in paths and EntityType.response in paths


@functools.cache
def field_names(entity_type: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(entity_type))


def make(entity_type: type, **values: Any) -> Any:
    """`entity_type(**values)` with the values its version has no field for left out."""
    names = field_names(entity_type)
    if names.issuperset(values):   # the version has every field given (the data path's, always)
        return entity_type(**values)
    return entity_type(**{k: v for k, v in values.items() if k in names})


@functools.lru_cache(maxsize=64)
def timedelta_ms(milliseconds: int) -> datetime.timedelta:
    """A duration field (kio's i32Timedelta) of `milliseconds`, made once per value:
    the data path's requests carry the same few (timeouts, max waits)."""
    return datetime.timedelta(milliseconds=milliseconds)


@functools.cache
def module_of(entity_type: type) -> ModuleType:
    """The kio module of an entity's version, which holds its nested types."""
    return __import__(entity_type.__module__, fromlist=["_"])
