"""`rafka features`, as kafka-features.sh (Kafka's FeatureCommand), over the wire
through rafka's Admin (ApiVersions to any broker; UpdateFeatures, which the broker
relays to the controller).

    rafka features describe
    rafka features upgrade --feature group.version=1 [--feature ...] [--dry-run]
    rafka features downgrade --feature group.version=0 [--unsafe] [--dry-run]
    rafka features disable --feature group.version [--unsafe] [--dry-run]

Output as kafka-features.sh prints it: per supported feature "Feature: group.version
<TAB>SupportedMinVersion: 0<TAB>SupportedMaxVersion: 1<TAB>FinalizedVersionLevel: 1
<TAB>Epoch: 42"; per feature updated, in name order, "group.version was upgraded to
1." ("can be upgraded" with --dry-run; "was disabled."), or "Could not upgrade
group.version to 2. <why>" ("Can not" with --dry-run) and then, as the command's
error, "<n> out of <m> operation(s) failed.". A downgrade or disable is a safe
downgrade unless --unsafe. rafka has no metadata.version, so kafka-features.sh's
--release-version and --metadata (which set it) are not offered.
Callers: rafka.cli.
"""

from __future__ import annotations

from rafka.cluster_errors import UsageError
from rafka.core.errors import KafkaError
from rafka.core.features import SAFE_DOWNGRADE, UNSAFE_DOWNGRADE, UPGRADE


def add_parser(sub) -> None:
    features = sub.add_parser("features", help="describe and update feature flags (kafka-features.sh)")
    operations = features.add_subparsers(dest="operation", required=True)
    operations.add_parser("describe", help="the features the brokers support and the cluster's finalized levels")
    for name, help_text in (("upgrade", "upgrade feature flags"), ("downgrade", "downgrade feature flags"),
                            ("disable", "disable feature flags (a downgrade to level 0)")):
        operation = operations.add_parser(name, help=help_text)
        operation.add_argument("--feature", action="append", default=[],
                               help="a feature to disable" if name == "disable" else
                               "feature=level, e.g. group.version=1 (repeatable)")
        if name != "upgrade":
            operation.add_argument("--unsafe", action="store_true",
                                   help="an unsafe downgrade (it may lose metadata)")
        operation.add_argument("--dry-run", action="store_true", help="validate, change nothing")


def cmd_features(admin, args, out=print) -> int:
    if args.operation == "describe":
        described = admin.describe_features()
        epoch = "-" if described.epoch is None else described.epoch
        for name, (low, high) in sorted(described.supported.items()):
            out(f"Feature: {name}\tSupportedMinVersion: {low}\tSupportedMaxVersion: {high}\t"
                f"FinalizedVersionLevel: {described.finalized.get(name, 0)}\tEpoch: {epoch}")
        return 0
    upgrade_type = UPGRADE if args.operation == "upgrade" else UNSAFE_DOWNGRADE if args.unsafe else SAFE_DOWNGRADE
    updates: dict[str, tuple[int, int]] = {}
    for feature in args.feature:
        name, level = (feature, 0) if args.operation == "disable" else _name_and_level(feature)
        if name in updates:
            raise UsageError(f"Feature {name} was specified more than once.")
        updates[name] = (level, upgrade_type)
    if not updates:
        raise UsageError(f"You must specify at least one feature to {args.operation}")
    try:
        admin.update_features(updates, validate_only=args.dry_run)
        failure = None
    except KafkaError as error:   # the controller sets all or none: every feature failed with it
        failure = error
    for name, (level, _) in sorted(updates.items()):
        what = f"disable {name}" if args.operation == "disable" else f"{args.operation} {name} to {level}"
        if failure is not None:
            out(f"{'Can not' if args.dry_run else 'Could not'} {what}. {failure.message}")
        else:
            done = "disabled." if args.operation == "disable" else f"{args.operation}d to {level}."
            out(f"{name} {'can be' if args.dry_run else 'was'} {done}")
    if failure is not None:
        raise UsageError(f"{len(updates)} out of {len(updates)} operation(s) failed.")
    return 0


def _name_and_level(text: str) -> tuple[str, int]:
    """Kafka's FeatureCommand.parseNameAndLevel."""
    name, equals, level = text.partition("=")
    if not equals:
        raise UsageError(f"Can't parse feature=level string {text}: equals sign not found.")
    try:
        parsed = int(level.strip())
    except ValueError:
        parsed = None
    if parsed is None or not -(1 << 15) <= parsed < (1 << 15):
        raise UsageError(f"Can't parse feature=level string {text}: unable to parse {level.strip()} as a short.")
    return name.strip(), parsed
