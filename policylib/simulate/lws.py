"""A LeaderWorkerSet placed group by group (rule E9): each group's leader, then its workers, as the LWS controller
makes them (the leader StatefulSet's pod ``<lws>-<g>``, then the worker StatefulSet of that leader), from group 0 up,
its effective group count of them.

Each pod carries what LWS labels it with (``name``, ``group-index``, ``worker-index``, ``group-key``), so the
packing's ``matchLabelKeys`` on ``group-key`` selects its own group only, as the API server merges it. A pod with no
topology spread constraint of its own is spread by kube-scheduler's system defaults over the pods its StatefulSet
selects: the leaders (``name``, ``worker-index: "0"``) for a leader, its whole group (``name``, ``group-index``,
``group-key``: the leader too) for a worker."""
from __future__ import annotations

import dataclasses
from typing import Any

from ..config import Config
from ..constants import (
    LWS_EXCLUSIVE_TOPOLOGY_ANNOTATION,
    LWS_GROUP_INDEX_LABEL,
    LWS_GROUP_KEY_LABEL,
    LWS_NAME_LABEL,
    LWS_SUBGROUP_EXCLUSIVE_TOPOLOGY_ANNOTATION,
    LWS_WORKER_INDEX_LABEL,
)
from ..facts import ClusterFacts, namespace_of
from ..kubescheduler.model import ZONE_LABEL, PodShape
from ..lws.leaders import leader_view
from ..lws.model import (
    LEADER_TEMPLATE,
    WORKER_TEMPLATE,
    at,
    exclusive_annotations,
    group_size,
    leader_selector,
    name_of,
)
from ..lws.mutate import mutate_leaderworkerset
from ..spread import effective_replicas
from .engine import Cluster
from .placement import DEFAULT_SCHEDULER, NOT_SIMULATED, Placement, node_zones, tie_rank, unmodelled_features, zones

KIND = "LeaderWorkerSet"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def group_labels(template: Any, name: str, group: int, worker: int) -> dict[str, Any]:
    """The labels LWS gives pod ``worker`` (0: the leader) of group ``group``: the template's, and its own."""
    labels = dict(((template or {}).get("metadata") or {}).get("labels") or {})
    labels.update({LWS_NAME_LABEL: name, LWS_GROUP_INDEX_LABEL: str(group), LWS_WORKER_INDEX_LABEL: str(worker),
                   LWS_GROUP_KEY_LABEL: f"sim-{name}-{group}"})
    return labels


def exclusive_terms(spec: dict[str, Any], topology_key: str, group_key: str) -> dict[str, Any]:
    """``spec`` with the terms LWS's pod webhook adds for ``exclusive-topology`` (``SetExclusiveAffinities``): a
    required pod affinity to the pod's own group, and a required anti-affinity to every other group's pods (any
    pod with a ``group-key`` but its own), both on ``topology_key``."""
    affinity = dict(spec.get("affinity") or {})
    own = {"labelSelector": {"matchExpressions": [{"key": LWS_GROUP_KEY_LABEL, "operator": "In", "values": [group_key]}]},
           "topologyKey": topology_key}
    others = {"labelSelector": {"matchExpressions": [{"key": LWS_GROUP_KEY_LABEL, "operator": "Exists"},
                                                     {"key": LWS_GROUP_KEY_LABEL, "operator": "NotIn",
                                                      "values": [group_key]}]}, "topologyKey": topology_key}
    for kind, term in (("podAffinity", own), ("podAntiAffinity", others)):
        block = dict(affinity.get(kind) or {})
        block[REQUIRED] = list(block.get(REQUIRED) or []) + [term]
        affinity[kind] = block
    return dict(spec, affinity=affinity)


def group_pod(template: Any, ns: str, name: str, group: int, worker: int, exclusive: str | None = None) -> PodShape:
    """One pod of a group as the scheduler reads it; its StatefulSet's selector spreads it where it has no constraint
    of its own (the system defaults); with ``exclusive`` (LWS's ``exclusive-topology`` key), the terms LWS's pod
    webhook adds."""
    labels = group_labels(template, name, group, worker)
    spec = dict((template or {}).get("spec") or {})
    if exclusive:
        spec = exclusive_terms(spec, exclusive, labels[LWS_GROUP_KEY_LABEL])
    labelled = dict(template or {}, metadata=dict((template or {}).get("metadata") or {}, labels=labels), spec=spec)
    pod = PodShape.of_template(labelled, ns, "")
    selector = leader_selector(name) if worker == 0 else {"matchLabels": {
        k: pod.labels[k] for k in (LWS_NAME_LABEL, LWS_GROUP_INDEX_LABEL, LWS_GROUP_KEY_LABEL)}}
    return dataclasses.replace(pod, default_selector=selector)


