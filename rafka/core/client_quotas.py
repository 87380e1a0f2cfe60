"""Client quotas, Kafka's way: the configs (per user, client id, user and client
id, their defaults, and ip), their validation (ClientQuotaControlManager), their
description (ClientQuotasImage.describe), which config applies to a client
(DefaultQuotaCallback's precedence) and the rate each broker measures
(Rate over SampledStat) and throttles by (ClientQuotaManager, QuotaUtils;
ClientRequestQuotaManager for request_percentage).

Invariants:
  * an entity is a set of (entity type, name) pairs, one per type, the name None
    for the type's default; only {user, client-id} combinations and ip alone are
    entities; every stored value is valid for its key (`validate_value`) and an
    entity with no values is not stored (ClientQuotaControlManager.replay);
  * which config applies to a client (user, client id) is Kafka's order:
    user+client-id, user+<default client-id>, user, <default user>+client-id,
    <default user>+<default client-id>, <default user>, client-id,
    <default client-id>; the clients whose quota comes from one entity share one
    sensor (Kafka's metric tags), so a user quota bounds all its clients together;
  * a sensor's rate is Kafka's: the sum over at most `quota_window_num` samples of
    `quota_window_size_s` each, divided by the elapsed time since the oldest one,
    taken as at least `quota_window_num - 1` whole windows; a recorded value that
    takes the rate over the limit is throttled for
    `(rate - limit) / limit * window_ms`, rounded (QuotaUtils.throttleTime); a
    request-time throttle at most one quota window (boundedThrottleTime);
  * request_percentage measures time as Kafka's ClientRequestQuotaManager: a
    request that took t seconds to handle records 100 * t, so a rate of 100 is
    one thread busy all the time for that client;
  * controller_mutation_rate (KIP-599) is a token bucket per client, as Kafka's
    ControllerMutationQuotaManager: full at first with (quota_window_num - 1) *
    quota_window_size_s * rate partitions, refilled at the rate up to that; a
    mutation takes its partitions (the bucket may go below zero once); while it
    is below zero a strict quota (CreateTopics v6+, CreatePartitions v3+,
    DeleteTopics v5+) refuses further mutations with THROTTLING_QUOTA_EXCEEDED
    and a permissive one (older versions) takes them; either way the answer's
    throttle time is the time to refill to zero;
  * connection_creation_rate (KIP-612) is per client IP, as Kafka's
    ConnectionQuotas: the IP's own value, else the default IP's; each new
    connection records 1 on the IP's rate (quota_window_num samples of
    quota_window_size_s); one that takes it over the limit is taken back and
    refused for the throttle time (QuotaUtils.throttleTime, at most one quota
    window: boundedThrottleTime);
  * bounded: at most MAX_SENSORS sensors per manager (the least recently used goes
    first; Kafka drops a sensor inactive for an hour, as here too), at most
    quota_window_num + 1 samples per sensor, MAX_QUOTA_RECORDS_PER_REQUEST records
    per AlterClientQuotas.

Pure logic, no I/O; time is passed in (milliseconds). Callers: core.metadata
(records, validation), core.cluster_image (the configs in every image),
protocol.handlers.client_quotas (Describe/AlterClientQuotas), protocol.throttling
(the broker edge's enforcement).
"""

from __future__ import annotations

import collections
import dataclasses
import ipaddress
import math
from collections.abc import Callable, Mapping
from typing import Generic, Optional, TypeVar

from rafka.core.errors import (InvalidRequest, KafkaError, ThrottlingQuotaExceeded, UnknownServerError,
                               UnsupportedVersion)

USER, CLIENT_ID, IP = "user", "client-id", "ip"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
IP_CONNECTION_RATE = "connection_creation_rate"
# QuotaConfig.userAndClientQuotaConfigs / ipConfigs: key -> Kafka's ConfigDef type
USER_AND_CLIENT_KEYS = {PRODUCER_BYTE_RATE: "LONG", CONSUMER_BYTE_RATE: "LONG", REQUEST_PERCENTAGE: "DOUBLE",
                        CONTROLLER_MUTATION_RATE: "DOUBLE",
                        # SCRAM mechanisms share the ConfigDef (KafkaConfig's user configs) and are refused as
                        # Kafka's controller refuses them: not a quota's type
                        "SCRAM-SHA-256": "STRING", "SCRAM-SHA-512": "STRING"}
