"""Where every replica would land, and which stay Pending: kube-scheduler's default profile replayed on the
Nodes, after policylib's mutation, before anything is installed (docs/simulate.md says exactly what is and is
not modelled).

For each workload, in the order given, its effective replica count is placed one pod at a time by the
placement engine (:mod:`policylib.simulate.engine`): kube-scheduler 1.36's filter and score plugins in a
table, with the default profile's weights. Nodes with the same best score are a tie the real scheduler breaks
at random: the workload is then placed again with the ties broken other ways, and where the Pending count
differs, the range is reported. What a pod uses and the simulator does not model is named per workload, and
its Pending count is a range up to every replica.

Bound pods in the input (among the objects or the Nodes) count as load, towards spread counts and for pod
(anti-)affinity. Volcano Jobs: each partition must fit inside one HyperNode of at most the allowed tier
(HyperNodes discovered from the Nodes' labels, as ``policylib hypernodes`` builds them).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

from ..config import Config, load_config
from ..constants import VOLCANO_JOB_API_VERSION
from ..errors import PolicyError, object_ref
from ..facts import ClusterFacts, namespace_of
from ..hypernodes import discover_hypernodes, leaf_nodes
from ..spread import effective_replicas, is_deployment, mutate_deployment
from ..validation import DO_NOT_SCHEDULE, SCHEDULE_ANYWAY
from .engine import (
    MSG_AFFINITY,
    MSG_SPREAD,
    MSG_SPREAD_LABEL,
    MSG_TOO_MANY_PODS,
    MSG_UNSCHEDULABLE,
    ZONE_LABEL,
    Cluster,
    NodeState,
    PodShape,
    node_selector_term_matches,
    tolerates,
)
from .resources import DEFAULT_CPU_MILLI, DEFAULT_MEMORY, fits, pod_requests

if TYPE_CHECKING:
    import numpy as np

__all__ = ["DO_NOT_SCHEDULE", "SCHEDULE_ANYWAY", "MSG_AFFINITY", "MSG_SPREAD", "MSG_SPREAD_LABEL",
           "MSG_TOO_MANY_PODS", "MSG_UNSCHEDULABLE", "DEFAULT_CPU_MILLI", "DEFAULT_MEMORY", "Cluster", "NodeState",
           "Placement", "PodShape", "fits", "is_bound_pod", "node_selector_term_matches", "node_states",
           "order_independent", "place_pods", "pod_requests", "simulate", "tolerates"]

#: Tie-breaking orders tried to find the range of Pending counts: name order, reversed, two shuffles.
TIE_ORDERS = ("name", "reverse", 1, 2)
DEFAULT_SCHEDULER = "default-scheduler"
#: Rule R14: once a tie has been broken, later workloads are also placed with the earlier ties broken the other
#: ways (their Pending count a range over all), while Nodes x replicas stays within this budget.
BRANCH_BUDGET = 200_000


# --- one workload --------------------------------------------------------------------------------

@dataclass
class Placement:
    """Where one workload's replicas would go."""

    kind: str
    namespace: str
    name: str
    replicas: int
    placed: dict[str, int]
    zones: dict[str, int]
    pending: int
    pending_max: int
    reasons: list[str]
    node_zones: dict[str, str] = field(default_factory=dict)   # for the chart: each used node's zone
    not_modelled: list[str] = field(default_factory=list)      # what the pods use that is not simulated
    deterministic: bool = True      # every replica went to the one best-scored node (no tie was broken)

    @property
    def pending_range(self) -> str:
        return str(self.pending) if self.pending == self.pending_max else f"{self.pending}-{self.pending_max}"

    def as_dict(self) -> dict[str, Any]:
        out = {"kind": self.kind, "namespace": self.namespace, "name": self.name, "replicas": self.replicas,
               "placed": self.placed, "zones": self.zones, "pending": self.pending, "reasons": self.reasons}
        if self.pending_max != self.pending:
            out["pendingMax"] = self.pending_max
        if self.not_modelled:
            out["notModelled"] = self.not_modelled
        return out


def _tie_rank(n: int, order: Any) -> np.ndarray:
    """Which node wins a tie: name order (the nodes are sorted by name), reversed, or a seeded shuffle."""
    import numpy as np
    if order == "reverse":
        return np.arange(n)[::-1].copy()
    if isinstance(order, int):
        ranks = list(range(n))
        random.Random(order).shuffle(ranks)
        return np.array(ranks, dtype=np.int64)
    return np.arange(n)


