"""What ``check --cluster``, ``plan --cluster`` (rules S25, S28) and ``simulate --scale`` (rule S26) print
of the scale-down rules."""
from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Iterable, Mapping, Sequence

from ..errors import INT32_MAX, InputError
from ..lws.model import is_leaderworkerset
from ..result import is_opted_out
from ..spread import RECORD_REPLICAS, is_deployment
from ..statefulset import is_statefulset
from .groups import GroupScaleIn, scale_in_groups
from .ordinals import OrdinalScaleIn, scale_in
from .pods import DELETION_COST, cost_owner, deployment_pods, foreign_cost, metadata_of
from .scale import ScaleDown, scale_down
from .skew import SpreadNodes, Violation, skew_of, spread_violations


def is_managed(deployment: Mapping[str, Any]) -> bool:
    """A Deployment or StatefulSet whose spread policylib wrote: it carries S15's record, and is not opted out (rule
    P1)."""
    return (is_deployment(deployment) or is_statefulset(deployment)) and not is_opted_out(dict(deployment)) and \
        RECORD_REPLICAS in (metadata_of(deployment).get("annotations") or {})


def cluster_report(objects: Iterable[Mapping[str, Any]], nodes: Sequence[Mapping[str, Any]]) \
        -> tuple[list[Violation], list[str]]:
    """Rules S25, S28: the spread violations of the managed Deployments and StatefulSets among ``objects`` (their
    Pods among them too), and a note per managed Deployment whose pods carry a deletion cost another field
    manager owns (policylib leaves those alone)."""
    objects = list(objects)
    pods = [o for o in objects if isinstance(o, dict) and o.get("kind") == "Pod"]
    managed = [d for d in objects if is_managed(d)]
    candidates = _by_first_label(managed, pods)
    violations: list[Violation] = []
    notes: list[str] = []
    on: SpreadNodes | None = None      # the Nodes read once, for the first managed Deployment
    for d in managed:
        pair = _first_label(d)
        mine = deployment_pods(d, pods if pair is None else candidates[pair])
        on = on or SpreadNodes(nodes)
        violations += spread_violations(d, mine, on)
        foreign = sorted({cost_owner(p) or "(unknown)" for p in mine if foreign_cost(p)})
        if foreign:
            count = sum(1 for p in mine if foreign_cost(p))
            meta = metadata_of(d)
            notes.append(f"deployment {meta.get('namespace') or 'default'}/{meta.get('name')}: {count} pod(s) carry a "
                         f"{DELETION_COST} set by {', '.join(foreign)}; policylib leaves their cost alone, so a "
                         "scale-down may not keep the zone spread")
    return violations, notes


