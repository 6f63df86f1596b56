"""Gangs through the engine: a Volcano Job (partitions inside HyperNodes, rule V21) and a Kubeflow job (its
replica types together, rule R15) bind all their minimum or nothing, beside the other workloads of the input."""
from __future__ import annotations

from typing import Any

from ..config import Config
from ..facts import namespace_of
from ..gang import KubeflowJob, job_minimum, read_job
from ..hypernodes import discover_hypernodes, leaf_nodes
from .engine import Cluster
from .model import NodeState, PodShape
from .placement import Placement, node_zones, place_pods, zones
from .plugins import node_failure


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
        commit(nodes, trial)
    return Placement("Job", ns, (obj.get("metadata") or {}).get("name", ""), replicas,
                     dict(sorted(placed.items())), zones(placed, by_name), pending, pending, reasons,
                     node_zones(placed, by_name))


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


def commit(nodes: list[NodeState], trial: list[NodeState]) -> None:
    """What a gang bound on copies of ``nodes`` (``trial``, in the same order), bound on ``nodes`` themselves."""
    for node, state in zip(nodes, trial, strict=True):
        node.requested, node.pods, node.bound = state.requested, state.pods, state.bound
        node.nonzero, node.pod_list = state.nonzero, state.pod_list


# --- Kubeflow jobs: every replica type together ----------------------------------------------------------

def place_gang(job: KubeflowJob, specs: dict[str, Any], cluster: Cluster,
               limit: int | None = None) -> tuple[dict[str, int], int, list[str]]:
    """Rules G14, R15: the job's pods placed by the engine on ``cluster`` (bound there), every replica type in the
    job's order sharing the Nodes (Coscheduling holds each member it has placed until the gang's minimum is
    placed, so a PS and its Workers cannot count the same free CPU); at most ``limit`` pods in all. Returns (pods
    per node, pods placed, the scheduler's reasons for those that were not, per replica type)."""
    placed: dict[str, int] = {}
    count, reasons = 0, []
    for t in job.types:
        want = t.replicas if limit is None else min(t.replicas, limit - count)
        if want <= 0:
            continue
        pod = PodShape.of_template((specs.get(t.key) or {}).get("template") or {}, job.namespace, "")
        got, left, why, _ = cluster.place(pod, want)
        for k, v in got.items():
            placed[k] = placed.get(k, 0) + v
        count += want - left
        reasons += [f"{t.key}: {w}" for w in why]
    return placed, count, reasons


def simulate_kubeflow_job(obj: dict[str, Any], config: Config, nodes: list[NodeState]) -> Placement:
    """Rule R15: a TFJob, PyTorchJob or MPIJob (after policylib's mutation) placed as one gang beside the other
    workloads: unless its minimum (rule G2) is placed at once, nothing binds and every pod stays Pending, with the
    reason; else what was placed binds on ``nodes``."""
    from ..mutate import mutate
    ns = namespace_of(obj)
    mutated = mutate(obj, config, namespace=ns).object
    job = read_job(mutated, ns)
    specs = (mutated.get("spec") or {}).get(job.specs_key) or {}
    trial = [n.copy() for n in nodes]
    placed, count, reasons = place_gang(job, specs, Cluster(trial))
    minimum = job_minimum(job)
    if count < minimum:
        reasons.append(f"gang: {count} of its minimum {minimum} pods placeable at once: the gang binds nothing, "
                       f"all {job.total} pods stay Pending")
        placed, count = {}, 0
    else:
        commit(nodes, trial)
    by_name = {n.name: n for n in trial}
    pending = job.total - count
    return Placement(job.kind, ns, job.name, job.total, dict(sorted(placed.items())), zones(placed, by_name),
                     pending, pending, reasons, node_zones(placed, by_name))


# --- Volcano partitions: what one node holds ------------------------------------------------------------

def pods_per_node(template: dict[str, Any], node: dict[str, Any]) -> int | None:
    """Rule V18: how many of a task's pods a Node holds alone: none where the registry's eligibility filters
    refuse the pod (a cordoned node it does not tolerate, an untolerated taint, node affinity); else its
    allocatable over what the pod requests (rule R1), None when either is unknown (counted as one pod)."""
    pod = PodShape.of_template(template, "", "")
    state = NodeState.of(node)
    if node_failure(pod, state) is not None:
        return 0
    wanted = {k: v for k, v in pod.requests.items() if v > 0}
    if not wanted or not (node.get("status") or {}).get("allocatable"):
        return None
    return min(state.allocatable.get(k, 0) // v for k, v in wanted.items())
