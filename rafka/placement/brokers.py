"""The broker registry: live Ray nodes that offer the `rafka_broker` resource and
carry the `rafka-broker-id` label (DESIGN section 4).

Ray's node table is the source of liveness: a node that dies leaves the registry,
and a node restarted with the same label (its log dir names the same broker id)
is the same broker again, whatever its new Ray node id. A broker node without
the label cannot hold replicas (they are pinned by label): it is listed with
broker id None, so an operator sees it.
Callers: the controller (assignment, reconciliation, `list_brokers`), the CLI.
"""

from __future__ import annotations

import ray

from rafka.core.broker_identity import BROKER_ID_LABEL, BROKER_RESOURCE  # noqa: F401 (re-exported)


def broker_nodes() -> list[dict]:
    """[{broker_id (int or None), node_id, address}] of every live broker node."""
    brokers = []
    for node in ray.nodes():
        if not node["Alive"] or node["Resources"].get(BROKER_RESOURCE, 0) <= 0:
            continue
        label = (node.get("Labels") or {}).get(BROKER_ID_LABEL)
        brokers.append({"broker_id": int(label) if label and label.isdigit() else None,
                        "node_id": node["NodeID"], "address": node["NodeManagerAddress"]})
    return sorted(brokers, key=lambda b: (b["broker_id"] is None, b["broker_id"] or 0, b["node_id"]))


def live_broker_ids() -> list[int]:
    return [b["broker_id"] for b in broker_nodes() if b["broker_id"] is not None]