def _first_label(deployment: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(namespace, key, value) of the first ``matchLabels`` pair of the Deployment's selector: every pod the
    selector matches carries it. None without one."""
    selector = (deployment.get("spec") or {}).get("selector")
    labels = selector.get("matchLabels") if isinstance(selector, dict) else None
    first = next(iter(labels.items()), None) if isinstance(labels, dict) else None
    if first is None or not isinstance(first[1], str):
        return None
    return str(metadata_of(deployment).get("namespace") or "default"), str(first[0]), first[1]


def _by_first_label(deployments: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]) \
        -> dict[tuple[str, str, str], list[Mapping[str, Any]]]:
    """The pods that carry each Deployment's :func:`_first_label`, in their order: what its selector is asked of,
    instead of every pod of the input for every Deployment."""
    out: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    for d in deployments:
        pair = _first_label(d)
        if pair is not None:
            out[pair] = []
    for p in pods:
        ns = str(metadata_of(p).get("namespace") or "default")
        for k, v in (metadata_of(p).get("labels") or {}).items():
            found = out.get((ns, k, v)) if isinstance(v, str) else None
            if found is not None:
                found.append(p)
    return out


def scale_table(results: Sequence[ScaleDown | OrdinalScaleIn | GroupScaleIn]) -> str:
    """``simulate --scale``'s table: per Deployment, the pods removed and the zones left, without and with
    the costs; per StatefulSet, the pods removed (the highest ordinals) and the zones left; for either, that the
    input holds none of its pods when it does not."""
    lines = []
    for r in results:
        if isinstance(r, OrdinalScaleIn):
            lines += _ordinal_lines(r)
            continue
        if isinstance(r, GroupScaleIn):
            lines += _group_lines(r)
            continue
        if not sum(r.before.values()):
            lines.append(f"deployment {r.namespace}/{r.name}: no bound pod of it in the input, so no scale-down to "
                         f"{r.replicas} to replay (give its pods: kubectl get pods -o yaml, or --cluster)")
            continue
        lines.append(f"deployment {r.namespace}/{r.name}: {sum(r.before.values())} -> {r.replicas} replicas; "
                     f"pods per zone now {_zones(r.before)}")
        for label, removed, after in (("without the costs", r.removed_without, r.after_without),
                                      ("with the costs", r.removed_with, r.after_with)):
            lines.append(f"  {label}: removes {', '.join(removed) or 'nothing'}; leaves {_zones(after)} "
                         f"(zone skew {skew_of(after)})")
    return "\n".join(lines) + "\n"


def _ordinal_lines(r: OrdinalScaleIn) -> list[str]:
    head = f"statefulset {r.namespace}/{r.name}: "
    if not r.found:
        return [head + f"no bound pod of it in the input, so no scale-in to {r.replicas} to replay (give its pods: "
                "kubectl get pods -o yaml, or --cluster)"]
    return [head + f"{r.found} -> {r.replicas} replicas; pods per zone now {_zones(r.before)}",
            f"  removes {', '.join(r.removed) or 'nothing'} (the highest ordinals: the StatefulSet controller reads "
            f"no deletion cost); leaves {_zones(r.after)} (zone skew {skew_of(r.after)})"]


def _group_lines(r: GroupScaleIn) -> list[str]:
    head = f"leaderworkerset {r.namespace}/{r.name}: "
    if not r.found:
        return [head + f"no bound pod of it in the input, so no scale-in to {r.groups} groups to replay (give its "
                "pods: kubectl get pods -o yaml, or --cluster)"]
    groups = sum(r.leaders_before.values())
    return [head + f"{groups} -> {r.groups} groups; leaders per zone now {_zones(r.leaders_before)}",
            f"  removes group(s) {', '.join(map(str, r.removed_groups)) or 'none'} ({len(r.removed)} pods: the "
            "highest group indices, each leader with its workers; the leader StatefulSet reads no deletion cost); "
            f"leaves leaders {_zones(r.leaders_after)} (zone skew {skew_of(r.leaders_after)}), pods "
            f"{_zones(r.pods_after)}"]


def _zones(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{z or '(no zone)'}={n}" for z, n in counts.items())


def scale_report(specs: Sequence[str], objects: Sequence[Mapping[str, Any]], nodes: Sequence[Mapping[str, Any]],
                 zone_key: str, output: str = "table", now: datetime | None = None) -> str:
    """``simulate --scale NAME=N`` (rule S26): each named Deployment, StatefulSet or LeaderWorkerSet (N groups) among
    ``objects`` scaled to N over its bound pods among them; an unknown name or a count that is not a non-negative
    int32 is an InputError."""
    workloads = [d for d in objects if is_deployment(d) or is_statefulset(d) or is_leaderworkerset(d)]
    zone_of = {str(metadata_of(n).get("name") or ""): str((metadata_of(n).get("labels") or {}).get(zone_key, ""))
               for n in nodes}
    results: list[ScaleDown | OrdinalScaleIn | GroupScaleIn] = []
    for spec in specs:
        workload, replicas = _scale_target(spec, workloads)
        if is_leaderworkerset(workload):   # its groups: the leader StatefulSet's highest ordinals, workers with them
            results.append(scale_in_groups(workload, objects, zone_of, replicas))
        else:
            results.append(scale_in(workload, objects, zone_of, replicas) if is_statefulset(workload)
                           else scale_down(workload, objects, nodes, replicas, zone_key, now))
    if output == "json":
        return json.dumps([r.as_dict() for r in results], indent=2) + "\n"
    return scale_table(results)


def _scale_target(spec: str, deployments: Sequence[Mapping[str, Any]]) -> tuple[Mapping[str, Any], int]:
    """The Deployment or StatefulSet and replica count ``--scale NAME=N`` (or ``NAMESPACE/NAME=N``) names among
    ``deployments`` (both kinds); an InputError naming the flag's value when N is not 0 to int32 max or the name
    matches no workload, or more than one."""
    name, sep, count = spec.partition("=")
    if not sep or not count.isdigit() or int(count) > INT32_MAX:
        raise InputError(f"--scale {spec}: expected NAME=N or NAMESPACE/NAME=N with N a replica count (0 to "
                         f"{INT32_MAX})")
    ns, _, short = name.rpartition("/")
    found = [d for d in deployments if metadata_of(d).get("name") == short
             and (not ns or (metadata_of(d).get("namespace") or "default") == ns)]
    if len(found) != 1:
        known = ", ".join(sorted(f"{metadata_of(d).get('namespace') or 'default'}/{metadata_of(d).get('name')}"
                                 for d in deployments)) or "none"
        what = "no Deployment, StatefulSet or LeaderWorkerSet" if not found else \
            "more than one Deployment, StatefulSet or LeaderWorkerSet (give NAMESPACE/NAME)"
        raise InputError(f"--scale {spec}: {what} named {name} in the input; Deployments, StatefulSets and "
                         f"LeaderWorkerSets: {known}")
    return found[0], int(count)
