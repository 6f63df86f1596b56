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
(anti-)affinity. Volcano Jobs: each partition must fit inside one HyperNode of at most the allowed tier (the
HyperNode objects among ``objects``, and those discovered from the Nodes' labels, as ``policylib hypernodes``
builds them; rule V26).
"""
from __future__ import annotations

from typing import Any, Iterable

from ..config import Config, load_config
from ..constants import DO_NOT_SCHEDULE, SCHEDULE_ANYWAY
from ..errors import PolicyError, object_ref
from ..facts import ClusterFacts
from ..kubescheduler.model import ZONE_LABEL, NodeState, PodShape, node_selector_term_matches, tolerates
from ..kubescheduler.plugins.node_affinity import MSG_AFFINITY
from ..kubescheduler.plugins.node_resources import MSG_TOO_MANY_PODS
from ..kubescheduler.plugins.node_unschedulable import MSG_UNSCHEDULABLE
from ..kubescheduler.plugins.pod_topology_spread import MSG_SPREAD, MSG_SPREAD_LABEL
from ..kubescheduler.resources import DEFAULT_CPU_MILLI, DEFAULT_MEMORY, fits, pod_requests
from ..kubescheduler.snapshot import node_states
from ..lws.model import is_leaderworkerset
from ..spread import is_deployment
from ..statefulset import is_statefulset
from ..workload_api import WorkloadApi
from .engine import Cluster
from .gangs import gang_model, gang_owner, owner_of
from .lws import simulate_leaderworkerset
from .ordered import simulate_statefulset
from .placement import TIE_ORDERS, GangVerdict, Placement, order_independent, place_pods, simulate_deployment
from .topology import COSCHEDULING, KUBE_SCHEDULER, VOLCANO

__all__ = ["DO_NOT_SCHEDULE", "SCHEDULE_ANYWAY", "MSG_AFFINITY", "MSG_SPREAD", "MSG_SPREAD_LABEL",
           "MSG_TOO_MANY_PODS", "MSG_UNSCHEDULABLE", "DEFAULT_CPU_MILLI", "DEFAULT_MEMORY", "COSCHEDULING",
           "KUBE_SCHEDULER", "VOLCANO", "Cluster", "GangVerdict", "NodeState", "Placement", "PodShape", "ZONE_LABEL",
           "fits", "gang_model", "gang_owner", "is_bound_pod", "node_selector_term_matches",
           "order_independent", "owner_of", "place_pods", "pod_requests", "simulate", "simulate_with_load",
           "tolerates"]

#: Rule R14: once a tie has been broken, later workloads are also placed with the earlier ties broken the other
#: ways (their Pending count a range over all), while Nodes x replicas stays within this budget.
BRANCH_BUDGET = 200_000


def is_bound_pod(obj: Any) -> bool:
    return isinstance(obj, dict) and obj.get("kind") == "Pod" and obj.get("apiVersion") == "v1" and \
        bool((obj.get("spec") or {}).get("nodeName")) and \
        (obj.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def _replicas(obj: dict[str, Any]) -> int:
    value = (obj.get("spec") or {}).get("replicas")
    return value if isinstance(value, int) and value > 0 else 1


def simulate(objects: Iterable[dict[str, Any]], nodes: Iterable[dict[str, Any]],
             config: Config | dict[str, Any] | None = None, *, workload_api: WorkloadApi | None = None) -> list[Placement]:
    """Place every Deployment, StatefulSet (rule A8), LeaderWorkerSet (rule E9), Volcano Job and Kubeflow job of
    ``objects`` on ``nodes``, in
    order (the jobs as gangs: all their minimum or nothing; a native gang with ``gang.topology`` in one domain,
    rule G25). Bound Pods among ``objects`` count as load; HPAs give the effective replica counts;
    ``workload_api`` is what the cluster serves of Kubernetes' Workload API (``--kube-version``, ``--cluster``;
    rule G22). Rule R14: after a workload whose placement broke a tie, each later one is also placed on the
    cluster as the other tie-breaks left it, and its Pending count is the range over all (within
    :data:`BRANCH_BUDGET`). Pure: nothing is changed."""
    return _run(objects, nodes, config, workload_api)[0]


def simulate_with_load(objects: Iterable[dict[str, Any]], nodes: Iterable[dict[str, Any]],
                       config: Config | dict[str, Any] | None = None, *,
                       workload_api: WorkloadApi | None = None) -> tuple[list[Placement], list[NodeState]]:
    """:func:`simulate`'s placements, and the Nodes as that one run leaves them (ties broken in name order): what
    every workload of ``objects`` and the bound Pods take, each gang's pods owned by it (``gang_owner``), for the
    questions ``check`` asks beside them (a gang's capacity, rule G14)."""
    return _run(objects, nodes, config, workload_api)


def _run(objects: Iterable[dict[str, Any]], nodes: Iterable[dict[str, Any]], config: Config | dict[str, Any] | None,
         workload_api: WorkloadApi | None = None) -> tuple[list[Placement], list[NodeState]]:
    config = load_config(config)
    objects = [o for o in objects if isinstance(o, dict)]
    raw_nodes = [n for n in nodes if isinstance(n, dict)]
    facts = ClusterFacts.from_objects(objects)
    facts.workload_api = workload_api
    states = node_states(raw_nodes, [o for o in objects if is_bound_pod(o)])
    cluster = Cluster(states)
    small = len(states) * sum(_replicas(o) for o in objects if is_deployment(o)) <= BRANCH_BUDGET
    worlds: list[tuple[Cluster, Any]] = []   # after a tie: the same input with ties broken the other ways
    out = []
    for obj in objects:
        model = gang_model(obj)
        try:
            if is_deployment(obj):
                out.append(_deployment_in_every_world(obj, config, facts, cluster, worlds, small))
            elif is_statefulset(obj):   # rule A8: ordinal by ordinal, each bound volume's Nodes only
                p = simulate_statefulset(obj, config, facts, cluster, objects)
                for world, order in worlds:
                    other = simulate_statefulset(obj, config, facts, world, objects, order)
                    p.pending, p.pending_max = min(p.pending, other.pending), max(p.pending_max, other.pending_max)
                out.append(p)
            elif is_leaderworkerset(obj):   # rule E9: group by group, the leader then its workers
                p = simulate_leaderworkerset(obj, config, facts, cluster)
                for world, order in worlds:
                    other = simulate_leaderworkerset(obj, config, facts, world, order)
                    p.pending, p.pending_max = min(p.pending, other.pending), max(p.pending_max, other.pending_max)
                out.append(p)
            elif model is not None:
                out.append(model(obj, config, states, raw_nodes, facts))   # a gang's Pending is the main world's
                cluster = Cluster(states)
                for i, (world, order) in enumerate(worlds):    # the others carry on from it
                    model(obj, config, world.states, raw_nodes, facts)
                    worlds[i] = (Cluster(world.states), order)
        except (TypeError, ValueError, AttributeError, KeyError) as e:
            raise PolicyError(object_ref(obj), "spec", f"cannot be simulated: {type(e).__name__}: {e}") from None
    return out, states


def _deployment_in_every_world(obj: dict[str, Any], config: Config, facts: ClusterFacts, cluster: Cluster,
                               worlds: list[tuple[Cluster, Any]], small: bool) -> Placement:
    """Rule R14: one Deployment placed on ``cluster`` and on every world an earlier tie left (its Pending the
    range over all); the first tie it breaks itself, while the input is ``small``, starts those worlds."""
    snapshot = [n.copy() for n in cluster.states] if small and not worlds else None
    p = simulate_deployment(obj, config, facts, cluster)
    if worlds:
        others = [simulate_deployment(obj, config, facts, w, order, search=False).pending for w, order in worlds]
        p.pending, p.pending_max = min(p.pending, *others), max(p.pending_max, *others)
    elif snapshot is not None and not p.deterministic:
        for order in TIE_ORDERS[1:]:
            world = Cluster([n.copy() for n in snapshot])
            simulate_deployment(obj, config, facts, world, order, search=False)
            worlds.append((world, order))
    return p
