"""Gangs through the engine: a Volcano Job (partitions inside HyperNodes, rule V21) and a Kubeflow job (its
replica types together, rule R15) bind all their minimum or nothing, beside the other workloads of the input."""
from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any, Callable

from ..config import Config
from ..constants import (
    JOBSET_API_VERSION,
    VOLCANO_PODGROUP_API_VERSION,
    VOLCANO_SCHEDULING_GROUP,
    X_K8S_PODGROUP_API_VERSION,
)
from ..facts import ClusterFacts, namespace_of
from ..gang import Gang, GangPlan, KubeflowJob, is_kubeflow_job, job_minimum, read_job
from ..gang.keys import SCHEDULING_GROUP_LABEL
from ..gang.workload import native_gang
from ..hypernodes import PartitionBound, partition_bound, scheduler_hypernodes
from ..jobset import is_jobset, plan_jobset_gangs, read_jobset
from ..jobset.keys import EXCLUSIVE_TOPOLOGY
from ..jobset.read import JobSet, ReplicatedJob
from ..kubescheduler.model import NodeState, PodShape
from ..mutate import mutate
from ..trainer import is_trainjob, read_trainjob, runtime_jobset
from ..trainer.keys import ANCESTOR_LABEL, TRAINER_STEP
from ..trainer.patch import entry_pod_metadata
from ..trainer.runtime import pod_group_policy
from ..volcano import is_volcano_job
from ..volcano_api.partitions import unenforced_partition_tier_name
from .engine import Cluster
from .placement import NOT_SIMULATED, GangVerdict, Placement, node_zones, place_pods, zones
from .topology import COSCHEDULING, VOLCANO, GangLevel, gang_level, gang_objects, label_domains

#: Volcano's gang plugin on a PodGroup that cannot bind (v1.14.1 plugins/gang/gang.go ``OnSessionClose``): the
#: condition's reason, and its message's words; the message's count (the minimum less what the last HyperNode it
#: tried could hold) depends on Volcano's order of trial, which the simulation does not claim.
UNSCHEDULABLE_WORDS = "reason NotEnoughResources, \"tasks in gang unschedulable\""


def simulate_volcano_job(obj: dict[str, Any], config: Config, nodes: list[NodeState],
                         raw_nodes: list[dict[str, Any]], facts: ClusterFacts | None = None) -> Placement:
    """Each partition inside one of the HyperNodes its network topology allows (rule V26: the input's HyperNode
    objects in ``facts`` and label discovery's, as ``preview`` reads them); other tasks pod by pod. The Job is
    a gang: unless its minimum binds (:func:`gang_shortfall`), nothing binds and every pod stays Pending. A hard
    job-level ``spec.networkTopology`` (which Volcano's controller copies to the Job's PodGroup) holds the whole
    Job inside one HyperNode of tier <= the allowed tier, the lowest tier first (rule R18)."""
    ns = namespace_of(obj)
    name = (obj.get("metadata") or {}).get("name", "")
    facts = facts if facts is not None else ClusterFacts()
    mutated = mutate(obj, config, namespace=ns, facts=facts).object
    hypernodes, unknown = scheduler_hypernodes(config.volcano.networkTopologyDiscovery, raw_nodes, facts.hypernodes)
    owner = f"Job {ns}/{name}"
    podgroup = {"apiVersion": VOLCANO_PODGROUP_API_VERSION, "kind": "PodGroup",
                "spec": {"networkTopology": (mutated.get("spec") or {}).get("networkTopology")}}
    level = gang_level(podgroup, nodes, raw_nodes, hypernodes) if not unknown else None
    tried: list[tuple[str, int]] = []
    for domain, tier, members in (level.domains if level is not None else ()) or (("", 0, ()),):
        trial = [n.copy() for n in nodes]
        placed, pending, reasons, replicas, bound = _place_tasks(mutated, ns, config, trial, set(members) if level
                                                                 else None, hypernodes, unknown, raw_nodes, owner)
        minimum, placeable = volcano_minimum(mutated, bound), sum(pods for _, pods, _ in bound)
        shortfall = gang_shortfall(mutated, bound)
        if shortfall is None:
            if level is not None:
                reasons.insert(0, f"{level.words}: placed in HyperNode {domain} (tier {tier})")
            break
        tried.append((domain, placeable))
    by_name = {n.name: n for n in trial}
    # rule G26: the Job's minimum against the Nodes (or one HyperNode); a task's or a partition's shortfall is
    # named by simulate's own finding, in the partition's words (rules V21, V26)
    verdicts = [] if level is None and task_shortfall(bound) else [GangVerdict(
        name, minimum, min(max(p for _, p in tried) if tried else placeable, minimum), where_of(level),
        scheduler=VOLCANO)]
    if shortfall:
        placed, pending = {}, replicas
        if level is not None:
            counts = ", ".join(f"{d} {p}" for d, p in tried if d) or "no HyperNode"
            reasons = [f"{level.words}: no HyperNode of tier <= {level.tier} holds the Job's minimum {minimum} pods "
                       f"at once (pods placeable per HyperNode: {counts}): Volcano's PodGroup stays Unschedulable "
                       f"({UNSCHEDULABLE_WORDS})"]
        else:
            reasons.append(f"{shortfall}: the gang binds nothing, all {replicas} pods stay Pending")
    else:
        commit(nodes, trial)
    return Placement("Job", ns, name, replicas, dict(sorted(placed.items())), zones(placed, by_name), pending,
                     pending, reasons, node_zones(placed, by_name), gangs=verdicts, owner=owner)


