"""`rafka configs`, as kafka-configs.sh: alter and describe the quotas of users,
client ids, their combination and their defaults (AlterClientQuotas,
DescribeClientQuotas), and the configs of topics, brokers and broker loggers
(DescribeConfigs, IncrementalAlterConfigs), over the wire through rafka's
Admin, so a change holds on every broker as soon as the command returns (the
controller pushes the image before it answers).

    rafka configs --alter --entity-type users --entity-name alice --add-config producer_byte_rate=1048576
    rafka configs --alter --entity-type clients --entity-default --add-config consumer_byte_rate=2097152
    rafka configs --alter --entity-type users --entity-name alice --entity-type clients --entity-name app \\
        --delete-config producer_byte_rate
    rafka configs --alter --user alice --client app --add-config 'producer_byte_rate=1024,consumer_byte_rate=2048'
    rafka configs --describe --entity-type users [--entity-name alice | --entity-default]
    rafka configs --alter --entity-type topics --entity-name orders --add-config 'retention.ms=60000,cleanup.policy=[compact,delete]'
    rafka configs --describe --topic orders [--all]
    rafka configs --alter --broker-logger 1 --add-config rafka.core.replica=DEBUG
    rafka configs --describe --entity-type broker-loggers --entity-name 1

What kafka-configs.sh does, and what this does the same way (ConfigCommand):
  * entity types users, clients and ips (and --user / --client / --ip with
    their names, --user-defaults / --client-defaults); each --entity-type takes
    the next --entity-name or --entity-default; --alter needs a name or default
    for each type ("--entity-name or --entity-default must be specified with
    each --entity-type for --alter");
  * --add-config takes k=v pairs separated by commas, --delete-config names;
  * --alter prints "Completed updating config for user alice." (for a default:
    "Completed updating default config for users in the cluster."); the
    controller's refusal is raised as its typed error (INVALID_REQUEST with
    Kafka's message);
  * --describe prints "Quota configs for user-principal 'alice', client-id 'app'
    are producer_byte_rate=1024.0" per entity the filter matches (strict: only
    entities of exactly the types given; a type without a name matches any name).
  * topics, brokers and broker-loggers (and --topic, --broker, --broker-logger
    with their names): one entity, named; --add-config values may group commas
    in brackets (cleanup.policy=[compact,delete]); --alter describes the entity
    first, as ConfigCommand does: a topic's --delete-config names only configs
    the topic sets ("Invalid config(s): x"), a broker logger's names only loggers
    the broker has ("Invalid broker logger(s): x"); then one
    IncrementalAlterConfigs (DELETE first, then SET) and "Completed updating
    config for topic orders." (broker 1, broker-logger 1);
  * --describe prints "Dynamic configs for topic orders are:" (a broker's and a
    broker logger's likewise; "All configs for ..." with --all) and a line
    "  name=value sensitive=false synonyms={}" per config, sorted: a topic's and a
    broker's own settings, every config with --all, every logger of a broker
    (rafka lists no synonyms).
Not offered here: SCRAM credentials (`rafka users`).
Callers: rafka.cli.
"""

from __future__ import annotations

import argparse

from rafka.cluster_errors import UsageError
from rafka.core.client_quotas import CLIENT_ID, IP, USER
from rafka.core.config import DELETE, SET
from rafka.protocol.config_requests import BROKER, BROKER_LOGGER, TOPIC

_TYPES = {"users": USER, "clients": CLIENT_ID, "ips": IP}
# the entity types whose configs are DescribeConfigs resources: type, the word Kafka's output uses
_RESOURCES = {"topics": (TOPIC, "topic"), "brokers": (BROKER, "broker"),
              "broker-loggers": (BROKER_LOGGER, "broker-logger")}
_DYNAMIC_SOURCES = {TOPIC: {1}, BROKER: {2, 3}, BROKER_LOGGER: None}   # None: every entry (ConfigCommand)
_TEXT = {USER: "user-principal", CLIENT_ID: "client-id", IP: "ip"}


class _Entity(argparse.Action):
    """Keeps --entity-type / --entity-name / --entity-default (and the
    shortcuts) in the order given, as pairs."""

    def __call__(self, parser, namespace, values, option_string=None):
        entities = getattr(namespace, "entities", None) or []
        if option_string == "--entity-type":
            entities.append([values, None, False])
        elif option_string in ("--user", "--client", "--ip", "--topic", "--broker", "--broker-logger"):
            entities.append([option_string[2:] + "s", values, True])
        elif option_string in ("--user-defaults", "--client-defaults"):
            entities.append([option_string[2:].split("-")[0] + "s", None, True])
        else:   # --entity-name / --entity-default: the last type still unnamed
            unnamed = next((e for e in entities if not e[2]), None)
            if unnamed is None:
                raise UsageError("More entity names specified than entity types")
            unnamed[1], unnamed[2] = (values if option_string == "--entity-name" else None), True
        namespace.entities = entities


def add_parser(sub) -> None:
    configs = sub.add_parser("configs", help="alter and describe client quotas of users and client ids, and "
                                             "configs of topics, brokers and broker loggers (kafka-configs.sh)")
    action = configs.add_mutually_exclusive_group(required=True)
    action.add_argument("--alter", action="store_true")
    action.add_argument("--describe", action="store_true")
    configs.set_defaults(entities=[])
    configs.add_argument("--entity-type", action=_Entity, choices=sorted(_TYPES) + sorted(_RESOURCES))
    configs.add_argument("--entity-name", action=_Entity)
    configs.add_argument("--entity-default", action=_Entity, nargs=0)
    configs.add_argument("--user", action=_Entity)
    configs.add_argument("--client", action=_Entity)
    configs.add_argument("--ip", action=_Entity)
    configs.add_argument("--topic", action=_Entity)
    configs.add_argument("--broker", action=_Entity)
    configs.add_argument("--broker-logger", action=_Entity)
    configs.add_argument("--all", action="store_true", help="with --describe: every config, not only those set")
    configs.add_argument("--user-defaults", action=_Entity, nargs=0)
    configs.add_argument("--client-defaults", action=_Entity, nargs=0)
    configs.add_argument("--add-config", metavar="K=V[,K=V]",
                         help="quotas or configs to set, e.g. producer_byte_rate=1048576, retention.ms=60000")
    configs.add_argument("--delete-config", metavar="K[,K]", help="quotas or configs to remove")


