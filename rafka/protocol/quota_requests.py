"""DescribeClientQuotas and AlterClientQuotas (v1) as rafka's Admin sends them,
and their answers read back (Kafka's AdminClient describeClientQuotas /
alterClientQuotas).

An entity is a list of (entity type, name) pairs, the name None for the type's
default (core.client_quotas). Describe's top-level error raises it; an
alteration's own error is returned in its place, as Kafka's AdminClient
completes each entity's future on its own.
Callers: rafka.client.admin (`rafka configs --entity-type users|clients`), tests.
"""

from __future__ import annotations

from kio.schema.alter_client_quotas.v1 import request as alter_v1
from kio.schema.describe_client_quotas.v1 import request as describe_v1
from kio.static.primitive import f64, i8

from rafka.core.client_quotas import MATCH_DEFAULT, MATCH_EXACT, MATCH_SPECIFIED
from rafka.core.errors import KafkaError, error_or_none

Pairs = list[tuple[str, "str | None"]]


def describe_request(components: list[tuple[str, "str | None"]], *, strict: bool = False,
                     any_name: frozenset[str] = frozenset()) -> describe_v1.DescribeClientQuotasRequest:
    """`components`: (entity type, name: exact; None: the default); `any_name`:
    entity types matched by any specified name."""
    return describe_v1.DescribeClientQuotasRequest(strict=strict, components=tuple(
        [describe_v1.ComponentData(entity_type=t, match_type=i8(MATCH_EXACT if n is not None else MATCH_DEFAULT),
                                   match=n) for t, n in components]
        + [describe_v1.ComponentData(entity_type=t, match_type=i8(MATCH_SPECIFIED), match=None)
           for t in sorted(any_name)]))


def describe_answer(response) -> list[tuple[Pairs, dict[str, float]]]:
    error = error_or_none(response.error_code, response.error_message)
    if error is not None:
        raise error
    return [([(e.entity_type, e.entity_name) for e in entry.entity], {v.key: float(v.value) for v in entry.values})
            for entry in response.entries or ()]


def alter_request(entries: list[tuple[Pairs, list[tuple[str, "float | None"]]]], *,
                  validate_only: bool = False) -> alter_v1.AlterClientQuotasRequest:
    """`entries`: (entity, ops: (key, value; None removes it))."""
    return alter_v1.AlterClientQuotasRequest(validate_only=validate_only, entries=tuple(
        alter_v1.EntryData(entity=tuple(alter_v1.EntityData(entity_type=t, entity_name=n) for t, n in entity),
                           ops=tuple(alter_v1.OpData(key=k, value=f64(0.0 if v is None else float(v)),
                                                     remove=v is None) for k, v in ops))
        for entity, ops in entries))


def alter_answer(response) -> list[KafkaError | None]:
    return [error_or_none(entry.error_code, entry.error_message) for entry in response.entries]