IP_KEYS = {IP_CONNECTION_RATE: "INT"}
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
_LIMITS = {"SHORT": (2 ** 15 - 1, "a SHORT"), "INT": (2 ** 31 - 1, "an INT"), "LONG": (2 ** 63 - 1, "a LONG")}

MAX_QUOTA_RECORDS_PER_REQUEST = 10_000   # Kafka's MAX_RECORDS_PER_USER_OP
MAX_SENSORS = 10_000
INACTIVE_SENSOR_EXPIRATION_MS = 3_600_000   # ClientQuotaManager.InactiveSensorExpirationTimeSeconds
K = TypeVar("K")
V = TypeVar("V")
QUOTA_WINDOW_NUM_DEFAULT = 11               # quota.window.num
QUOTA_WINDOW_SIZE_S_DEFAULT = 1             # quota.window.size.seconds
PERCENTAGE_PER_NS = 100.0 / 1_000_000_000    # ClientRequestQuotaManager.NanosToPercentagePerSecond


def request_percentage_of(handling_ns: int) -> float:
    """What a request that took `handling_ns` records against request_percentage."""
    return handling_ns * PERCENTAGE_PER_NS

def entity_text(entity: frozenset) -> str:
    """As Kafka's ClientQuotaEntity prints: ClientQuotaEntity(entries={user=alice})."""
    entries = ", ".join(f"{t}={n}" for t, n in sorted(entity, key=lambda p: p[0]))
    return f"ClientQuotaEntity(entries={{{entries}}})"


@dataclasses.dataclass(frozen=True)
class ClientQuotas:
    """Every entity's configs (immutable; `version` counts the records replayed)."""
    by_entity: Mapping[frozenset, Mapping[str, float]] = dataclasses.field(default_factory=dict)
    version: int = 0

    def __post_init__(self) -> None:
        kinds: dict[str, set[str]] = {}   # key -> which kinds of entity set it (Kafka's quotaTypesEnabled)
        for entity, values in self.by_entity.items():
            types = {t for t, _ in entity}
            kind = "both" if types == {USER, CLIENT_ID} else "user" if types == {USER} else \
                "client" if types == {CLIENT_ID} else "ip"
            for key in values:
                kinds.setdefault(key, set()).add(kind)
        object.__setattr__(self, "_kinds", {k: frozenset(v - {"ip"}) for k, v in kinds.items()})
        object.__setattr__(self, "_resolved", {})   # (key, user, client id) -> resolve's answer, bounded

    def enabled(self, key: str) -> bool:
        """Whether any entity sets `key` (a broker measures nobody before)."""
        return bool(self._kinds.get(key))

    def value(self, entity: frozenset, key: str) -> float | None:
        values = self.by_entity.get(entity)
        return None if values is None else values.get(key)

    def resolve(self, key: str, user: str, client_id: str) -> tuple[tuple[str, str], float | None]:
        """(the sensor's tags (user tag, client-id tag), the limit or None) for a
        client: Kafka's DefaultQuotaCallback, quotaMetricTags then quotaLimit."""
        asked = (key, user, client_id)
        found = self._resolved.get(asked)
        if found is None:
            tags = self._metric_tags(key, user, client_id)
            found = (tags, self._limit(key, *tags))
            if len(self._resolved) >= MAX_SENSORS:
                self._resolved.clear()
            self._resolved[asked] = found
        return found

    def ip_connection_rate(self, ip: str) -> float | None:
        """The connection_creation_rate of connections from `ip`: its own, else the
        default IP's, else None (Kafka's ConnectionQuotas.connectionRateForIp)."""
        found = self.value(frozenset({(IP, ip)}), IP_CONNECTION_RATE)
        return found if found is not None else self.value(frozenset({(IP, None)}), IP_CONNECTION_RATE)

    def _has(self, key: str, *pairs) -> bool:
        return self.value(frozenset(pairs), key) is not None

    def _metric_tags(self, key: str, user: str, client_id: str) -> tuple[str, str]:
        kinds = self._kinds.get(key, frozenset())
        if not kinds or kinds == {"client"}:
            return "", client_id
        if kinds == {"user"}:
            return user, ""
        if kinds == {"both"}:
            return user, client_id
        if (self._has(key, (USER, user), (CLIENT_ID, client_id))
                or self._has(key, (USER, user), (CLIENT_ID, None))):
            return user, client_id
        if self._has(key, (USER, user)):
            return user, ""
        if self._has(key, (USER, None), (CLIENT_ID, client_id)) or self._has(key, (USER, None), (CLIENT_ID, None)):
            return user, client_id
        if self._has(key, (USER, None)):
            return user, ""
        return "", client_id

    def _limit(self, key: str, user: str, client_id: str) -> float | None:
        if user and client_id:
            order = [((USER, user), (CLIENT_ID, client_id)), ((USER, user), (CLIENT_ID, None)),
                     ((USER, None), (CLIENT_ID, client_id)), ((USER, None), (CLIENT_ID, None))]
        elif user:
            order = [((USER, user),), ((USER, None),)]
        elif client_id:
            order = [((CLIENT_ID, client_id),), ((CLIENT_ID, None),)]
        else:
            return None
        for pairs in order:
            found = self.value(frozenset(pairs), key)
            if found is not None:
                return found
        return None