def _added(text: str | None) -> list[tuple[str, float]]:
    ops = []
    for pair in (text or "").split(","):
        if not pair.strip():
            continue
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"Invalid entity config: all configs to be added must be in the format "
                             f"\"key=val\": {pair!r}")
        try:
            ops.append((name.strip(), float(value)))
        except ValueError:
            raise UsageError(f"Invalid quota value {value!r} for {name.strip()}: a number") from None
    return ops


def _pairs(text: str | None) -> list[tuple[str, str]]:
    """--add-config's k=v pairs, commas inside [...] kept in a value (brackets dropped)."""
    pairs, depth, current = [], 0, ""
    for char in (text or "") + ",":
        depth += (char == "[") - (char == "]")
        if char == "," and depth == 0:
            if current.strip():
                name, sep, value = current.partition("=")
                if not sep or not name.strip():
                    raise UsageError(f"Invalid entity config: all configs to be added must be in the format "
                                     f"\"key=val\": {current!r}")
                value = value.strip()
                pairs.append((name.strip(), value[1:-1] if value.startswith("[") and value.endswith("]") else value))
            current = ""
        else:
            current += char
    return pairs


def _resource_configs(admin, args, out) -> int:
    """kafka-configs.sh for a topic, a broker or a broker's loggers (module note)."""
    if len(args.entities) != 1 or not args.entities[0][2] or args.entities[0][1] is None:
        raise UsageError("exactly one named entity is taken for topics, brokers and broker-loggers "
                         "(--entity-type with --entity-name, or --topic, --broker, --broker-logger)")
    entity_type, name, _ = args.entities[0]
    kind, word = _RESOURCES[entity_type]
    if kind != TOPIC and not name.lstrip("-").isdigit():
        raise UsageError(f"The entity name for {entity_type} must be a valid integer broker id, but it is: {name}")
    resource = (kind, name)

    def described(everything: bool) -> list:
        (found,) = admin.describe_configs([resource]).values()
        if isinstance(found, Exception):
            raise found
        sources = None if everything else _DYNAMIC_SOURCES[kind]
        return sorted((c for c in found if sources is None or c.source in sources), key=lambda c: c.name)
    if args.describe:
        out(f"{'All' if args.all else 'Dynamic'} configs for {word} {name} are:")
        for config in described(args.all):
            value = "null" if config.value is None else config.value
            out(f"  {config.name}={value} sensitive={str(config.sensitive).lower()} synonyms={{}}")
        return 0
    added = _pairs(args.add_config)
    deleted = [n.strip() for n in (args.delete_config or "").split(",") if n.strip()]
    if not added and not deleted:
        raise UsageError("At least one of --add-config or --delete-config must be specified with --alter")
    known = {c.name for c in described(False)}
    unknown = [n for n in deleted if n not in known] if kind != BROKER_LOGGER else [
        n for n in [*deleted, *(k for k, _ in added)] if n not in known]
    if unknown:
        raise UsageError(f"Invalid broker logger(s): {','.join(unknown)}" if kind == BROKER_LOGGER
                         else f"Invalid config(s): {','.join(unknown)}")
    ops = [(DELETE, n, "") for n in deleted] + [(SET, k, v) for k, v in added]
    (error,) = admin.incremental_alter_configs({resource: ops}).values()
    if error is not None:
        raise error
    out(f"Completed updating config for {word} {name}.")
    return 0


def cmd_configs(admin, args, *, out=print) -> int:
    if any(t in _RESOURCES for t, _, _ in args.entities):
        return _resource_configs(admin, args, out)
    entities = [(_TYPES[t], name, named) for t, name, named in args.entities]
    if not entities:
        raise UsageError("--entity-type (users, clients or ips), --user or --client must be specified")
    if args.alter:
        if not all(named for _, _, named in entities):
            raise UsageError("--entity-name or --entity-default must be specified with each --entity-type "
                             "for --alter")
        ops: list[tuple[str, float | None]] = _added(args.add_config)
        ops += [(name.strip(), None) for name in (args.delete_config or "").split(",") if name.strip()]
        if not ops:
            raise UsageError("At least one of --add-config or --delete-config must be specified with --alter")
        entity = [(t, name) for t, name, _ in entities]
        (error,) = admin.alter_client_quotas([(entity, ops)])
        if error is not None:
            raise error
        first_type, first_name = args.entities[0][0], entity[0][1]
        if first_name is not None:
            out(f"Completed updating config for {first_type[:-1]} {first_name}.")
        else:
            out(f"Completed updating default config for {first_type} in the cluster.")
        return 0
    components = [(t, name) for t, name, named in entities if named]
    any_name = frozenset(t for t, _, named in entities if not named)
    for entity, values in admin.describe_client_quotas(components, strict=True, any_name=any_name):
        names = dict(entity)
        described = ", ".join((f"{_TEXT[t]} '{names[t]}'" if names[t] is not None else f"the default {_TEXT[t]}")
                              for t in (USER, CLIENT_ID, IP) if t in names)
        out(f"Quota configs for {described} are "
            f"{', '.join(f'{k}={v!r}' for k, v in sorted(values.items()))}")
    return 0
