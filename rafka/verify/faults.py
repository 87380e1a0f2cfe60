"""The fault injector of `rafka verify`: the faults rafka claims to survive, one
after another, each logged with its start and end (rafka.core.history.Fault).

Two streams of faults overlap, as they would in production:
- replica faults (a leader or follower killed or paused, a broker restarted or
  replaced, the whole cluster restarted) run one after another in the calling
  thread, each once the cluster has healed (every partition online with its whole
  replica set in the ISR, every broker its metadata names live, every coordinator
  loaded, every broker's network processes answering from the controller's current
  image), so they never take down more than one broker's worth of replicas of a
  partition: a second broker lost on top of a first would make acks=all
  unavailable (min ISR 2), which is correct behaviour, not a finding;
- process faults that hold no replica (the controller, the coordinator, a member
  actor killed) strike from a second thread at any time, during the others too,
  except while the whole cluster restarts.
Faults that need the machine the actors run on (SIGKILL, SIGSTOP, node restarts)
run only on an embedded `local_cluster`; against `--address` the injector uses
the Ray kills alone.
With the transactional workload (issue 28) three more: the transaction
coordinator of the workload's transactional ids killed (Ray kill, and SIGKILL),
each aimed between a commit's EndTxn and its markers (the coordinator watched
until one of the workload's transactions is in PrepareCommit or PrepareAbort,
for up to AIM_S; else it strikes anyway, mid-transaction), and a leader of a
partition an open transaction wrote to killed (a replica fault; Ray kill and
SIGKILL in turn). Each fault's target says what it hit.
Callers: rafka.verify.run only.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time

import ray

from rafka.core.actor_names import (CONTROLLER_NAME, NAMESPACE, OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC,
                                    broker_actor_name, coordinator_actor_name, transaction_coordinator_actor_name)
from rafka.core.history import Fault
from rafka.core.transaction_log import partition_for
from rafka.placement.brokers import live_broker_ids

FAULT_KINDS = ("kill-leader", "sigkill-leader", "kill-follower", "kill-coordinator", "kill-controller",
               "kill-listener", "kill-member", "sigkill-member", "pause-leader", "restart-broker",
               "replace-broker", "restart-cluster", "kill-txn-coordinator", "sigkill-txn-coordinator",
               "kill-txn-leader")
PROCESS_FAULTS = {"kill-coordinator", "kill-controller", "kill-listener", "kill-member", "sigkill-member",
                  "kill-txn-coordinator", "sigkill-txn-coordinator"}
LOCAL_ONLY = {"sigkill-leader", "sigkill-member", "pause-leader", "restart-broker", "replace-broker",
              "restart-cluster", "sigkill-txn-coordinator"}
TRANSACTIONAL = {"kill-txn-coordinator", "sigkill-txn-coordinator", "kill-txn-leader"}
AIM_S = 3.0   # how long a transactional fault watches for its moment before striking anyway
MAX_NETWORK_PROCESSES = 16   # a bound on a broker's network processes, looked up by name in turn
WATCH_INTERVAL_S = 0.005   # between two asks of a coordinator while watching (a marker round lasts longer)


class FaultInjector:
    def __init__(self, cluster, history, clock, *, kinds, topic: str, gap_s: tuple[float, float],
                 process_gap_s: tuple[float, float], txn_topic: str | None = None,
                 transactional_ids=(), heal_timeout_s: float = 90.0, member_actors=None, restart_cluster=None,
                 seed: int = 0) -> None:
        self.cluster = cluster
        self.history = history
        self.clock = clock
        self.local = getattr(cluster, "ray_cluster", None) is not None
        # restart_cluster(crash: bool) -> the restarted cluster, with the workload on it
        self.restart_cluster = restart_cluster
        self.kinds = [k for k in kinds if (self.local or k not in LOCAL_ONLY)
                      and (k != "restart-cluster" or restart_cluster is not None)
                      and (k not in TRANSACTIONAL or (txn_topic is not None and transactional_ids))]
        self.txn_topic = txn_topic
        self.transactional_ids = list(transactional_ids)
        self.process_gap_s = process_gap_s
        self._txn_leader_turn = 0
        self._crash_next = True
        self.topic = topic
        self.gap_s = gap_s
        self.heal_timeout_s = heal_timeout_s
        self.member_actors = member_actors
        self.random = random.Random(seed)
        self.errors: list[str] = []
        self.done_by_kind: dict[str, int] = {}
        # held by a whole-cluster restart and by each process fault: no process
        # fault lands on a cluster that is being torn down or started
        self._cluster_lock = threading.Lock()
        self._counts_lock = threading.Lock()

    def run_for(self, duration_s: float) -> None:
        """Inject faults for `duration_s`, in the calling thread: it must be the main
        thread, since starting a Ray node (restart-broker, replace-broker) installs
        signal handlers, which Python allows in the main thread only."""
        deadline_s = time.monotonic() + duration_s
        replica_kinds = [k for k in self.kinds if k not in PROCESS_FAULTS]
        process_kinds = [k for k in self.kinds if k in PROCESS_FAULTS]
        side = None
        if process_kinds:
            side = threading.Thread(target=self._process_faults, args=(process_kinds, deadline_s),
                                    name="process-faults", daemon=True)
            side.start()
        if not replica_kinds:
            time.sleep(max(0.0, deadline_s - time.monotonic()))
        turn = 0
        while replica_kinds and time.monotonic() < deadline_s:
            time.sleep(min(self.random.uniform(*self.gap_s), max(0.0, deadline_s - time.monotonic())))
            if time.monotonic() >= deadline_s:
                break
            if not self.heal():
                continue
            kind = replica_kinds[turn % len(replica_kinds)]   # round robin: every kind comes up
            turn += 1
            if kind == "restart-cluster":
                with self._cluster_lock:
                    self._strike(kind)
            else:
                self._strike(kind)
        if side is not None:
            side.join(120)

    def _process_faults(self, kinds: list[str], deadline_s: float) -> None:
        """The second stream: a process fault every few seconds, round robin."""
        turn = 0
        while time.monotonic() < deadline_s:
            time.sleep(min(self.random.uniform(*self.process_gap_s), max(0.0, deadline_s - time.monotonic())))
            if time.monotonic() >= deadline_s:
                break
            with self._cluster_lock:
                self._strike(kinds[turn % len(kinds)])
            turn += 1

    def _strike(self, kind: str, attempts: int = 3) -> None:
        """Apply one fault; a target that is restarting right then (its actor
        unavailable or not found) is picked again, up to `attempts` times."""
        for attempt in range(attempts):
            started_ms = self.clock.now_ms()
            try:
                target = getattr(self, "_" + kind.replace("-", "_"))()
                break
            except (ray.exceptions.RayError, ValueError) as error:
                if attempt + 1 == attempts:
                    self.errors.append(f"{kind}: {type(error).__name__}: {error}")
                    return
                time.sleep(0.5)
            except Exception as error:   # the fault could not be applied: not counted
                self.errors.append(f"{kind}: {type(error).__name__}: {error}")
                return
        self.history.log(Fault(kind, target, started_ms, self.clock.now_ms()))
        with self._counts_lock:
            self.done_by_kind[kind] = self.done_by_kind.get(kind, 0) + 1

    # --- healing ------------------------------------------------------------------

    def heal(self) -> bool:
        """Wait until the cluster is whole again; False (and an error noted) if it
        is not within `heal_timeout_s`."""
        deadline_s = time.monotonic() + self.heal_timeout_s
        unhealed = "not checked"
        while time.monotonic() < deadline_s:
            unhealed = self._unhealed()
            if unhealed is None:
                return True
            time.sleep(0.2)
        self.errors.append(f"the cluster did not heal within {self.heal_timeout_s} s: {unhealed}")
        return False

    def _unhealed(self) -> str | None:
        """None once the cluster is whole, else the first thing found that is not."""
        try:
            snapshot = ray.get(self.cluster.controller.metadata_snapshot.remote(), timeout=5)["topics"]
            live = set(live_broker_ids())
            for name, topic in snapshot.items():
                for p in topic["partitions"]:
                    if (p["leader"] < 0 or p["adding"] or p["removing"] or sorted(p["isr"]) != sorted(p["replicas"])
                            or not set(p["brokers"]) <= live):
                        return (f"{name}-{p['partition']}: leader {p['leader']}, replicas {p['replicas']}, "
                                f"isr {p['isr']}, adding {p['adding']}, removing {p['removing']}, "
                                f"brokers {p['brokers']} (live {sorted(live)})")
            coordinators = len(snapshot.get(OFFSETS_TOPIC, {}).get("partitions", []))
            for c in range(coordinators):
                if not ray.get(_actor(coordinator_actor_name(c)).ping.remote(), timeout=5)["loaded"]:
                    return f"coordinator {c} not loaded"
            for c in range(len(snapshot.get(TRANSACTION_STATE_TOPIC, {}).get("partitions", []))):
                if not ray.get(_actor(transaction_coordinator_actor_name(c)).ping.remote(), timeout=5)["loaded"]:
                    return f"transaction coordinator {c} not loaded"
            return self._brokers_behind(live)
        except (ray.exceptions.RayError, ValueError, KeyError) as error:
            return f"{type(error).__name__}: {error}"

    def _brokers_behind(self, live: set[int]) -> str | None:
        """What clients see: every network process of every live broker answers from
        the controller's current image (or a newer one), so Metadata names every
        live broker and every partition's leader there. The controller's own view
        being whole is not enough: clients read a broker's."""
        version = ray.get(self.cluster.controller.cluster_image.remote(), timeout=5).version
        processes = {}   # (broker id, process) -> its describe(), all asked at once
        for broker_id in sorted(live):
            for process in range(MAX_NETWORK_PROCESSES):
                try:
                    processes[broker_id, process] = _actor(broker_actor_name(broker_id, process)).describe.remote()
                except ValueError:   # no such process: the broker runs fewer
                    if process == 0:
                        return f"broker {broker_id} has no network process"
                    break
        described = ray.get(list(processes.values()), timeout=5)
        for (broker_id, process), answer in zip(processes, described):
            if answer["image_version"] < version:
                return (f"broker {broker_id} process {process} answers from image {answer['image_version']}, "
                        f"the controller's is {version}")
        return None

    # --- targets --------------------------------------------------------------------

    def _partition(self) -> tuple[str, int, dict]:
        snapshot = ray.get(self.cluster.controller.metadata_snapshot.remote(), timeout=10)["topics"]
        topics = [self.topic, self.topic, OFFSETS_TOPIC]   # mostly the workload's
        if self.txn_topic is not None:
            topics += [self.txn_topic, TRANSACTION_STATE_TOPIC]
        topic = self.random.choice(topics)
        partitions = snapshot[topic]["partitions"]
        state = self.random.choice(partitions)
        return topic, state["partition"], state

    def _replica(self, topic: str, partition: int, replica_id: int):
        """The actor holding the replica, as the controller's metadata names it."""
        name = ray.get(self.cluster.controller.replica_actor.remote(topic, partition, replica_id), timeout=10)
        if name is None:
            raise ValueError(f"{topic}-{partition} replica {replica_id} has no actor")
        return _actor(name)

    def _wait_for_new_leader(self, topic: str, partition: int, epoch: int, timeout_s: float = 30.0) -> None:
        deadline_s = time.monotonic() + timeout_s
        while time.monotonic() < deadline_s:
            state = ray.get(self.cluster.controller.metadata_snapshot.remote(), timeout=5)["topics"][topic][
                "partitions"][partition]
            if state["leader_epoch"] > epoch and state["leader"] >= 0:
                return
            time.sleep(0.1)

    # --- the faults ---------------------------------------------------------------------

    def _kill_leader(self) -> str:
        topic, partition, state = self._partition()
        how = self._kill_partition_leader(topic, partition, state, sigkill=False)
        return f"{topic}-{partition} replica {state['leader']} ({how})"

    def _sigkill_leader(self) -> str:
        topic, partition, state = self._partition()
        how = self._kill_partition_leader(topic, partition, state, sigkill=True)
        return f"{topic}-{partition} replica {state['leader']} ({how})"

    def _kill_partition_leader(self, topic: str, partition: int, state: dict, *, sigkill: bool) -> str:
        """The leader's actor killed (by Ray, or SIGKILL to its process), then
        waited on until the controller elected another; how it was killed."""
        replica = self._replica(topic, partition, state["leader"])
        if sigkill:
            pid = ray.get(replica.describe.remote(), timeout=10)["pid"]
            os.kill(pid, signal.SIGKILL)
            how = f"SIGKILL pid {pid}"
        else:
            ray.kill(replica, no_restart=False)
            how = "Ray kill"
        self._wait_for_new_leader(topic, partition, state["leader_epoch"])
        return how

    def _kill_follower(self) -> str:
        topic, partition, state = self._partition()
        follower = self.random.choice([r for r in state["replicas"] if r != state["leader"]])
        ray.kill(self._replica(topic, partition, follower), no_restart=False)
        return f"{topic}-{partition} replica {follower} (Ray kill)"

    def _kill_coordinator(self) -> str:
        ray.kill(_actor(coordinator_actor_name(0)), no_restart=False)
        return "coordinator 0 (Ray kill)"

    def _kill_listener(self) -> str:
        """A broker's network process (its Kafka node, where clients connect): every
        client connection to that broker drops; Ray restarts it on the same port."""
        broker_id = self.random.choice(live_broker_ids())
        ray.kill(_actor(broker_actor_name(broker_id)), no_restart=False)
        return f"broker {broker_id}'s listener (Ray kill)"

    def _kill_controller(self) -> str:
        ray.kill(_actor(CONTROLLER_NAME), no_restart=False)
        return "controller (Ray kill)"

    def _member(self):
        if not self.member_actors:
            raise LookupError("no member actors in this run")
        index = self.random.randrange(len(self.member_actors))
        return index, self.member_actors[index]

    def _kill_member(self) -> str:
        index, member = self._member()
        ray.kill(member, no_restart=False)
        return f"member actor {index} (Ray kill)"

    def _sigkill_member(self) -> str:
        index, member = self._member()
        pid = ray.get(member.describe.remote(), timeout=10)["pid"]
        os.kill(pid, signal.SIGKILL)
        return f"member actor {index} (SIGKILL pid {pid})"

    def _pause_leader(self) -> str:
        """SIGSTOP the leader until the controller has replaced it, then SIGCONT:
        the old leader must step down and cut whatever it wrote alone."""
        topic, partition, state = self._partition()
        pid = ray.get(self._replica(topic, partition, state["leader"]).describe.remote(), timeout=10)["pid"]
        os.kill(pid, signal.SIGSTOP)
        try:
            self._wait_for_new_leader(topic, partition, state["leader_epoch"])
        finally:
            os.kill(pid, signal.SIGCONT)
        return f"{topic}-{partition} replica {state['leader']} (SIGSTOP pid {pid} until replaced)"

    def _restart_broker(self) -> str:
        broker_id = self.random.choice(live_broker_ids())
        self.cluster.restart_node(broker_id)
        return f"broker {broker_id} (node restarted, same disk)"

    def _restart_cluster(self) -> str:
        """Every node stopped and started again on the same disks, in turn as a
        crash (no replica closes its log) and as a clean shutdown; the clients stop
        before and start again after (their in-flight sends are logged first)."""
        crash, self._crash_next = self._crash_next, not self._crash_next
        self.cluster = self.restart_cluster(crash)
        return f"every broker ({'crash' if crash else 'clean shutdown'}, same disks)"

    def _replace_broker(self) -> str:
        """A broker lost for good, a new machine added: its replicas move there once
        the controller's broker_replacement_timeout_ms passed."""
        broker_id = self.random.choice(live_broker_ids())
        self.cluster.remove_node(self.cluster.node_of_broker(broker_id))
        self.cluster.add_node()
        return f"broker {broker_id} (removed for good, a new broker added)"


    # --- transactional faults -----------------------------------------------------------

    def _txn_coordinator(self) -> tuple[int, object]:
        """(partition, actor): the coordinator of one of the workload's
        transactional ids."""
        snapshot = ray.get(self.cluster.controller.metadata_snapshot.remote(), timeout=10)["topics"]
        transactional_id = self.random.choice(self.transactional_ids)
        partition = partition_for(transactional_id, len(snapshot[TRANSACTION_STATE_TOPIC]["partitions"]))
        return partition, _actor(transaction_coordinator_actor_name(partition))

    def _watch_transactions(self, coordinator, states: tuple[str, ...], timeout_s: float
                            ) -> tuple[str, str] | None:
        """Asks the coordinator (ListTransactions), every WATCH_INTERVAL_S, until one
        of the workload's transactional ids is in one of `states`: (id, state), or
        None after `timeout_s`."""
        deadline_s = time.monotonic() + timeout_s
        while time.monotonic() < deadline_s:
            try:
                listings, _ = ray.get(coordinator.list_transactions.remote(states=states), timeout=2)
            except (ray.exceptions.RayError, ValueError):   # loading, or restarting: ask again
                listings = []
            mine = [(t.transactional_id, t.state) for t in listings if t.transactional_id in self.transactional_ids]
            if mine:
                return mine[0]
            time.sleep(WATCH_INTERVAL_S)
        return None

    def _aim_at_markers(self, coordinator) -> str:
        found = self._watch_transactions(coordinator, ("PrepareCommit", "PrepareAbort"), AIM_S)
        if found is not None:
            return f"{found[0]} in {found[1]}: between EndTxn and its markers"
        found = self._watch_transactions(coordinator, ("Ongoing",), 0.5)
        return f"{found[0]} in {found[1]}: open" if found is not None else "no transaction of the workload seen open"

    def _kill_txn_coordinator(self) -> str:
        partition, coordinator = self._txn_coordinator()
        moment = self._aim_at_markers(coordinator)
        ray.kill(coordinator, no_restart=False)
        return f"txn-coordinator {partition} (Ray kill; {moment})"

    def _sigkill_txn_coordinator(self) -> str:
        partition, coordinator = self._txn_coordinator()
        pid = ray.get(coordinator.ping.remote(), timeout=10)["pid"]
        moment = self._aim_at_markers(coordinator)
        os.kill(pid, signal.SIGKILL)
        return f"txn-coordinator {partition} (SIGKILL pid {pid}; {moment})"

    def _kill_txn_leader(self) -> str:
        """The leader of a partition of the transactional topic that an open
        transaction of the workload wrote to (watched for up to AIM_S; else any
        partition of the topic), killed by Ray and by SIGKILL in turn."""
        _, coordinator = self._txn_coordinator()
        open_on, partition, deadline_s = None, None, time.monotonic() + AIM_S
        while partition is None and time.monotonic() < deadline_s:
            found = self._watch_transactions(coordinator, ("Ongoing",), max(0.0, deadline_s - time.monotonic()))
            if found is None:
                break
            found = found[0]
            try:
                described = ray.get(coordinator.describe_transaction.remote(found), timeout=2)
            except (ray.exceptions.RayError, ValueError):
                continue
            mine = sorted(p for t, p in described.topic_partitions if t == self.txn_topic)
            if mine:
                open_on, partition = found, self.random.choice(mine)
        snapshot = ray.get(self.cluster.controller.metadata_snapshot.remote(), timeout=10)["topics"]
        partitions = snapshot[self.txn_topic]["partitions"]
        state = partitions[partition] if partition is not None else self.random.choice(partitions)
        sigkill = self.local and self._txn_leader_turn % 2 == 1
        self._txn_leader_turn += 1
        how = self._kill_partition_leader(self.txn_topic, state["partition"], state, sigkill=sigkill)
        moment = f"{open_on} open on it" if open_on is not None else "no open transaction of the workload seen"
        return f"{self.txn_topic}-{state['partition']} replica {state['leader']} ({how}; {moment})"


def _actor(name: str):
    return ray.get_actor(name, namespace=NAMESPACE)