NO_CLIENT_QUOTAS = ClientQuotas()


def user_of_principal(principal: str) -> str:
    """Kafka's principal.getName: "User:alice" -> "alice"."""
    return principal.split(":", 1)[1] if ":" in principal else principal


# --- validation (ClientQuotaControlManager) --------------------------------------

def validate_entity(pairs: list[tuple[str, Optional[str]]]) -> tuple[frozenset, dict[str, str]]:
    """(the entity, its keys and their types), or InvalidRequest with Kafka's message."""
    if not pairs:
        raise InvalidRequest("Invalid empty client quota entity")
    seen: dict[str, Optional[str]] = {}
    for entity_type, name in pairs:
        if entity_type in seen:
            raise InvalidRequest(f"Invalid client quota entity, duplicate entity entry {entity_type}")
        if entity_type not in (USER, CLIENT_ID, IP):
            raise InvalidRequest(f"Unhandled client quota entity type: {entity_type}")
        if name is not None and name == "":
            raise InvalidRequest(f"Empty {entity_type} not supported")
        seen[entity_type] = name
    if IP in seen:
        if len(seen) > 1:
            raise InvalidRequest("Invalid quota entity combination, IP entity shouldnot be combined with User "
                                 "or ClientId")
        if seen[IP] is not None and not _is_ip(seen[IP]):
            raise InvalidRequest(f"{seen[IP]} is not a valid IP or resolvable host.")
        return frozenset(seen.items()), IP_KEYS
    return frozenset(seen.items()), USER_AND_CLIENT_KEYS


def _is_ip(text: str) -> bool:
    """An IP literal (Kafka also resolves host names; the controller does no DNS)."""
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


def validate_value(keys: Mapping[str, str], key: str, value: float) -> None:
    """Kafka's validateQuotaKeyValue: InvalidRequest (or UnknownServerError for a
    key that is no quota's type) with Kafka's message."""
    kind = keys.get(key)
    if kind is None:
        raise InvalidRequest(f"Invalid configuration key {key}")
    if not value > 0.0:   # NaN is refused too
        raise InvalidRequest(f"Quota {key} must be greater than 0")
    if kind == "DOUBLE":
        if math.isinf(value):
            raise InvalidRequest(f"Quota {key} must be finite")
        return
    if kind not in _LIMITS:
        raise UnknownServerError(f"Unexpected config type {kind} should be Long or Double")
    limit, name = _LIMITS[kind]
    if value > limit:
        raise InvalidRequest(f"Proposed value for {key} is too large for {name}.")
    if abs(math.fmod(value, 1.0)) > 1e-6:
        raise InvalidRequest(f"{key} cannot be a fractional value.")