def _place_tasks(mutated: dict[str, Any], ns: str, config: Config, trial: list[NodeState], members: set[str] | None,
                 hypernodes: list[dict[str, Any]], unknown: str | None, raw_nodes: list[dict[str, Any]],
                 owner: str) -> tuple[dict[str, int], int, list[str], int, list[tuple[dict[str, Any], int, int]]]:
    """A Volcano Job's tasks placed on ``trial`` (bound there), on the Nodes named in ``members`` alone where
    given (the HyperNode of a job-level network topology): each partition inside a HyperNode its own network
    topology allows (rule V26), other tasks pod by pod. Returns (pods per node, Pending, reasons, pods in all,
    per task (task, pods placed, partitions placed))."""
    by_name = {n.name: n for n in trial if members is None or n.name in members}
    inside = list(by_name.values())
    placed: dict[str, int] = {}
    pending, reasons, replicas = 0, [], 0
    bound: list[tuple[dict[str, Any], int, int]] = []   # per task: (task, pods placed, partitions placed)
    for task in (mutated.get("spec") or {}).get("tasks") or []:
        count = int(task.get("replicas") or 0)
        replicas += count
        pod = PodShape.of_template(task.get("template") or {}, ns, f"sim-{task.get('name')}", owner=owner)
        policy = task.get("partitionPolicy")
        unbounded = unenforced_partition_tier_name(policy, config.volcano.version)
        limits = partition_bound(policy, hypernodes, raw_nodes) if isinstance(policy, dict) else None
        if limits is None or unbounded or unknown or not limits.bounded:
            got, left, why = place_pods(pod, count, inside)
            for k, v in got.items():
                placed[k] = placed.get(k, 0) + v
            pending += left
            reasons += [f"task {task.get('name')}: {w}" for w in why]
            if unbounded:
                reasons.append(f"task {task.get('name')}: Volcano {config.volcano.version} ignores the partitions' "
                               f"highestTierName {unbounded!r}: placed without a HyperNode bound")
            elif limits is not None:
                reasons.append(f"task {task.get('name')}: placed without a HyperNode bound: "
                               f"{unknown or limits.why}")
            size = int(policy.get("partitionSize") or 1) if limits is not None else 1
            bound.append((task, count - left, (count - left) // size if limits is not None else 0))
            continue
        size, total = int(policy.get("partitionSize") or 1), int(policy.get("totalPartitions") or 0)
        partitions, why = place_partitions(pod, size, total, limits, by_name, placed)
        pending += (total - partitions) * size
        reasons += [f"task {task.get('name')}: {w}" for w in why]
        bound.append((task, partitions * size, partitions))
    return placed, pending, reasons, replicas, bound


def volcano_minimum(job: dict[str, Any], bound: list[tuple[dict[str, Any], int, int]]) -> int:
    """Rule V21: a Volcano Job's gang minimum: its minAvailable, else each task's minAvailable (else its
    replicas), summed."""
    minimum = (job.get("spec") or {}).get("minAvailable")
    if minimum is None:
        minimum = sum(int(t["minAvailable"]) if t.get("minAvailable") is not None else int(t.get("replicas") or 0)
                      for t, _, _ in bound)
    return int(minimum)


def place_partitions(pod: PodShape, size: int, total: int, limits: PartitionBound, by_name: dict[str, NodeState],
                     placed: dict[str, int]) -> tuple[int, list[str]]:
    """Rule V26: each of ``total`` partitions of ``size`` pods inside the first candidate HyperNode that holds it
    (bound on ``by_name``'s Nodes, counted in ``placed``). Returns the partitions placed and why the others
    were not."""
    partitions, reasons = 0, []
    for p in range(total):
        for _, _, group in limits.domains:
            members = [by_name[n] for n in group if n in by_name]
            got, left, _ = place_pods(pod, size, [m.copy() for m in members])
            if left == 0:
                place_pods(pod, size, members)
                for k, v in got.items():
                    placed[k] = placed.get(k, 0) + v
                partitions += 1
                break
        else:
            reasons.append(f"partition {p + 1} of {total} ({size} pods) fits in no tier-{limits.tier} HyperNode")
    return partitions, reasons


def gang_shortfall(job: dict[str, Any], bound: list[tuple[dict[str, Any], int, int]]) -> str | None:
    """Rule V21: why Volcano's gang would bind none of the Job's pods, or None: fewer pods placeable than the Job's
    minAvailable (default: each task's minAvailable, else its replicas), than a task's minAvailable, or
    fewer partitions than a task's minPartitions (the PodGroup's minMember, minTaskMember and
    subGroupPolicy minSubGroups)."""
    return task_shortfall(bound) or job_shortfall(job, bound)


def task_shortfall(bound: list[tuple[dict[str, Any], int, int]]) -> str | None:
    """Rule V21: a task whose minAvailable or minPartitions cannot bind (the PodGroup's minTaskMember and
    subGroupPolicy minSubGroups), or None."""
    for task, pods, partitions in bound:
        name = task.get("name")
        raw = task.get("partitionPolicy")
        policy: dict[str, Any] = raw if isinstance(raw, dict) else {}
        if partitions < int(policy.get("minPartitions") or 0):
            return f"task {name}: {partitions} of minPartitions {policy['minPartitions']} partitions placeable"
        if task.get("minAvailable") is not None and pods < int(task["minAvailable"]):
            return f"task {name}: {pods} of minAvailable {task['minAvailable']} pods placeable"
    return None


def job_shortfall(job: dict[str, Any], bound: list[tuple[dict[str, Any], int, int]]) -> str | None:
    """Rule V21: fewer pods placeable than the Job's minimum (:func:`volcano_minimum`), or None."""
    minimum = volcano_minimum(job, bound)
    placeable = sum(pods for _, pods, _ in bound)
    if placeable < minimum:
        return f"{placeable} of the Job's minAvailable {minimum} pods placeable"
    return None


def commit(nodes: list[NodeState], trial: list[NodeState]) -> None:
    """What a gang bound on copies of ``nodes`` (``trial``, in the same order), bound on ``nodes`` themselves."""
    for node, state in zip(nodes, trial, strict=True):
        node.requested, node.pods, node.bound = state.requested, state.pods, state.bound
        node.nonzero, node.pod_list, node.owned = state.nonzero, state.pod_list, state.owned


# --- Kubeflow jobs: every replica type together ----------------------------------------------------------

def gang_owner(job: KubeflowJob) -> str:
    """Whose the job's placed pods are on the Nodes (:meth:`NodeState.release` takes them off again)."""
    return f"{job.kind} {job.namespace}/{job.name}"


def owner_of(obj: dict[str, Any]) -> str:
    """Whose a gang kind's pods are on the Nodes once its model placed them (:func:`gang_owner`; a TrainJob's
    are its JobSet's, named after it; a Volcano Job's are ``Job``'s)."""
    name = (obj.get("metadata") or {}).get("name", "")
    return f"{'JobSet' if is_trainjob(obj) else obj.get('kind')} {namespace_of(obj)}/{name}"


def place_gang(job: KubeflowJob, specs: dict[str, Any], cluster: Cluster) -> tuple[dict[str, int], int, list[str]]:
    """Rules G14, R15: the job's pods placed by the engine on ``cluster`` (bound there), every replica type in the
    job's order sharing the Nodes (Coscheduling holds each member it has placed until the gang's minimum is
    placed, so a PS and its Workers cannot count the same free CPU; ``check`` counts a gang's capacity so, rule
    G26). Returns (pods per node, pods placed, the scheduler's reasons for those that were not, per replica
    type)."""
    placed: dict[str, int] = {}
    count, reasons = 0, []
    for t in job.types:
        want = t.replicas
        if want <= 0:   # a replica type of none
            continue
        pod = PodShape.of_template((specs.get(t.key) or {}).get("template") or {}, job.namespace, "",
                                   owner=gang_owner(job))
        got, left, why, _ = cluster.place(pod, want)
        for k, v in got.items():
            placed[k] = placed.get(k, 0) + v
        count += want - left
        reasons += [f"{t.key}: {w}" for w in why]
    return placed, count, reasons


def simulate_kubeflow_job(obj: dict[str, Any], config: Config, nodes: list[NodeState],
                          facts: ClusterFacts | None = None, raw_nodes: list[dict[str, Any]] | None = None) -> Placement:
    """Rule R15: a TFJob, PyTorchJob or MPIJob (after policylib's mutation) placed as one gang beside the other
    workloads: unless its minimum (rule G2) is placed at once, nothing binds and every pod stays Pending, with the
    reason; else what was placed binds on ``nodes``. A gang whose PodGroup (or Workload), as the mutation writes
    it, names a topology level (rules R17, R18) is placed in one domain of it, as its scheduler does
    (:func:`place_in_one_domain`); on a cluster with no Workload API policylib writes, the webhook refuses the
    job's pods (rule G23) and all stay Pending."""
    ns = namespace_of(obj)
    facts = facts if facts is not None else ClusterFacts()
    result = mutate(obj, config, namespace=ns, facts=facts)
    mutated = result.object
    job = read_job(mutated, ns)
    specs = (mutated.get("spec") or {}).get(job.specs_key) or {}
    native = native_gang(config, facts) if config.gang.enabled else None
    minimum = job_minimum(job)
    if native is not None and native.api.version is None and job_carries_gang(mutated, job):
        return Placement(job.kind, ns, job.name, job.total, {}, {}, job.total, job.total, [
            f"the webhook refuses the job's pods (rule G23): {native.api.missing()}"])
    level = written_level(result.extra_objects, None, config, nodes, raw_nodes or [], facts)
    if level is not None:
        trial, placed, count, reasons, most = place_in_one_domain(job, specs, nodes, level, minimum)
    else:
        trial = [n.copy() for n in nodes]
        placed, count, reasons = place_gang(job, specs, Cluster(trial))
        most = count
    verdict = GangVerdict(job.name, minimum, min(most, minimum), where_of(level),
                          scheduler=level.scheduler if level else None)
    if count < minimum:
        reasons.append(f"gang: {count} of its minimum {minimum} pods placeable at once: the gang binds nothing, "
                       f"all {job.total} pods stay Pending")
        placed, count = {}, 0
    else:
        commit(nodes, trial)
    by_name = {n.name: n for n in trial}
    pending = job.total - count
    return Placement(job.kind, ns, job.name, job.total, dict(sorted(placed.items())), zones(placed, by_name),
                     pending, pending, reasons, node_zones(placed, by_name), gangs=[verdict], owner=gang_owner(job))


def written_level(objects: list[dict[str, Any]], name: str | None, config: Config, nodes: list[NodeState],
                  raw_nodes: list[dict[str, Any]], facts: ClusterFacts) -> GangLevel | None:
    """Rules R17, R18: the level the gang object named ``name`` among ``objects`` (a mutation's extra objects, or
    Trainer's PodGroup) holds its gang to; ``name`` None: the first gang object that names one. Volcano's
    HyperNodes are the input's and those label discovery builds (rule V26)."""
    found = gang_objects(objects)
    named = [found[name]] if name in found else []
    candidates = list(found.values()) if name is None else named
    hypernodes: list[dict[str, Any]] | None = None
    for obj in candidates:
        if str(obj.get("apiVersion", "")).startswith(f"{VOLCANO_SCHEDULING_GROUP}/") and hypernodes is None:
            hypernodes = scheduler_hypernodes(config.volcano.networkTopologyDiscovery, raw_nodes,
                                              facts.hypernodes)[0]
        level = gang_level(obj, nodes, raw_nodes, hypernodes or [])
        if level is not None:
            return level
    return None


def where_of(level: GangLevel | None) -> str:
    """Where a gang's minimum must fit, as ``check`` says it."""
    if level is None:
        return "Nodes"
    if level.key is not None:
        return f"one {level.key} domain"
    return f"one HyperNode of tier <= {level.tier}"


def job_carries_gang(mutated: dict[str, Any], job: KubeflowJob) -> bool:
    """Whether the (mutated) job's templates carry the scheduling-group label of gang method workload."""
    specs = (mutated.get("spec") or {}).get(job.specs_key) or {}
    return any(SCHEDULING_GROUP_LABEL in (((specs.get(t.key) or {}).get("template") or {}).get("metadata") or {}).get(
        "labels", {}) for t in job.types if t.replicas > 0)


#: The resources and weights kube-scheduler's placement score counts (NodeResourcesFit's default scoring
#: resources, cpu and memory, weight 1 each).
PLACEMENT_RESOURCES = ("cpu", "memory")


def placement_fit_score(domain: list[NodeState]) -> int:
    """Rule G25: NodeResourcesFit's ``ScorePlacement`` (pkg/scheduler/framework/plugins/noderesources,
    ``resourceAllocationScorer.scorePlacement`` with the MostAllocated scorer): over the domain's Nodes together,
    what is requested (the non-zero requests of what is bound, the gang's pods included) over what is
    allocatable, per resource on 0-100 (integer division, capped at 100), averaged over the resources the domain
    has."""
    total, weights = 0, 0
    for resource in PLACEMENT_RESOURCES:
        allocatable = sum(n.allocatable.get(resource, 0) for n in domain)
        if allocatable <= 0:
            continue
        requested = min(sum(n.nonzero.get(resource, 0) for n in domain), allocatable)
        total += requested * 100 // allocatable
        weights += 1
    return total // weights if weights else 0


def place_in_one_domain(job: KubeflowJob, specs: dict[str, Any], nodes: list[NodeState], level: GangLevel,
                        minimum: int) -> tuple[list[NodeState], dict[str, int], int, list[str], int]:
    """Rules R16, R17 and G25: kube-scheduler's placement of a gang whose PodGroup carries
    ``schedulingConstraints.topology [{key}]`` (``podGroupSchedulingPlacementAlgorithm`` in
    pkg/scheduler/schedule_one_podgroup.go, v1.37.2); Volcano's for a hard ``networkTopology`` (rule R18,
    :func:`place_in_hypernode`).

    The TopologyPlacement plugin makes one placement per value of the Node label ``key`` (Nodes without it are in
    none); the gang is tried in each, its pods placed by the engine on that domain's Nodes alone, and a placement
    is feasible when the gang's minimum fits (GangScheduling's PlacementFeasible). The feasible ones are scored by
    NodeResourcesFit's placement score (:func:`placement_fit_score`, weight 1) plus PodGroupPodsCount's (pods
    placed, normalized to 0-100 by the most any placement took, weight 1); the best wins, a tie at random (here:
    the first domain in name order, the tie named in the reasons). None feasible: the scheduler reports ``0/N
    placements are available`` and binds nothing. Returns (the Nodes with the chosen placement bound, pods per
    node, pods placed, reasons, the most pods one domain holds)."""
    if level.scheduler == VOLCANO:
        return place_in_hypernode(job, specs, nodes, level, minimum)
    key = level.key
    tried = _try_domains(job, specs, nodes, level)
    feasible = [t for t in tried if t[3] >= minimum]
    if not feasible:
        counts = ", ".join(f"{value} {count}" for value, _, _, count, _ in tried) or f"no Node has the label {key}"
        return [n.copy() for n in nodes], {}, 0, [
            f"topology {key}: 0/{len(tried)} placements are available: no {key} domain holds the gang's minimum "
            f"{minimum} pods at once (pods placeable per domain: {counts})"], max((t[3] for t in tried), default=0)
    index = {n.name: i for i, n in enumerate(nodes)}
    members = {name: [index[m] for m in group] for name, _, group in level.domains}
    most = max(t[3] for t in feasible)
    scored = [(placement_fit_score([t[1][i] for i in members[t[0]]]) + (t[3] * 100 // most if most else 0), t)
              for t in feasible]
    best = max(score for score, _ in scored)
    winners = [t for score, t in scored if score == best]
    value, trial, placed, count, why = winners[0]
    reasons = [f"topology {key}: placed in {key}={value} ({len(feasible)} of {len(tried)} domains hold the gang; "
               f"placement score {best})"] + why
    if len(winners) > 1:
        reasons.append(f"topology {key}: domains {', '.join(t[0] for t in winners)} score the same ({best}): "
                       f"kube-scheduler picks one at random; simulated in {value}")
    return trial, placed, count, reasons, count


def _try_domains(job: KubeflowJob, specs: dict[str, Any], nodes: list[NodeState],
                 level: GangLevel) -> list[tuple[str, list[NodeState], dict[str, int], int, list[str]]]:
    """The gang placed by the engine in each domain of ``level`` on its own copy of ``nodes``: (domain, the
    copy, pods per node, pods placed, reasons), in the level's order."""
    index = {n.name: i for i, n in enumerate(nodes)}
    tried = []
    for value, _, group in level.domains:
        trial = [n.copy() for n in nodes]
        member = [trial[index[m]] for m in group if m in index]
        placed, count, why = place_gang(job, specs, Cluster(member))
        tried.append((value, trial, placed, count, why))
    return tried


def place_in_hypernode(job: KubeflowJob, specs: dict[str, Any], nodes: list[NodeState], level: GangLevel,
                       minimum: int) -> tuple[list[NodeState], dict[str, int], int, list[str], int]:
    """Rule R18: Volcano's allocate action for a job with a hard network topology (``allocateForJob``,
    pkg/scheduler/actions/allocate/allocate.go, v1.14.1): the candidate HyperNodes (tier <= the allowed tier,
    and the cluster-top one where it is allowed) grouped by tier, the lowest tier first; the job is tried in
    each HyperNode of a tier on its Nodes alone, and the first tier where one holds the minimum wins (Volcano
    then scores those HyperNodes; here: the first in name order, the others named). None holds it: the gang
    plugin's ``NotEnoughResources`` condition and nothing binds."""
    tried = _try_domains(job, specs, nodes, level)
    for tier in sorted({t for _, t, _ in level.domains}):
        names = {name for name, t, _ in level.domains if t == tier}
        feasible = [t for t in tried if t[0] in names and t[3] >= minimum]
        if feasible:
            value, trial, placed, count, why = feasible[0]
            reasons = [f"{level.words}: placed in HyperNode {value} (tier {tier}; {len(feasible)} of {len(names)} "
                       f"tier-{tier} HyperNodes hold the gang)"] + why
            if len(feasible) > 1:
                reasons.append(f"{level.words}: HyperNodes {', '.join(t[0] for t in feasible)} all hold the gang: "
                               f"Volcano's network-topology-aware scores pick one; simulated in {value}")
            return trial, placed, count, reasons, count
    counts = ", ".join(f"{value} {count}" for value, _, _, count, _ in tried) or "no HyperNode"
    unschedulable = (f"{level.words}: no HyperNode of tier <= {level.tier} holds the gang's minimum {minimum} pods "
                     f"at once (pods placeable per HyperNode: {counts}): Volcano's PodGroup stays Unschedulable "
                     f"({UNSCHEDULABLE_WORDS})")
    return [n.copy() for n in nodes], {}, 0, [unschedulable], max((t[3] for t in tried), default=0)


def simulate_jobset(obj: dict[str, Any], config: Config, nodes: list[NodeState], raw_nodes: list[dict[str, Any]],
                    facts: ClusterFacts) -> Placement:
    """Rule J7: a JobSet (after policylib's mutation) placed wave by wave beside the other workloads, as JobSet
    starts it (rule J1): a wave that is a gang binds its minimum at once or nothing (rule R15; in one domain where
    its PodGroup or Workload names a level, rules R17, R18), a wave of one pod goes pod by pod; a wave starts only
    once every pod of the waves before it is placed (``dependsOn`` Ready, ``startupPolicy InOrder``), so after a
    wave that does not fit every later pod stays Pending, with the reason. JobSet's exclusive placement puts each
    Job alone in one domain (rule R19, :func:`place_exclusive`)."""
    ns = namespace_of(obj)
    result = mutate(obj, config, namespace=ns, facts=facts)
    mutated = result.object
    jobset = read_jobset(mutated, ns)
    plan = plan_jobset_gangs(jobset) if config.gang.enabled else None
    return place_jobset(mutated, jobset, plan, result.extra_objects, config, nodes, raw_nodes, facts)


def place_jobset(mutated: dict[str, Any], jobset: JobSet, plan: GangPlan | None, gang_objs: list[dict[str, Any]],
                 config: Config, nodes: list[NodeState], raw_nodes: list[dict[str, Any]], facts: ClusterFacts,
                 scheduler: str | None = None) -> Placement:
    """Rules J7, R17, R18: the (mutated) JobSet's waves placed in order, each gang of ``plan`` all or nothing, in
    one domain of the level its object among ``gang_objs`` names; ``scheduler``: whose gang it is where the
    configuration does not say (Trainer's PodGroup)."""
    ns = jobset.namespace
    gang_of = {t: g for g in (plan.gangs if plan else ()) for t in g.replica_types}
    view = jobset.gang_view()
    specs = {j.name: {"template": (((mutated["spec"]["replicatedJobs"][j.index].get("template") or {}).get("spec")
                                   or {}).get("template") or {})} for j in jobset.jobs}
    native = native_gang(config, facts) if plan and scheduler is None else None
    exclusive = exclusive_keys(mutated, jobset)
    taken = {key: occupied_domains(nodes, key) for key in set(exclusive.values())}
    placed: dict[str, int] = {}
    count, reasons, verdicts = 0, [], []
    by_name = {n.name: n for n in nodes}
    blocked: str | None = None
    waves = jobset.waves()
    for n, wave in enumerate(waves, 1):
        wave_pods = sum(j.pods for j in wave)
        names = ", ".join(j.name for j in wave)
        if blocked is not None:
            reasons.append(f"wave {n} ({names}): not started: {blocked}")
            continue
        job = replace(view, types=tuple(t for t in view.types if t.key in {j.name for j in wave}))
        gang = next((gang_of[j.name] for j in wave if j.name in gang_of), None)
        carries = native is not None and job_carries_gang_in(specs, job)
        if native is not None and native.api.version is None and carries:
            reasons.append(f"wave {n} ({names}): the webhook refuses its pods (rule G23): {native.api.missing()}")
            blocked = f"wave {n} has no pods"
            continue
        level = written_level(gang_objs, gang.name, config, nodes, raw_nodes, facts) if gang is not None else None
        keys = {j.name: exclusive[j.name] for j in wave if j.name in exclusive}
        stuck = [f"{j.name} ({j.pods_per_job} pods per Job)" for j in wave if j.name in keys and j.pods_per_job > 1]
        if gang is not None and stuck:   # rule R19: JobSet's pod webhook never creates the rest of the gang
            never = (f"{EXCLUSIVE_TOPOLOGY}: JobSet's pod webhook creates a Job's other pods only once its first pod "
                     "is bound (\"follower pod node selector not set\"), and gang "
                     f"{gang.name} binds none until all {gang.min_available} exist: the Jobs of {', '.join(stuck)} "
                     "deadlock")
            reasons.append(f"wave {n} ({names}): {never}")
            verdicts.append(GangVerdict(gang.name, gang.min_available, 0, wave=f"wave {n} of {len(waves)}: {names}"
                                        if len(waves) > 1 else None, never=never))
            blocked = f"wave {n} did not start"
            continue
        if keys:
            trial = [s.copy() for s in nodes]
            got, bound, why = place_exclusive(jobset, wave, specs, trial, keys, taken, gang_owner(view))
            most = bound
        elif gang is not None and level is not None:
            trial, got, bound, why, most = place_in_one_domain(job, specs, nodes, level, gang.min_available)
        else:
            trial = [s.copy() for s in nodes]
            got, bound, why = place_gang(job, specs, Cluster(trial))
            most = bound
        reasons += [f"wave {n}: {w}" for w in why]
        if gang is not None:
            verdicts.append(GangVerdict(gang.name, gang.min_available, min(most, gang.min_available),
                                        where_of(level), f"wave {n} of {len(waves)}: {names}" if len(waves) > 1
                                        else None, level.scheduler if level else scheduler))
        if gang is not None and bound < gang.min_available:
            reasons.append(f"wave {n} ({names}): gang {gang.name}: {bound} of its minimum {gang.min_available} pods "
                           "placeable at once: the gang binds nothing")
            blocked = f"wave {n} did not start"
            continue
        commit(nodes, trial)
        by_name = {s.name: s for s in nodes}
        for k, v in got.items():
            placed[k] = placed.get(k, 0) + v
        count += bound
        if bound < wave_pods:
            blocked = f"wave {n} has {wave_pods - bound} Pending pod(s)"
    if node_selector_strategy(mutated):
        reasons.append(f"{NODE_SELECTOR_STRATEGY}: each Job's pods select the Nodes labelled for it beforehand "
                       "(alpha.jobset.sigs.k8s.io/namespaced-job): not modelled, placed without it")
    pending = jobset.total - count
    return Placement("JobSet", ns, jobset.name, jobset.total, dict(sorted(placed.items())), zones(placed, by_name),
                     pending, pending, reasons, node_zones(placed, by_name), gangs=verdicts, owner=gang_owner(view))


#: JobSet's flag for its other exclusive strategy (the value does not matter; jobset_types.go
#: ``NodeSelectorStrategyKey``): the pod webhooks then leave the pods alone.
NODE_SELECTOR_STRATEGY = "alpha.jobset.sigs.k8s.io/node-selector"
#: The label JobSet's controller puts on every Job and pod (sha256 of the namespaced Job name): what JobSet's
#: exclusive placement's pod anti-affinity selects (``job-key Exists``, ``NotIn`` its own).
JOB_KEY_LABEL = "jobset.sigs.k8s.io/job-key"


def exclusive_keys(mutated: dict[str, Any], jobset: JobSet) -> dict[str, str]:
    """Rule R19: the node label each ReplicatedJob's Jobs are exclusive on (``alpha.jobset.sigs.k8s.io/
    exclusive-topology`` on the JobSet's metadata, or on the ReplicatedJob's Job template, which wins: JobSet's
    controller copies it to each Job and pod so)."""
    top = _annotations(mutated.get("metadata"))
    out = {}
    for j in jobset.jobs:
        own = _annotations((mutated["spec"]["replicatedJobs"][j.index].get("template") or {}).get("metadata"))
        key = own.get(EXCLUSIVE_TOPOLOGY) or top.get(EXCLUSIVE_TOPOLOGY)
        if key and NODE_SELECTOR_STRATEGY not in own and NODE_SELECTOR_STRATEGY not in top:
            out[j.name] = str(key)
    return out


def node_selector_strategy(mutated: dict[str, Any]) -> bool:
    """Whether the JobSet (or one of its ReplicatedJobs) asks for JobSet's node-selector strategy: each Job's pods
    then select Nodes labelled for that Job beforehand, which the pod webhooks leave alone (not modelled)."""
    rjobs = (mutated.get("spec") or {}).get("replicatedJobs") or []
    return NODE_SELECTOR_STRATEGY in _annotations(mutated.get("metadata")) or any(
        NODE_SELECTOR_STRATEGY in _annotations((r.get("template") or {}).get("metadata")) for r in rjobs
        if isinstance(r, dict))


def occupied_domains(nodes: list[NodeState], key: str) -> set[str]:
    """Rule R19: the domains of ``key`` where a pod of a JobSet's Job is bound already (its ``job-key`` label):
    JobSet's exclusive placement keeps every other Job out of them."""
    return {str(n.labels[key]) for n in nodes if key in n.labels
            and any(JOB_KEY_LABEL in labels for pods in n.bound.values() for labels in pods)}


def place_exclusive(jobset: JobSet, wave: list[ReplicatedJob], specs: dict[str, Any], nodes: list[NodeState],
                    keys: dict[str, str], taken: dict[str, set[str]], owner: str) -> tuple[dict[str, int], int, list[str]]:
    """Rule R19: a wave's Jobs placed as JobSet's pod webhooks place them (sigs.k8s.io/jobset v0.12.0
    pkg/webhooks/pod_webhook.go): each Job's first pod gets a required pod affinity to its own Job and a pod
    anti-affinity to every other Job on the level, so the scheduler puts it on the best Node of a domain no other
    Job's pods are in; its other pods are created only once it is bound, with a node selector on that domain.
    A ReplicatedJob without the annotation goes pod by pod. Binds on ``nodes``; returns (pods per node, pods
    placed, reasons)."""
    placed: dict[str, int] = {}
    count, reasons = 0, []
    index = {n.name: i for i, n in enumerate(nodes)}
    for j in wave:
        template = (specs.get(j.name) or {}).get("template") or {}
        pod = PodShape.of_template(template, jobset.namespace, "", owner=owner)
        key = keys.get(j.name)
        if key is None:
            got, left, why, _ = Cluster(nodes).place(pod, j.pods)
            _add(placed, got)
            count += j.pods - left
            reasons += [f"{j.name}: {w}" for w in why]
            continue
        domains = label_domains(nodes, key)
        used: list[str] = []
        for r in range(j.replicas):
            job = f"Job {jobset.name}-{j.name}-{r}"
            free = [nodes[i] for value, members in domains.items() if value not in taken[key] for i in members]
            if not free:
                reasons.append(f"{job}: {EXCLUSIVE_TOPOLOGY} {key}: every {key} domain holds another Job's pods (its "
                               "first pod's pod anti-affinity): its pods are not created")
                continue
            pod = PodShape.of_template(with_job_key(template, f"{jobset.namespace}/{jobset.name}-{j.name}-{r}"),
                                       jobset.namespace, "", owner=owner)
            got, left, why, _ = Cluster(free).place(pod, 1)
            if left:
                reasons.append(f"{job}: its first pod: {why[0]}")
                continue
            value = str(nodes[index[next(iter(got))]].labels[key])
            taken[key].add(value)
            used.append(value)
            rest, left, why, _ = Cluster([nodes[i] for i in domains[value]]).place(pod, j.pods_per_job - 1)
            _add(placed, got)
            _add(placed, rest)
            count += j.pods_per_job - left
            reasons += [f"{job}: its pods in {key}={value}: {w}" for w in why]
        if used:
            reasons.append(f"{EXCLUSIVE_TOPOLOGY} {key}: the Jobs of {j.name} each alone in one domain: "
                           f"{', '.join(used)}")
    return placed, count, reasons


def with_job_key(template: dict[str, Any], job: str) -> dict[str, Any]:
    """A pod template with the ``job-key`` label JobSet's controller gives the pods of ``job`` (so the Jobs placed
    after it see its domain as taken)."""
    meta = template.get("metadata") or {}
    return {**template, "metadata": {**meta, "labels": {**(meta.get("labels") or {}), JOB_KEY_LABEL: job}}}


def _add(placed: dict[str, int], got: dict[str, int]) -> None:
    for k, v in got.items():
        placed[k] = placed.get(k, 0) + v


def job_carries_gang_in(specs: dict[str, Any], job: KubeflowJob) -> bool:
    """Whether the pod templates in ``specs`` of ``job``'s types carry the scheduling-group label (method workload)."""
    return any(SCHEDULING_GROUP_LABEL in (((specs.get(t.key) or {}).get("template") or {}).get("metadata") or {}).get(
        "labels", {}) for t in job.types if t.replicas > 0)


def trainjob_as_jobset(mutated: dict[str, Any], runtime: dict[str, Any]) -> dict[str, Any]:
    """Rule T5: the JobSet Trainer makes of a (mutated) TrainJob, as far as placement goes: the runtime's JobSet
    template with each Job's ``parallelism = completions`` the pods Trainer gives it (rule T1), every runtime
    patch's pod labels and annotations merged in list order, and its JobSet and Job annotations (where JobSet's
    exclusive-topology rides, rule R19), named after the TrainJob and owned by it."""
    trainjob = read_trainjob(mutated)
    counts = {j.name: j.pods_per_job for j in runtime_jobset(trainjob, runtime).jobs}
    spec = copy.deepcopy(((runtime.get("spec") or {}).get("template") or {}).get("spec") or {})
    by_name = {r.get("name"): r for r in spec.get("replicatedJobs") or [] if isinstance(r, dict)}
    for name, rjob in by_name.items():
        job_spec = rjob.setdefault("template", {}).setdefault("spec", {})
        job_spec["parallelism"] = job_spec["completions"] = counts.get(str(name), 1)
    apply_resources_per_node(by_name, ((mutated.get("spec") or {}).get("trainer") or {}).get("resourcesPerNode"),
                             (runtime.get("spec") or {}).get("mlPolicy"))
    template_meta = ((runtime.get("spec") or {}).get("template") or {}).get("metadata")
    annotations = _annotations(template_meta)
    for patch in trainjob.patches:
        for name, meta in entry_pod_metadata(patch):
            pod = by_name.get(name, {}).get("template", {}).get("spec", {}).setdefault("template", {})
            target = pod.setdefault("metadata", {})
            for part in ("labels", "annotations"):
                if meta.get(part):
                    target[part] = {**(target.get(part) or {}), **meta[part]}
        template = ((patch.get("trainingRuntimeSpec") or {}).get("template") or {})
        annotations.update(_annotations(template.get("metadata") if isinstance(template, dict) else None))
        patched = (template.get("spec") or {}).get("replicatedJobs") if isinstance(template, dict) else None
        for rjob in patched if isinstance(patched, list) else []:
            own = _annotations(((rjob.get("template") or {}).get("metadata")) if isinstance(rjob, dict) else None)
            if own and rjob.get("name") in by_name:
                job_meta = by_name[rjob["name"]].setdefault("template", {}).setdefault("metadata", {})
                job_meta["annotations"] = {**_annotations(job_meta), **own}
    return {"apiVersion": JOBSET_API_VERSION,
            "kind": "JobSet", "metadata": {"name": trainjob.name, "namespace": trainjob.namespace, "ownerReferences": [
                {"apiVersion": mutated["apiVersion"], "kind": "TrainJob", "name": trainjob.name, "controller": True}],
                **({"annotations": annotations} if annotations else {})},
            "spec": spec}


def apply_resources_per_node(by_name: dict[Any, dict[str, Any]], per_node: Any, ml_policy: Any) -> None:
    """Rule T5: the TrainJob's ``spec.trainer.resourcesPerNode`` merged into the resources of the container named
    ``node`` of the trainer step's replicated job (the one labelled ``trainjob-ancestor-step: trainer``, where the
    runtime has an ``mlPolicy``; also the MPI launcher named ``node`` with ``runLauncherAsNode``), as Trainer v2.3.0's
    core/trainingruntime.go does: a strategic merge of the two maps, ``requests`` and ``limits`` key by key, the
    TrainJob's value winning (null removes)."""
    if not isinstance(per_node, dict) or not isinstance(ml_policy, dict):
        return
    mpi = ml_policy.get("mpi")
    launcher_as_node = isinstance(mpi, dict) and mpi.get("runLauncherAsNode") is True
    for name, rjob in by_name.items():
        labels = (((rjob.get("template") or {}).get("metadata") or {}).get("labels") or {})
        if not ((isinstance(labels, dict) and labels.get(ANCESTOR_LABEL) == TRAINER_STEP)
                or (launcher_as_node and name == "node")):
            continue
        pod = (((rjob.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
        container = next((c for c in pod.get("containers") or [] if isinstance(c, dict) and c.get("name") == "node"),
                         None)
        if container is None:
            continue
        resources = container.get("resources")
        base: dict[str, Any] = resources if isinstance(resources, dict) else {}
        merged = dict(base)
        for part in ("requests", "limits"):
            override, given = per_node.get(part), base.get(part)
            if not isinstance(override, dict):
                continue
            values = {**(given if isinstance(given, dict) else {}), **override}
            merged[part] = {k: v for k, v in values.items() if v is not None}
        container["resources"] = merged


def _annotations(meta: Any) -> dict[str, Any]:
    """A copy of an object's (or template's) ``metadata.annotations``, empty where there are none."""
    found = meta.get("annotations") if isinstance(meta, dict) else None
    return dict(found) if isinstance(found, dict) else {}


def simulate_trainjob(obj: dict[str, Any], config: Config, nodes: list[NodeState], raw_nodes: list[dict[str, Any]],
                      facts: ClusterFacts) -> Placement:
    """Rule T5: a TrainJob whose runtime is among the facts (the input's, or the cluster's with ``--cluster``)
    placed as the JobSet Trainer makes of it (:func:`trainjob_as_jobset`, rule J7): each start wave a gang, as
    policylib's runtime patch says, in one domain where its PodGroup or Workload names a level (rules R17, R18); a
    runtime with ``podGroupPolicy`` gangs every pod in Trainer's one PodGroup (its Volcano ``networkTopology``
    read the same way), which never fills when the runtime starts in waves (all Pending, named). A TrainJob whose
    runtime is not known is not placed (a reason naming it)."""
    ns = namespace_of(obj)
    result = mutate(obj, config, namespace=ns, facts=facts)
    mutated = result.object
    trainjob = read_trainjob(mutated, ns)
    runtime = facts.runtime(trainjob.runtime_kind, ns, trainjob.runtime_name)
    if runtime is None:
        return Placement("TrainJob", ns, trainjob.name, 0, {}, {}, 0, 0, [
            f"{NOT_SIMULATED}runtime {trainjob.runtime_ref} is not known{RUNTIME_SOURCES}"])
    jobset_obj = trainjob_as_jobset(mutated, runtime)
    jobset = read_jobset(jobset_obj, ns)
    waves = jobset.waves()
    own = pod_group_policy(runtime)
    if own is not None and len(waves) > 1:
        never = (f"runtime {trainjob.runtime_ref} has podGroupPolicy.{own}: Trainer's PodGroup counts the pods of all "
                 f"{len(waves)} start waves, which never exist together: nothing binds")
        return Placement("TrainJob", ns, trainjob.name, jobset.total, {}, {}, jobset.total, jobset.total, [never],
                         gangs=[GangVerdict(trainjob.name, jobset.total, 0, never=never)])
    if own is not None:
        pods = jobset.total
        plan = GangPlan(ns, (Gang(trainjob.name, pods, pods, tuple(j.name for j in jobset.jobs if j.pods > 0)),)) \
            if pods > 1 else None
        placement = place_jobset(jobset_obj, jobset, plan, [trainer_podgroup(trainjob.name, ns, runtime, own)], config,
                                 nodes, raw_nodes, facts, scheduler=VOLCANO if own == "volcano" else COSCHEDULING)
    else:
        plan = plan_jobset_gangs(jobset) if config.gang.enabled else None
        placement = place_jobset(jobset_obj, jobset, plan, result.extra_objects, config, nodes, raw_nodes, facts)
    return replace(placement, kind="TrainJob")


#: Where a TrainJob's runtime is read from besides the input's files.
RUNTIME_SOURCES = " (not among the -f objects, nor the cluster's with --cluster)"


def trainer_podgroup(name: str, namespace: str, runtime: dict[str, Any], policy: str) -> dict[str, Any]:
    """Rule T5: the PodGroup Trainer makes for a runtime with ``podGroupPolicy`` (Trainer v2.3.0
    pkg/runtime/framework/plugins/{coscheduling,volcano}), as far as placement goes: Volcano's carries the runtime's
    ``podGroupPolicy.volcano.networkTopology`` (mode and ``highestTierAllowed``, default hard and 1)."""
    spec: dict[str, Any] = {}
    source = ((runtime.get("spec") or {}).get("podGroupPolicy") or {}).get(policy)
    topology = source.get("networkTopology") if isinstance(source, dict) else None
    if policy == "volcano" and isinstance(topology, dict):
        spec["networkTopology"] = {"mode": topology.get("mode", "hard"),
                                   "highestTierAllowed": topology.get("highestTierAllowed", 1)}
    api_version = VOLCANO_PODGROUP_API_VERSION if policy == "volcano" else X_K8S_PODGROUP_API_VERSION
    return {"apiVersion": api_version, "kind": "PodGroup", "metadata": {"name": name, "namespace": namespace},
            "spec": spec}


#: A gang's simulator model: the job (as the webhook mutates it) placed all-or-nothing on ``nodes`` (the
#: snapshot's states, bound there when its minimum fits), with the input's raw Nodes and facts.
GangModel = Callable[[dict[str, Any], Config, list[NodeState], list[dict[str, Any]], ClusterFacts], Placement]


def kubeflow_model(obj: dict[str, Any], config: Config, nodes: list[NodeState], raw_nodes: list[dict[str, Any]],
                   facts: ClusterFacts) -> Placement:
    """:func:`simulate_kubeflow_job` as a :data:`GangModel` (its HyperNodes are not read)."""
    return simulate_kubeflow_job(obj, config, nodes, facts, raw_nodes)


#: The kinds placed as gangs, each with its model (rules V21, R15, J7, T5), in the order their predicates are asked: a
#: new all-or-nothing kind adds its predicate and model here.
GANG_MODELS: tuple[tuple[Callable[[Any], bool], GangModel], ...] = (
    (is_volcano_job, simulate_volcano_job),
    (is_kubeflow_job, kubeflow_model),
    (is_jobset, simulate_jobset),
    (is_trainjob, simulate_trainjob),
)


def gang_model(obj: Any) -> GangModel | None:
    """The model of the first kind of :data:`GANG_MODELS` that ``obj`` is, or None."""
    return next((model for is_kind, model in GANG_MODELS if is_kind(obj)), None)

