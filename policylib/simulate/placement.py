"""One workload placed by the engine: a Deployment's replicas pod by pod, the ties the scheduler would break at
random tried other ways, what the pods use and the simulator does not model named (rules R11, R14)."""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from ..config import Config
from ..constants import DO_NOT_SCHEDULE
from ..facts import ClusterFacts, namespace_of
from ..kubescheduler.arrays import np
from ..kubescheduler.model import ZONE_LABEL, NodeState, PodShape
from ..spread import effective_replicas, mutate_deployment
from .engine import Cluster

#: Tie-breaking orders tried to find the range of Pending counts: name order, reversed, two shuffles.
TIE_ORDERS = ("name", "reverse", 1, 2)
DEFAULT_SCHEDULER = "default-scheduler"
#: How a workload's first reason starts when the simulator did not place it (:attr:`Placement.unsimulated`).
NOT_SIMULATED = "not simulated: "


@dataclass(frozen=True)
class GangVerdict:
    """One gang of a workload as the model placed it (rules G14, G26): its name (and which start wave), its
    minimum, the pods placeable at once (where it has a level: the most one domain holds), where they had to fit,
    and whose scheduler judged it (None: the configured gang scheduler's)."""

    name: str
    minimum: int
    placeable: int
    where: str = "Nodes"
    wave: str | None = None
    scheduler: str | None = None
    #: Why the gang can never bind whatever the Nodes hold (a PodGroup whose pods never exist together).
    never: str | None = None

    @property
    def fits(self) -> bool:
        return self.never is None and self.placeable >= self.minimum


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
    gangs: list[GangVerdict] = field(default_factory=list)     # each gang the model judged, for check (G26)
    owner: str = ""     # whose its gang pods are on the Nodes (NodeState.release takes them off again)
    #: A LeaderWorkerSet's groups (rule E9): ``count``, ``size``, ``leaderZones`` (leaders per zone) and ``inOneZone``
    #: (the groups whose pods are all in one zone); None for other kinds.
    groups: dict[str, Any] | None = None

    @property
    def unsimulated(self) -> str | None:
        """Why the workload was not placed at all (another scheduler's pods, an unknown runtime), or None."""
        if not self.placed and self.reasons and self.reasons[0].startswith(NOT_SIMULATED):
            return self.reasons[0].removeprefix(NOT_SIMULATED)
        return None

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
        if self.groups is not None:
            out["groups"] = self.groups
        return out


def tie_rank(n: int, order: Any) -> np.ndarray:
    """Which node wins a tie: name order (the nodes are sorted by name), reversed, or a seeded shuffle."""
    if order == "reverse":
        return np.arange(n)[::-1].copy()
    if isinstance(order, int):
        ranks = list(range(n))
        random.Random(order).shuffle(ranks)
        return np.array(ranks, dtype=np.int64)
    return np.arange(n)


def place_pods(pod: PodShape, count: int, nodes: list[NodeState], order: Any = "name") -> tuple[dict[str, Any], int, list[Any]]:
    """Place ``count`` replicas on ``nodes`` (bound in place); returns (pods per node, Pending, reasons)."""
    placed, pending, reasons, _ = Cluster(nodes).place(pod, count, tie_rank(len(nodes), order))
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


def zones(placed: dict[str, int], nodes: dict[str, NodeState]) -> dict[str, int]:
    zones: dict[str, int] = {}
    for name, n in placed.items():
        zone = nodes[name].labels.get(ZONE_LABEL, "")
        zones[zone] = zones.get(zone, 0) + n
    return dict(sorted(zones.items()))


def node_zones(placed: dict[str, int], nodes: dict[str, NodeState]) -> dict[str, str]:
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
        return Placement("Deployment", ns, name, count, {}, {}, 0, count, [f"{NOT_SIMULATED}{why}"],
                         not_modelled=[why], deterministic=False)
    if spec.get("schedulingGates"):
        gates = ", ".join(str(g.get("name")) for g in spec["schedulingGates"] if isinstance(g, dict))
        return Placement("Deployment", ns, name, count, {}, {}, count, count,
                         [f"SchedulingGated: the pods wait for their scheduling gates ({gates}) to be removed"])
    searched = search and count > 1 and not order_independent(pod, cluster)
    before = [n.copy() for n in cluster.states] if searched else None
    placed, pending, reasons, deterministic = cluster.place(pod, count, tie_rank(len(cluster.states), order))
    pendings = [pending]
    if before is not None and not deterministic:
        for order in TIE_ORDERS[1:]:
            trial = Cluster([n.copy() for n in before])
            pendings.append(trial.place(pod, count, tie_rank(len(before), order))[1])
    notes = unmodelled_features(spec, pod)
    high = count if notes else max(pendings)
    by_name = {k: cluster.states[cluster.index[k]] for k in placed}
    return Placement("Deployment", ns, name, count, dict(sorted(placed.items())), zones(placed, by_name),
                     min(pendings), high, reasons + [f"not modelled: {n}" for n in notes],
                     node_zones(placed, by_name), notes, deterministic and not notes)