def alteration_records(current: ClientQuotas, entries: list[tuple[list, list[tuple[str, float | None]]]]
                       ) -> tuple[list[dict], list[KafkaError | None]]:
    """AlterClientQuotas: per entry (entity pairs, ops: (key, value or None to
    remove)) None or why not; the records for the valid ones (Kafka's
    alterClientQuotas: a duplicate key or entity fails that entity, an unchanged
    value writes nothing, an entry fails whole on its first bad op)."""
    records: list[dict] = []
    results: list[KafkaError | None] = []
    seen: set[frozenset] = set()
    for pairs, ops in entries:
        try:
            entity, keys = validate_entity(pairs)
            if entity in seen:
                raise InvalidRequest(f"Ignoring duplicate entity {entity_text(entity)}")
            seen.add(entity)
            alterations: dict[str, float | None] = {}
            for key, value in ops:
                if key in alterations:
                    raise InvalidRequest(f"Duplicate quota key {key} not updating quota for this entity "
                                         f"{entity_text(entity)}")
                alterations[key] = value
            entity_records = []
            held = current.by_entity.get(entity, {})
            for key, value in alterations.items():
                if value is None:
                    if key in held:
                        entity_records.append(_record(entity, key, None))
                    continue
                validate_value(keys, key, value)
                if held.get(key) != value:
                    entity_records.append(_record(entity, key, value))
            if len(records) + len(entity_records) > MAX_QUOTA_RECORDS_PER_REQUEST:
                raise InvalidRequest(f"Cannot alter more than {MAX_QUOTA_RECORDS_PER_REQUEST} quota values "
                                     f"in a single request")
        except KafkaError as error:
            results.append(error)
            continue
        records.extend(entity_records)
        results.append(None)
    return records, results


def _record(entity: frozenset, key: str, value: float | None) -> dict:
    record = {"type": "client_quota", "entity": sorted([t, n] for t, n in entity), "key": key}
    if value is None:
        record["remove"] = True
    else:
        record["value"] = float(value)
    return record


def replayed(current: dict[frozenset, dict[str, float]], record: dict) -> None:
    """Apply one client_quota record to `current` (ClientQuotaControlManager.replay)."""
    entity = frozenset((t, n) for t, n in record["entity"])
    values = current.setdefault(entity, {})
    if record.get("remove"):
        values.pop(record["key"], None)
    else:
        values[record["key"]] = float(record["value"])
    if not values:
        del current[entity]


# --- description (ClientQuotasImage.describe) -------------------------------------