def place_pods(pod: PodShape, count: int, nodes: list[NodeState], order: Any = "name") -> tuple[dict[str, Any], int, list[Any]]:
    """Place ``count`` replicas on ``nodes`` (bound in place); returns (pods per node, Pending, reasons)."""
    placed, pending, reasons, _ = Cluster(nodes).place(pod, count, _tie_rank(len(nodes), order))
    return placed, pending, reasons


def order_independent(pod: PodShape, nodes: list[NodeState] | Cluster) -> bool:
    """Whether the number placed cannot depend on the scheduler's choices among tied nodes: no DoNotSchedule
    constraint, or only ones whose domains are single nodes (each node then holds at most the global minimum plus
    maxSkew, whatever the order), and required pod (anti-)affinity on single nodes only."""
    hard = [c.get("topologyKey") for c in pod.constraints if c.get("whenUnsatisfiable") == DO_NOT_SCHEDULE]
    hard += [t.key for t in pod.affinity_terms + pod.anti_terms]
    if isinstance(nodes, Cluster):
        return all(nodes.single_node_domains(str(key)) for key in hard)
    for key in hard:
        values = [n.labels.get(key) for n in nodes if key in n.labels]
        if len(set(values)) < len(values):
            return False
    return True


def _zones(placed: dict[str, int], nodes: dict[str, NodeState]) -> dict[str, int]:
    zones: dict[str, int] = {}
    for name, n in placed.items():
        zone = nodes[name].labels.get(ZONE_LABEL, "")
        zones[zone] = zones.get(zone, 0) + n
    return dict(sorted(zones.items()))


def _node_zones(placed: dict[str, int], nodes: dict[str, NodeState]) -> dict[str, str]:
    return {name: nodes[name].labels.get(ZONE_LABEL, "") for name in placed}


def unmodelled_features(spec: dict[str, Any], pod: PodShape) -> list[str]:
    """Rule R11: what a pod uses that the simulator does not model (each named): its Pending count is then a range
    from the simulated figure up to every replica."""
    out = list(dict.fromkeys(pod.unmodelled))
    volumes = [v for v in spec.get("volumes") or [] if isinstance(v, dict)]
    if any("persistentVolumeClaim" in v or "ephemeral" in v for v in volumes):
        out.append("persistent volumes (VolumeBinding, VolumeZone, NodeVolumeLimits, VolumeRestrictions)")
    if spec.get("resourceClaims"):
        out.append("DRA resource claims (DynamicResources)")
    if spec.get("priorityClassName") or spec.get("priority") is not None:
        out.append("priority and preemption (DefaultPreemption)")
    return out


def simulate_deployment(obj: dict[str, Any], config: Config, facts: ClusterFacts, cluster: Cluster,
                        order: Any = "name", search: bool = True) -> Placement:
    """One Deployment placed on ``cluster`` (bound in place), ties broken by ``order``; ``search``: where a tie
    was broken, place it again on copies with the ties broken other ways and report the range of Pending."""
    ns = namespace_of(obj)
    name = (obj.get("metadata") or {}).get("name", "")
    mutated = mutate_deployment(obj, config, facts=facts, namespace=ns).object
    count = effective_replicas(mutated, facts, ns).replicas
    template = (mutated.get("spec") or {}).get("template") or {}
    spec = template.get("spec") or {}
    selector = (mutated.get("spec") or {}).get("selector")
    pod = PodShape.of_template(template, ns, f"sim-{name}", selector if isinstance(selector, dict) else None)
    scheduler = spec.get("schedulerName") or DEFAULT_SCHEDULER
    if scheduler != DEFAULT_SCHEDULER or spec.get("nodeName"):
        why = (f"schedulerName {scheduler!r} is not kube-scheduler's default profile" if scheduler != DEFAULT_SCHEDULER
               else f"spec.nodeName {spec.get('nodeName')!r} binds the pods without the scheduler")
        return Placement("Deployment", ns, name, count, {}, {}, 0, count, [f"not simulated: {why}"],
                         not_modelled=[why], deterministic=False)
    if spec.get("schedulingGates"):
        gates = ", ".join(str(g.get("name")) for g in spec["schedulingGates"] if isinstance(g, dict))
        return Placement("Deployment", ns, name, count, {}, {}, count, count,
                         [f"SchedulingGated: the pods wait for their scheduling gates ({gates}) to be removed"])
    searched = search and count > 1 and not order_independent(pod, cluster)
    before = [n.copy() for n in cluster.states] if searched else None
    placed, pending, reasons, deterministic = cluster.place(pod, count, _tie_rank(len(cluster.states), order))
    pendings = [pending]
    if before is not None and not deterministic:
        for order in TIE_ORDERS[1:]:
            trial = Cluster([n.copy() for n in before])
            pendings.append(trial.place(pod, count, _tie_rank(len(before), order))[1])
    notes = unmodelled_features(spec, pod)
    high = count if notes else max(pendings)
    by_name = {k: cluster.states[cluster.index[k]] for k in placed}
    return Placement("Deployment", ns, name, count, dict(sorted(placed.items())), _zones(placed, by_name),
                     min(pendings), high, reasons + [f"not modelled: {n}" for n in notes],
                     _node_zones(placed, by_name), notes, deterministic and not notes)


