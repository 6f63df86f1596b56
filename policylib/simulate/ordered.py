"""A StatefulSet placed ordinal by ordinal, each pod whose claims are bound to PersistentVolumes only where those
volumes let it run (rule A8: kube-scheduler's VolumeBinding and VolumeZone filters)."""
from __future__ import annotations

import copy
from typing import Any

from ..config import Config
from ..facts import ClusterFacts, namespace_of
from ..kubescheduler.model import PodShape
from ..spread import effective_replicas
from ..statefulset import bound_volumes, mutate_statefulset, pv_nodes
from .engine import Cluster
from .placement import DEFAULT_SCHEDULER, NOT_SIMULATED, Placement, node_zones, tie_rank, zones

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def pinned_template(template: dict[str, Any], allowed: list[str]) -> dict[str, Any]:
    """Rule A8: the pod template of one ordinal as the scheduler's filters see it once its claims are bound: its
    required node affinity ANDed with "one of the Nodes ``allowed``" (each term gains a ``metadata.name`` field
    requirement; with no term, one term of it alone)."""
    out = copy.deepcopy(template)
    spec = out.setdefault("spec", {})
    node_affinity = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    required = node_affinity.setdefault(REQUIRED, {})
    field = {"key": "metadata.name", "operator": "In", "values": sorted(allowed)}
    terms = [t for t in required.get("nodeSelectorTerms") or [] if isinstance(t, dict)]
    required["nodeSelectorTerms"] = [dict(t, matchFields=list(t.get("matchFields") or []) + [field]) for t in terms] \
        or [{"matchFields": [field]}]
    return out


def _runs(ordinals: range, volumes: dict[int, Any]) -> list[tuple[int, int]]:
    """The ordinals in order as (first, how many): each pinned ordinal alone, unpinned ones in runs (one shape,
    placed as one batch: the same as one by one)."""
    out: list[tuple[int, int]] = []
    for ordinal in ordinals:
        if ordinal not in volumes and out and out[-1][0] not in volumes and out[-1][0] + out[-1][1] == ordinal:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((ordinal, 1))
    return out


def simulate_statefulset(obj: dict[str, Any], config: Config, facts: ClusterFacts, cluster: Cluster,
                         objects: list[dict[str, Any]], order: Any = "name") -> Placement:
    """Rule A8: one StatefulSet (after its family's policy) placed on ``cluster`` (bound in place) one ordinal at a
    time from the lowest, its effective replica count of them (rule A2): an ordinal whose claims (among
    ``objects``) are bound to PersistentVolumes (among ``objects``) only on the Nodes all of them allow; an
    unbound claim restricts nothing (a WaitForFirstConsumer volume is provisioned where its pod goes)."""
    ns = namespace_of(obj)
    name = str((obj.get("metadata") or {}).get("name", ""))
    mutated = mutate_statefulset(obj, config, facts=facts, namespace=ns).object
    count = effective_replicas(mutated, facts, ns).replicas
    template = (mutated.get("spec") or {}).get("template") or {}
    spec = template.get("spec") or {}
    scheduler = spec.get("schedulerName") or DEFAULT_SCHEDULER
    if scheduler != DEFAULT_SCHEDULER or spec.get("nodeName"):
        why = (f"schedulerName {scheduler!r} is not kube-scheduler's default profile" if scheduler != DEFAULT_SCHEDULER
               else f"spec.nodeName {spec.get('nodeName')!r} binds the pods without the scheduler")
        return Placement("StatefulSet", ns, name, count, {}, {}, 0, count, [f"{NOT_SIMULATED}{why}"],
                         not_modelled=[why], deterministic=False)
    selector = (mutated.get("spec") or {}).get("selector")
    selector = selector if isinstance(selector, dict) else None
    revision = f"sim-{name}"
    free = PodShape.of_template(template, ns, revision, selector)
    start = ((mutated.get("spec") or {}).get("ordinals") or {}).get("start") or 0
    volumes = bound_volumes(mutated, objects)
    placed: dict[str, int] = {}
    reasons: list[str] = []
    pending, deterministic = 0, True
    ranks = tie_rank(len(cluster.states), order)
    for first, run in _runs(range(start, start + count), volumes):
        pod, allowed = free, None
        if first in volumes:
            allowed = set(pv_nodes(volumes[first][0], cluster.states))
            for pv in volumes[first][1:]:
                allowed &= set(pv_nodes(pv, cluster.states))
            pod = PodShape.of_template(pinned_template(template, sorted(allowed)), ns, revision, selector)
        got, missed, failures, tie_free = cluster.place(pod, run, ranks)
        deterministic = deterministic and tie_free
        for node, n in got.items():
            placed[node] = placed.get(node, 0) + n
        if missed:
            pending += missed
            pin = "" if allowed is None else \
                f" (its bound volumes allow only {', '.join(sorted(allowed)) or 'no Node'})"
            who = f"{name}-{first}" if run == 1 else f"{missed} of {name}-{first}..{name}-{first + run - 1}"
            reasons += [f"{who}{pin}: {r}" for r in failures] or [f"{who}{pin}: Pending"]
    pinned = sum(1 for o in range(start, start + count) if o in volumes)
    if pinned:
        reasons.append(f"{pinned} of {count} ordinal(s) kept to the Nodes their bound PersistentVolumes allow "
                       "(VolumeBinding, VolumeZone)")
    by_name = {k: cluster.states[cluster.index[k]] for k in placed}
    return Placement("StatefulSet", ns, name, count, dict(sorted(placed.items())), zones(placed, by_name), pending,
                     pending, reasons, node_zones(placed, by_name), [], deterministic)