def describe(quotas: ClientQuotas, components: list[tuple[str, int, Optional[str]]], *, strict: bool
             ) -> list[tuple[frozenset, Mapping[str, float]]]:
    """The entities the filter matches, with their values; InvalidRequest or
    UnsupportedVersion with Kafka's messages for a bad filter."""
    exact: dict[str, Optional[str]] = {}
    typed: set[str] = set()
    for entity_type, match_type, match in components:
        if entity_type == "":
            raise InvalidRequest("Invalid empty entity type.")
        if entity_type in exact or entity_type in typed:
            raise InvalidRequest(f"Entity type {entity_type} cannot appear more than once in the filter.")
        if entity_type not in (IP, USER, CLIENT_ID):
            raise UnsupportedVersion(f"Unsupported entity type {entity_type}")
        if match_type == MATCH_EXACT:
            if match is None:
                raise InvalidRequest("Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[entity_type] = match
        elif match_type == MATCH_DEFAULT:
            if match is not None:
                raise InvalidRequest("Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[entity_type] = None
        elif match_type == MATCH_SPECIFIED:
            if match is not None:
                raise InvalidRequest("Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            typed.add(entity_type)
        else:
            raise InvalidRequest(f"Unknown match type {match_type}")
    if (IP in exact or IP in typed) and ({USER, CLIENT_ID} & (set(exact) | typed)):
        raise InvalidRequest("Invalid entity filter component combination. IP filter component should not be "
                             "used with user or clientId filter component.")
    found = []
    for entity, values in sorted(quotas.by_entity.items(), key=lambda item: sorted(map(_sort_key, item[0]))):
        names = dict(entity)
        if strict and len(names) != len(exact) + len(typed):
            continue
        if all(t in names and names[t] == n for t, n in exact.items()) and all(t in names for t in typed):
            found.append((entity, values))
    return found


def _sort_key(pair: tuple[str, Optional[str]]) -> tuple[str, int, str]:
    return pair[0], pair[1] is not None, pair[1] or ""


# --- measurement (Rate over SampledStat, ClientQuotaManager) -------------------------

class _Sample:
    __slots__ = ("start_ms", "last_event_ms", "value")

    def __init__(self, now_ms: int) -> None:
        self.start_ms = self.last_event_ms = now_ms
        self.value = 0.0

    def reset(self, now_ms: int) -> None:
        self.start_ms = self.last_event_ms = now_ms
        self.value = 0.0


class SampledRate:
    """Kafka's Rate over a WindowedSum: `window_num` samples of `window_ms` (one
    more kept for the sample overlapping the window's start)."""

    def __init__(self, *, window_num: int, window_ms: int, now_ms: int) -> None:
        if window_num < 1 or window_ms < 1:
            raise ValueError(f"quota window: {window_num} samples of {window_ms} ms")
        self.window_num = window_num
        self.window_ms = window_ms
        self._samples = [_Sample(now_ms)]
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        sample = self._samples[self._current]
        if now_ms - sample.start_ms >= self.window_ms:
            self._current = (self._current + 1) % (self.window_num + 1)
            if self._current >= len(self._samples):
                self._samples.append(_Sample(now_ms))
            else:
                self._samples[self._current].reset(now_ms)
            sample = self._samples[self._current]
        sample.value += value
        sample.last_event_ms = now_ms

    def _purge(self, now_ms: int) -> None:
        expire_ms = self.window_num * self.window_ms
        for sample in self._samples:
            if now_ms - sample.last_event_ms >= expire_ms:
                sample.reset(now_ms)

    def window_size_ms(self, now_ms: int) -> int:
        self._purge(now_ms)
        return self._window_size_ms(now_ms)

    def _window_size_ms(self, now_ms: int) -> int:
        """Kafka's Rate.windowSize, over samples already purged at `now_ms`."""
        elapsed_ms = now_ms - min(s.start_ms for s in self._samples)
        full = elapsed_ms // self.window_ms
        if full < self.window_num - 1:
            elapsed_ms += (self.window_num - 1 - full) * self.window_ms
        return max(elapsed_ms, 1)

    def rate_and_window_ms(self, now_ms: int) -> tuple[float, int]:
        """(the rate per second, the window it is measured over in ms), one purge."""
        self._purge(now_ms)
        window_ms = self._window_size_ms(now_ms)
        return sum(s.value for s in self._samples) / (window_ms / 1000.0), window_ms

    def rate_per_s(self, now_ms: int) -> float:
        return self.rate_and_window_ms(now_ms)[0]


class BoundedSensors(Generic[K, V]):
    """A manager's sensors by key, least recently used first: at most `max_sensors`.
    A sensor unused for INACTIVE_SENSOR_EXPIRATION_MS is gone (Kafka's sensors
    expire after an hour): asked for again, it is made anew; when a new one is
    made, the expired go first, then the least recently used past the bound.
    `make(now_ms)` makes a new sensor."""

    def __init__(self, make: Callable[[int], V], max_sensors: int) -> None:
        self._make = make
        self.max_sensors = max_sensors
        self._entries: collections.OrderedDict[K, list] = collections.OrderedDict()   # key -> [sensor, last used]

    def get(self, key: K, now_ms: int) -> V:
        entry = self._entries.get(key)
        if entry is not None and now_ms - entry[1] < INACTIVE_SENSOR_EXPIRATION_MS:
            entry[1] = now_ms
            self._entries.move_to_end(key)
            return entry[0]
        self._entries.pop(key, None)   # expired: made anew
        while self._entries:
            _, last_used_ms = next(iter(self._entries.values()))
            if now_ms - last_used_ms < INACTIVE_SENSOR_EXPIRATION_MS and len(self._entries) < self.max_sensors:
                break
            self._entries.popitem(last=False)
        sensor = self._make(now_ms)
        self._entries[key] = [sensor, now_ms]
        return sensor

    def __len__(self) -> int:
        return len(self._entries)


class ClientQuotaManager:
    """One quota type's sensors on one broker (Kafka's ClientQuotaManager for
    `key`: producer_byte_rate or consumer_byte_rate; its ClientRequestQuotaManager
    for request_percentage, whose throttle time is bounded by one quota window)."""

    def __init__(self, key: str, *, quota_window_num: int = QUOTA_WINDOW_NUM_DEFAULT,
                 quota_window_size_s: int = QUOTA_WINDOW_SIZE_S_DEFAULT, max_sensors: int = MAX_SENSORS) -> None:
        if quota_window_num < 1 or quota_window_size_s < 1:   # Kafka: atLeast(1) each
            raise ValueError(f"quota.window.num {quota_window_num} and quota.window.size.seconds "
                             f"{quota_window_size_s} must be at least 1")
        self.key = key
        self.quota_window_num = quota_window_num
        self.quota_window_ms = quota_window_size_s * 1000
        # ClientRequestQuotaManager.throttleTime: QuotaUtils.boundedThrottleTime by
        # quota.window.size.seconds; the byte rates are not bounded
        self.throttle_time_max_ms = self.quota_window_ms if key == REQUEST_PERCENTAGE else None
        self._sensors: BoundedSensors[tuple[str, str], SampledRate] = BoundedSensors(
            lambda now_ms: SampledRate(window_num=quota_window_num, window_ms=self.quota_window_ms, now_ms=now_ms),
            max_sensors)
        self.throttled_requests = 0

    def record_and_get_throttle_time_ms(self, quotas: ClientQuotas, user: str, client_id: str, value: float,
                                        now_ms: int) -> int:
        """Record `value` (bytes, or request_percentage_of the handling time) for
        the client; the throttle time its rate now needs (0: within its quota, or
        no quota of this type anywhere)."""
        if not quotas.enabled(self.key):
            return 0
        tags, limit = quotas.resolve(self.key, user, client_id)
        rate = self._sensors.get(tags, now_ms)
        rate.record(value, now_ms)
        if limit is None:
            return 0
        observed, window_ms = rate.rate_and_window_ms(now_ms)
        if observed <= limit:
            return 0
        self.throttled_requests += 1
        throttle_ms = int(round((observed - limit) / limit * window_ms))
        return throttle_ms if self.throttle_time_max_ms is None else min(throttle_ms, self.throttle_time_max_ms)

    def unrecord(self, quotas: ClientQuotas, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back a recorded value (a throttled Fetch answers no data)."""
        if quotas.enabled(self.key):
            tags, _ = quotas.resolve(self.key, user, client_id)
            self._sensors.get(tags, now_ms).record(-value, now_ms)

    def max_value_in_quota_window(self, quotas: ClientQuotas, user: str, client_id: str) -> float | None:
        """The most one request may take without certain throttling (a Fetch's
        max_bytes is capped to it); None: no limit."""
        if not quotas.enabled(self.key):
            return None
        _, limit = quotas.resolve(self.key, user, client_id)
        if limit is None:
            return None
        return limit * (self.quota_window_num - 1) * self.quota_window_ms / 1000.0

    @property
    def sensor_count(self) -> int:
        return len(self._sensors)


# --- controller mutations (TokenBucket, ControllerMutationQuotaManager) -----------------

class TokenBucket:
    """Kafka's TokenBucket stat: `tokens` refill at `rate` a second up to `burst`."""
    __slots__ = ("tokens", "updated_ms")

    def __init__(self) -> None:
        self.tokens: float | None = None   # full at its first use
        self.updated_ms = 0

    def measure(self, rate: float, burst: float, now_ms: int) -> float:
        if self.tokens is None:
            self.tokens = burst
        else:
            self.tokens = min(burst, self.tokens + rate * max(0, now_ms - self.updated_ms) / 1000.0)
        self.updated_ms = now_ms
        return self.tokens

    def record(self, value: float, rate: float, burst: float, now_ms: int) -> None:
        self.tokens = min(burst, self.measure(rate, burst, now_ms) - value)


class MutationQuota:
    """One request's controller mutation quota (Kafka's Strict- and
    PermissiveControllerMutationQuota): `record(partitions)` before each topic's
    mutation, `refund(partitions)` if the mutation then failed, `throttle_time_ms`
    for the answer. Without a limit it takes everything and throttles nothing."""

    def __init__(self, bucket: TokenBucket | None, rate: float | None, burst: float, *, strict: bool,
                 now_ms: Callable[[], int]) -> None:
        self._bucket, self._rate, self._burst = bucket, rate, burst
        self.strict = strict
        self._now_ms = now_ms
        self._throttle_ms = 0
        self._throttled_at_ms = 0

    def _throttle_from(self, tokens: float, now_ms: int) -> None:
        """Kafka's throttleTimeMs: the time to bring the bucket back to zero."""
        self._throttle_ms = int(round(-tokens / self._rate * 1000))
        self._throttled_at_ms = now_ms

    def record(self, partitions: int) -> int:
        """The partitions taken (0: none to take, or no limit); raises
        ThrottlingQuotaExceeded when strict and the bucket is below zero."""
        if self._bucket is None or partitions <= 0:
            return 0
        now_ms = self._now_ms()
        tokens = self._bucket.measure(self._rate, self._burst, now_ms)
        if self.strict and tokens < 0:
            self._throttle_from(tokens, now_ms)
            raise ThrottlingQuotaExceeded(f"controller_mutation_rate {self._rate:g} partitions/s used up: "
                                          f"retry after {self._throttle_ms} ms")
        self._bucket.record(partitions, self._rate, self._burst, now_ms)
        if not self.strict and self._bucket.tokens < 0:
            self._throttle_from(self._bucket.tokens, now_ms)
        return partitions

    def refund(self, partitions: int) -> None:
        """A recorded mutation did not happen (the topic was refused after all), or
        was smaller (negative: larger) than recorded."""
        if self._bucket is not None and partitions:
            self._bucket.record(-partitions, self._rate, self._burst, self._now_ms())

    @property
    def limited(self) -> bool:
        """Whether the client has a controller_mutation_rate (else nothing is taken)."""
        return self._bucket is not None

    @property
    def throttle_time_ms(self) -> int:
        """The throttle time, less what passed since it was measured (Kafka's)."""
        return max(0, self._throttle_ms - (self._now_ms() - self._throttled_at_ms)) if self._throttle_ms else 0


class ControllerMutationQuotaManager:
    """The controller's controller_mutation_rate buckets, one per client (its
    user and client id resolved as every quota is), bounded as the other
    managers' sensors are. `now_ms`: the injected clock, milliseconds."""

    def __init__(self, now_ms: Callable[[], int], *, quota_window_num: int = QUOTA_WINDOW_NUM_DEFAULT,
                 quota_window_size_s: int = QUOTA_WINDOW_SIZE_S_DEFAULT, max_sensors: int = MAX_SENSORS) -> None:
        if quota_window_num < 1 or quota_window_size_s < 1:
            raise ValueError(f"controller.quota.window.num {quota_window_num} and "
                             f"controller.quota.window.size.seconds {quota_window_size_s} must be at least 1")
        self._now_ms = now_ms
        self.burst_seconds = (quota_window_num - 1) * quota_window_size_s
        self._buckets: BoundedSensors[tuple[str, str], TokenBucket] = BoundedSensors(lambda now_ms: TokenBucket(),
                                                                                      max_sensors)

    def quota_for(self, quotas: ClientQuotas, user: str, client_id: str, *, strict: bool) -> MutationQuota:
        if not quotas.enabled(CONTROLLER_MUTATION_RATE):
            return MutationQuota(None, None, 0.0, strict=strict, now_ms=self._now_ms)
        tags, rate = quotas.resolve(CONTROLLER_MUTATION_RATE, user, client_id)
        if rate is None:
            return MutationQuota(None, None, 0.0, strict=strict, now_ms=self._now_ms)
        bucket = self._buckets.get(tags, self._now_ms())
        return MutationQuota(bucket, rate, rate * self.burst_seconds, strict=strict, now_ms=self._now_ms)


class IpConnectionRateManager:
    """A listener's connection_creation_rate sensors, one per client IP (Kafka's
    ConnectionQuotas.recordIpConnectionMaybeThrottle), bounded as the others.
    `throttle_time_ms` is asked once per new connection."""

    def __init__(self, *, quota_window_num: int = QUOTA_WINDOW_NUM_DEFAULT,
                 quota_window_size_s: int = QUOTA_WINDOW_SIZE_S_DEFAULT, max_sensors: int = MAX_SENSORS) -> None:
        self.quota_window_num = quota_window_num
        self.quota_window_ms = quota_window_size_s * 1000
        self._rates: BoundedSensors[str, SampledRate] = BoundedSensors(
            lambda now_ms: SampledRate(window_num=quota_window_num, window_ms=self.quota_window_ms, now_ms=now_ms),
            max_sensors)
        self.throttled_connections = 0

    def throttle_time_ms(self, quotas: ClientQuotas, ip: str, now_ms: int) -> int:
        """0: the connection is taken (and counted); otherwise how long to hold it
        before closing it unserved (it is not counted)."""
        limit = quotas.ip_connection_rate(ip)
        if limit is None:
            return 0
        rate = self._rates.get(ip, now_ms)
        rate.record(1.0, now_ms)
        observed, window_ms = rate.rate_and_window_ms(now_ms)
        if observed <= limit:
            return 0
        rate.record(-1.0, now_ms)
        self.throttled_connections += 1
        # QuotaUtils.boundedThrottleTime: at most one quota window, as Kafka's ConnectionQuotas
        return min(int(round((observed - limit) / limit * window_ms)), self.quota_window_ms)