def scheduler_problem(spec: dict[str, Any]) -> str | None:
    scheduler = spec.get("schedulerName") or DEFAULT_SCHEDULER
    if scheduler != DEFAULT_SCHEDULER:
        return f"schedulerName {scheduler!r} is not kube-scheduler's default profile"
    if spec.get("nodeName"):
        return f"spec.nodeName {spec.get('nodeName')!r} binds the pods without the scheduler"
    return None


def simulate_leaderworkerset(obj: dict[str, Any], config: Config, facts: ClusterFacts, cluster: Cluster,
                             order: Any = "name") -> Placement:
    """Rule E9: one LeaderWorkerSet (after its family's policy) placed on ``cluster`` (bound in place), ties broken by
    ``order``: for each of its effective groups (the leaders' count, rule E2) from 0, the leader, then its
    ``size - 1`` workers. ``replicas`` and the Pending counts are pods; the reasons give the leaders per zone and
    the groups whose pods are all in one zone."""
    ns, name = namespace_of(obj), name_of(obj)
    mutated = mutate_leaderworkerset(obj, config, facts=facts, namespace=ns).object
    size = group_size(mutated)
    workers_t = at(mutated, WORKER_TEMPLATE) or {}
    leaders_t = at(mutated, LEADER_TEMPLATE) or workers_t
    groups = effective_replicas(leader_view(mutated, leaders_t), facts, ns).replicas
    count = groups * size
    problem = next((p for t in (leaders_t, workers_t) if (p := scheduler_problem(t.get("spec") or {}))), None)
    exclusive = exclusive_annotations(mutated)
    one_domain = exclusive.get(LWS_EXCLUSIVE_TOPOLOGY_ANNOTATION) or None
    if problem:
        return Placement(KIND, ns, name, count, {}, {}, 0, count, [f"{NOT_SIMULATED}{problem}"],
                         not_modelled=[problem], deterministic=False)
    gated = [str(g.get("name")) for t in (leaders_t, workers_t)
             for g in (t.get("spec") or {}).get("schedulingGates") or [] if isinstance(g, dict)]
    if gated:
        return Placement(KIND, ns, name, count, {}, {}, count, count, [
            f"SchedulingGated: the pods wait for their scheduling gates ({', '.join(dict.fromkeys(gated))}) to be "
            "removed"])
    ranks = tie_rank(len(cluster.states), order)
    placed: dict[str, int] = {}
    leaders: dict[str, int] = {}
    whole, pending, deterministic = 0, 0, True
    reasons: list[str] = []
    for g in range(groups):
        group_nodes: set[str] = set()
        short = False
        for template, worker, n in ((leaders_t, 0, 1), (workers_t, 1, size - 1)):
            if not n:
                continue
            got, missed, failures, tie_free = cluster.place(group_pod(template, ns, name, g, worker, one_domain), n,
                                                            ranks)
            deterministic = deterministic and tie_free
            for node, k in got.items():
                placed[node] = placed.get(node, 0) + k
                group_nodes.add(node)
                if worker == 0:
                    leaders[node] = leaders.get(node, 0) + k
            if missed:
                short = True
                pending += missed
                who = f"{name}-{g}" if worker == 0 else f"{missed} worker(s) of group {g}"
                reasons += [f"{who}: {r}" for r in failures] or [f"{who}: Pending"]
        group_zones = {cluster.states[cluster.index[n]].labels.get(ZONE_LABEL, "") for n in group_nodes}
        whole += len(group_zones) == 1 and not short
    by_name = {k: cluster.states[cluster.index[k]] for k in placed}
    leader_zones = zones(leaders, by_name)
    per_zone = ", ".join(f"{z or '(no zone)'}={n}" for z, n in leader_zones.items())
    reasons.insert(0, f"{groups} group(s) of {size}: leaders per zone {per_zone or '(none placed)'}; "
                      f"{whole} of {groups} group(s) with every pod in one zone")
    notes = list(dict.fromkeys(unmodelled_features(leaders_t.get("spec") or {}, group_pod(leaders_t, ns, name, 0, 0))
                               + unmodelled_features(workers_t.get("spec") or {}, group_pod(workers_t, ns, name, 0, 1))))
    if exclusive.get(LWS_SUBGROUP_EXCLUSIVE_TOPOLOGY_ANNOTATION):
        notes.append(f"{LWS_SUBGROUP_EXCLUSIVE_TOPOLOGY_ANNOTATION} (one subgroup per domain)")
    return Placement(KIND, ns, name, count, dict(sorted(placed.items())), zones(placed, by_name), pending,
                     count if notes else pending, reasons + [f"not modelled: {n}" for n in notes],
                     node_zones(placed, by_name), notes, deterministic and not notes,
                     groups={"count": groups, "size": size, "leaderZones": leader_zones, "inOneZone": whole})
