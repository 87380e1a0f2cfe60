"""`rafka configs`, as kafka-configs.sh for client quotas: alter and describe the
quotas of users, client ids, their combination and their defaults over the wire
(AlterClientQuotas, DescribeClientQuotas through rafka's Admin), so a change
holds on every broker as soon as the command returns (the controller pushes the
image before it answers).

    rafka configs --alter --entity-type users --entity-name alice --add-config producer_byte_rate=1048576
    rafka configs --alter --entity-type clients --entity-default --add-config consumer_byte_rate=2097152
    rafka configs --alter --entity-type users --entity-name alice --entity-type clients --entity-name app \\
        --delete-config producer_byte_rate
    rafka configs --alter --user alice --client app --add-config 'producer_byte_rate=1024,consumer_byte_rate=2048'
    rafka configs --describe --entity-type users [--entity-name alice | --entity-default]

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
Not offered here: topics' and brokers' configs (DescribeConfigs /
IncrementalAlterConfigs), SCRAM credentials (`rafka users`).
Callers: rafka.cli.
"""

from __future__ import annotations

import argparse

from rafka.cluster_errors import UsageError
from rafka.core.client_quotas import CLIENT_ID, IP, USER

_TYPES = {"users": USER, "clients": CLIENT_ID, "ips": IP}
_TEXT = {USER: "user-principal", CLIENT_ID: "client-id", IP: "ip"}


class _Entity(argparse.Action):
    """Keeps --entity-type / --entity-name / --entity-default (and the
    shortcuts) in the order given, as pairs."""

    def __call__(self, parser, namespace, values, option_string=None):
        entities = getattr(namespace, "entities", None) or []
        if option_string == "--entity-type":
            entities.append([values, None, False])
        elif option_string in ("--user", "--client", "--ip"):
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
    configs = sub.add_parser("configs", help="alter and describe client quotas of users and client ids "
                                             "(kafka-configs.sh)")
    action = configs.add_mutually_exclusive_group(required=True)
    action.add_argument("--alter", action="store_true")
    action.add_argument("--describe", action="store_true")
    configs.set_defaults(entities=[])
    configs.add_argument("--entity-type", action=_Entity, choices=sorted(_TYPES))
    configs.add_argument("--entity-name", action=_Entity)
    configs.add_argument("--entity-default", action=_Entity, nargs=0)
    configs.add_argument("--user", action=_Entity)
    configs.add_argument("--client", action=_Entity)
    configs.add_argument("--ip", action=_Entity)
    configs.add_argument("--user-defaults", action=_Entity, nargs=0)
    configs.add_argument("--client-defaults", action=_Entity, nargs=0)
    configs.add_argument("--add-config", metavar="K=V[,K=V]", help="quotas to set, e.g. producer_byte_rate=1048576")
    configs.add_argument("--delete-config", metavar="K[,K]", help="quotas to remove")


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


def cmd_configs(admin, args, *, out=print) -> int:
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