# --- Volcano Jobs: partitions inside HyperNodes --------------------------------------------------

def simulate_volcano_job(obj: dict[str, Any], config: Config, nodes: list[NodeState],
                         raw_nodes: list[dict[str, Any]]) -> Placement:
    """Each partition inside one HyperNode of at most the allowed tier; other tasks pod by pod. The Job is
    a gang: unless its minimum binds (:func:`gang_shortfall`), nothing binds and every pod stays Pending."""
    ns = namespace_of(obj)
    from ..mutate import mutate
    from ..validation import unenforced_partition_tier_name
    from ..volcano import tier_limit
    mutated = mutate(obj, config, namespace=ns).object
    hypernodes = discover_hypernodes(raw_nodes, config.volcano.networkTopologyDiscovery)
    leaves = leaf_nodes(hypernodes)
    trial = [n.copy() for n in nodes]
    by_name = {n.name: n for n in trial}
    placed: dict[str, int] = {}
    pending, reasons, replicas = 0, [], 0
    bound: list[tuple[dict[str, Any], int, int]] = []   # per task: (task, pods placed, partitions placed)
    for task in (mutated.get("spec") or {}).get("tasks") or []:
        count = int(task.get("replicas") or 0)
        replicas += count
        pod = PodShape.of_template(task.get("template") or {}, ns, f"sim-{task.get('name')}")
        policy = task.get("partitionPolicy")
        unbounded = unenforced_partition_tier_name(policy, config.volcano.version)
        if not isinstance(policy, dict) or unbounded:
            got, left, why = place_pods(pod, count, trial)
            for k, v in got.items():
                placed[k] = placed.get(k, 0) + v
            pending += left
            reasons += [f"task {task.get('name')}: {w}" for w in why]
            if unbounded:
                reasons.append(f"task {task.get('name')}: Volcano {config.volcano.version} ignores the partitions' "
                               f"highestTierName {unbounded!r}: placed without a HyperNode bound")
            size = int(policy.get("partitionSize") or 1) if unbounded else 1
            bound.append((task, count - left, (count - left) // size if unbounded else 0))
            continue
        size, total = int(policy.get("partitionSize") or 1), int(policy.get("totalPartitions") or 0)
        tier = tier_limit(policy, hypernodes)
        groups = [leaves[h["metadata"]["name"]] for h in hypernodes if tier is not None and h["spec"]["tier"] <= tier]
        partitions = 0
        for p in range(total):
            for group in groups:
                members = [by_name[n] for n in group if n in by_name]
                attempt = [m.copy() for m in members]
                got, left, _ = place_pods(pod, size, attempt)
                if left == 0:
                    place_pods(pod, size, members)
                    for k, v in got.items():
                        placed[k] = placed.get(k, 0) + v
                    partitions += 1
                    break
            else:
                pending += size
                limit = f"tier-{tier}" if tier is not None else "any"
                reasons.append(f"task {task.get('name')}: partition {p + 1} of {total} ({size} pods) fits in no "
                               f"{limit} HyperNode")
        bound.append((task, partitions * size, partitions))
    shortfall = gang_shortfall(mutated, bound)
    if shortfall:
        placed, pending = {}, replicas
        reasons.append(f"{shortfall}: the gang binds nothing, all {replicas} pods stay Pending")
    else:
        for node, state in zip(nodes, trial, strict=True):
            node.requested, node.pods, node.bound = state.requested, state.pods, state.bound
            node.nonzero, node.pod_list = state.nonzero, state.pod_list
    return Placement("Job", ns, (obj.get("metadata") or {}).get("name", ""), replicas,
                     dict(sorted(placed.items())), _zones(placed, by_name), pending, pending, reasons,
                     _node_zones(placed, by_name))


def gang_shortfall(job: dict[str, Any], bound: list[tuple[dict[str, Any], int, int]]) -> str | None:
    """Rule V21: why Volcano's gang would bind none of the Job's pods, or None: fewer pods placeable than the Job's
    minAvailable (default: each task's minAvailable, else its replicas), than a task's minAvailable, or
    fewer partitions than a task's minPartitions (the PodGroup's minMember, minTaskMember and
    subGroupPolicy minSubGroups)."""
    for task, pods, partitions in bound:
        name = task.get("name")
        raw = task.get("partitionPolicy")
        policy: dict[str, Any] = raw if isinstance(raw, dict) else {}
        if partitions < int(policy.get("minPartitions") or 0):
            return f"task {name}: {partitions} of minPartitions {policy['minPartitions']} partitions placeable"
        if task.get("minAvailable") is not None and pods < int(task["minAvailable"]):
            return f"task {name}: {pods} of minAvailable {task['minAvailable']} pods placeable"
    spec = job.get("spec") or {}
    minimum = spec.get("minAvailable")
    if minimum is None:
        minimum = sum(int(t["minAvailable"]) if t.get("minAvailable") is not None else int(t.get("replicas") or 0)
                      for t, _, _ in bound)
    placeable = sum(pods for _, pods, _ in bound)
    if placeable < int(minimum):
        return f"{placeable} of the Job's minAvailable {minimum} pods placeable"
    return None


# --- the whole input -----------------------------------------------------------------------------

def is_bound_pod(obj: Any) -> bool:
    return isinstance(obj, dict) and obj.get("kind") == "Pod" and obj.get("apiVersion") == "v1" and \
        bool((obj.get("spec") or {}).get("nodeName")) and \
        (obj.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def is_volcano_job(obj: Any) -> bool:
    return isinstance(obj, dict) and obj.get("kind") == "Job" and obj.get("apiVersion") == VOLCANO_JOB_API_VERSION


def node_states(nodes: Iterable[dict[str, Any]], pods: Iterable[dict[str, Any]] = ()) -> list[NodeState]:
    """Nodes with the bound pods' requests and labels on them, sorted by name."""
    states = {n.name: n for n in (NodeState.of(node) for node in nodes) if n.name}
    for pod in pods:
        state = states.get(pod["spec"]["nodeName"])
        if state is not None:
            shape = PodShape.of_template({"metadata": pod.get("metadata") or {}, "spec": pod.get("spec") or {}},
                                         namespace_of(pod), "")
            state.bind(shape)
    return [states[k] for k in sorted(states)]


def _replicas(obj: dict[str, Any]) -> int:
    value = (obj.get("spec") or {}).get("replicas")
    return value if isinstance(value, int) and value > 0 else 1


def simulate(objects: Iterable[dict[str, Any]], nodes: Iterable[dict[str, Any]],
             config: Config | dict[str, Any] | None = None) -> list[Placement]:
    """Place every Deployment and Volcano Job of ``objects`` on ``nodes``, in order. Bound Pods among
    ``objects`` count as load; HPAs give the effective replica counts. Rule R14: after a workload whose
    placement broke a tie, each later one is also placed on the cluster as the other tie-breaks left it, and its
    Pending count is the range over all (within :data:`BRANCH_BUDGET`). Pure: nothing is changed."""
    config = load_config(config)
    objects = [o for o in objects if isinstance(o, dict)]
    raw_nodes = [n for n in nodes if isinstance(n, dict)]
    facts = ClusterFacts.from_objects(objects)
    states = node_states(raw_nodes, [o for o in objects if is_bound_pod(o)])
    cluster = Cluster(states)
    small = len(states) * sum(_replicas(o) for o in objects if is_deployment(o)) <= BRANCH_BUDGET
    worlds: list[tuple[Cluster, Any]] = []   # after a tie: the same input with ties broken the other ways
    out = []
    for obj in objects:
        try:
            if is_deployment(obj):
                snapshot = [n.copy() for n in cluster.states] if small and not worlds else None
                p = simulate_deployment(obj, config, facts, cluster)
                if worlds:
                    others = [simulate_deployment(obj, config, facts, w, order, search=False).pending
                              for w, order in worlds]
                    p.pending, p.pending_max = min(p.pending, *others), max(p.pending_max, *others)
                elif snapshot is not None and not p.deterministic:
                    for order in TIE_ORDERS[1:]:
                        world = Cluster([n.copy() for n in snapshot])
                        simulate_deployment(obj, config, facts, world, order, search=False)
                        worlds.append((world, order))
                out.append(p)
            elif is_volcano_job(obj):
                out.append(simulate_volcano_job(obj, config, states, raw_nodes))
                cluster = Cluster(states)
                for i, (world, order) in enumerate(worlds):
                    simulate_volcano_job(obj, config, world.states, raw_nodes)
                    worlds[i] = (Cluster(world.states), order)
        except (TypeError, ValueError, AttributeError, KeyError) as e:
            raise PolicyError(object_ref(obj), "spec", f"cannot be simulated: {type(e).__name__}: {e}") from None
    return out
