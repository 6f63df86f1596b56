"""Volcano Jobs: partitions with network topology, and RestartPartition (seed 001).

Seed 001 ("Pod Rescheduling by Partition") has a job restart a whole
partition when one of its pods is evicted or fails, so that the partition is
rescheduled together inside one HyperNode. This policy writes, on CREATE:

- a task ``partitionPolicy`` (``totalPartitions``, ``partitionSize``,
  ``minPartitions``, ``networkTopology``) when the configured partition size
  divides the task's replicas;
- task-level ``{event: E, action: RestartPartition}`` for each configured
  event the task does not already handle, on every task with a partitionPolicy.

Volcano's Job webhook rejects any change to ``policies`` or
``partitionPolicy`` on UPDATE, so UPDATE gets no patch. A job-level
RestartPartition policy is moved to the partitioned tasks (Volcano's
ValidatingAdmissionPolicy denies it at job level; where the VAP is off it acts
there as on a task, and without a partitioned task it does nothing); other
job-level policies are never touched.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .config import Config, VolcanoSettings, load_config
from .errors import PolicyError, object_ref
from .facts import NO_FACTS, ClusterFacts, namespace_of
from .hypernodes import discover_hypernodes, leaf_nodes
from .patch import Draft, diff_owned
from .result import Result
from . import quantity
from .spread import DOMAIN, SKIP_KEY, is_opted_out
from .validation import RESTART_PARTITION, policy_events, unenforced_partition_tier_name, validate_volcano_job

JOB_API_VERSION = "batch.volcano.sh/v1alpha1"
#: Per-job override of ``volcano.partitionSize``: a whole number, or ``none`` to add no partitionPolicy.
PARTITION_SIZE_ANNOTATION = f"{DOMAIN}/partition-size"
TASKS = ("spec", "tasks")


def is_volcano_job(obj: object) -> bool:
    return isinstance(obj, dict) and obj.get("apiVersion") == JOB_API_VERSION and obj.get("kind") == "Job"


def is_volcano_workload(obj: object) -> bool:
    """Other kinds of Volcano's API groups (HyperJob among them)."""
    return isinstance(obj, dict) and str(obj.get("apiVersion", "")).split("/")[0].endswith("volcano.sh")


def _contains_key(node: Any, key: str) -> bool:
    if isinstance(node, dict):
        return key in node or any(_contains_key(v, key) for v in node.values())
    if isinstance(node, list):
        return any(_contains_key(v, key) for v in node)
    return False


# --- decisions -------------------------------------------------------------------

def partition_size_for(job: dict, settings: VolcanoSettings, ref: str) -> int | None:
    """The partition size for this job: the annotation override, else the setting."""
    meta = job.get("metadata") if isinstance(job.get("metadata"), dict) else {}
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
    if PARTITION_SIZE_ANNOTATION not in annotations:
        return settings.partitionSize
    raw = str(annotations[PARTITION_SIZE_ANNOTATION]).strip()
    if raw.lower() == "none":
        return None
    if not (raw.isascii() and raw.isdigit()) or int(raw) < 1:
        raise PolicyError(ref, f"metadata.annotations[{PARTITION_SIZE_ANNOTATION}]",
                          f"must be a whole number >= 1 or 'none', got {annotations[PARTITION_SIZE_ANNOTATION]!r}")
    return int(raw)


def partition_policy_for(task: dict, size: int, settings: VolcanoSettings) -> tuple[dict | None, str]:
    """The partitionPolicy to add to a task without one, or None and why not.

    Volcano requires replicas == totalPartitions * partitionSize; v1.14.0-v1.15.0
    require a task minAvailable to equal minPartitions * partitionSize and default
    an unset minAvailable to minPartitions * partitionSize even when minPartitions
    is 0 (volcano issue 5401): so minPartitions is totalPartitions when the user
    gave no minimum, minAvailable / partitionSize when it divides, and otherwise
    the task is not partitioned.
    """
    name, replicas = task.get("name"), task.get("replicas", 0)
    if replicas <= size:
        return None, f"task {name}: {replicas} replicas <= partitionSize {size}: not partitioned"
    if replicas % size:
        return None, f"task {name}: partitionSize {size} does not divide its {replicas} replicas: not partitioned"
    total = replicas // size
    min_available = task.get("minAvailable")
    if min_available is None:
        min_partitions = total
    elif min_available % size == 0:
        min_partitions = min_available // size
    else:
        return None, (f"task {name}: minAvailable {min_available} is not a multiple of partitionSize {size} "
                      "(Volcano requires minAvailable == minPartitions * partitionSize): not partitioned")
    policy: dict = {"totalPartitions": total, "partitionSize": size, "minPartitions": min_partitions}
    if settings.networkTopology is not None:
        policy["networkTopology"] = settings.networkTopology.as_spec()
    return policy, f"task {name}: {total} partitions of {size} pods (minPartitions {min_partitions})"


def handled_events(policies: list) -> set[str]:
    """Events a task's own policies already handle (``event`` and ``events`` merged)."""
    return {e for p in policies if isinstance(p, dict) for e in policy_events(p)}


def restart_partition_policies(policies: list, events: tuple[str, ...]) -> tuple[list[dict], str | None]:
    """The RestartPartition policies to append, and a warning when one cannot be added.

    An event the task already handles (same event, ``*``, or in an ``events``
    list) is left to the user's policy; ``*`` may not stand beside other events.
    """
    handled = handled_events(policies)
    if "*" in handled:
        return [], None
    if "*" in events:
        if handled:
            return [], (f"cannot add RestartPartition for '*': the task already handles "
                        f"{', '.join(sorted(handled))} and '*' must stand alone")
        return [{"event": "*", "action": RESTART_PARTITION}], None
    return [{"event": e, "action": RESTART_PARTITION} for e in events if e not in handled], None


# --- feasibility (issue: "Feasibility in preview") ------------------------------

def parse_quantity(value: Any) -> float:
    """A Kubernetes resource quantity (``4``, ``500m``, ``32Gi``) as a number."""
    return float(quantity.parse_quantity(value))


def pod_requests(template: dict) -> dict[str, float]:
    """Summed container requests (limits where requests are absent, as the API defaults them)."""
    total: dict[str, float] = {}
    for c in ((template.get("spec") or {}).get("containers") or []):
        res = c.get("resources") or {}
        req = dict(res.get("limits") or {}, **(res.get("requests") or {}))
        for k, v in req.items():
            total[k] = total.get(k, 0.0) + parse_quantity(v)
    return total


def pods_per_node(requests: dict[str, float], node: dict) -> int | None:
    """How many such pods fit in a node's allocatable; None when either side is unknown."""
    alloc = (node.get("status") or {}).get("allocatable") or {}
    wanted = {k: v for k, v in requests.items() if v > 0}
    if not wanted or not alloc:
        return None
    fits = [int(parse_quantity(alloc.get(k, 0)) // v) for k, v in wanted.items()]
    return min(fits)


def tier_limit(policy: dict, hypernodes: list[dict]) -> int | None:
    topo = policy.get("networkTopology") or {}
    if topo.get("highestTierAllowed") is not None:
        return topo["highestTierAllowed"]
    name = topo.get("highestTierName")
    tiers = {h["spec"]["tier"] for h in hypernodes if h["spec"].get("tierName") == name}
    return max(tiers) if tiers else None


def partition_feasibility(task: dict, hypernodes: list[dict], nodes: list[dict]) -> tuple[str, bool]:
    """Whether each partition fits inside one HyperNode of tier <= the allowed tier.

    Capacity counts one pod per node unless requests and node allocatable are
    both known, then how many pods each node's allocatable holds.
    """
    policy = task["partitionPolicy"]
    name, size, total = task.get("name"), policy["partitionSize"], policy["totalPartitions"]
    tier = tier_limit(policy, hypernodes)
    if tier is None:
        return f"task {name}: networkTopology names no tier that the discovered HyperNodes have", False
    leaves = leaf_nodes(hypernodes)
    by_name = {n["metadata"]["name"]: n for n in nodes}
    requests = pod_requests(task.get("template") or {})
    capacities = []
    exact = True
    for h in hypernodes:
        if h["spec"]["tier"] > tier:
            continue
        per_node = [pods_per_node(requests, by_name[n]) if n in by_name else None for n in leaves[h["metadata"]["name"]]]
        exact = exact and all(p is not None for p in per_node)
        capacities.append((sum(1 if p is None else p for p in per_node), h))
    if not capacities:
        return f"task {name}: no HyperNode of tier <= {tier} exists", False
    top = [c for c, h in capacities if h["spec"]["tier"] == max(hh["spec"]["tier"] for _, hh in capacities)]
    placeable = sum(c // size for c in top)
    largest = max(c for c, _ in capacities)
    basis = "by allocatable" if exact else "counting one pod per node"
    need = f"task {name}: {total} partitions of {size} pods each need one tier-{tier} HyperNode holding {size} pods"
    if largest < size:
        return f"{need}; the largest holds {largest} pods ({basis})", False
    if placeable < total:
        return (f"{need}; the {len(top)} tier-{tier} HyperNodes hold {sum(top)} pods ({basis}), room for "
                f"{placeable} partitions"), False
    return (f"task {name}: {total} partitions of {size} pods each fit in one tier-{tier} HyperNode ({largest} pods "
            f"{basis}); {len(top)} tier-{tier} HyperNodes hold {sum(top)} pods"), True


# --- the mutation ------------------------------------------------------------------

@dataclass
class _Notes:
    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _checked_tasks(job: dict, ref: str) -> list[dict]:
    """The tasks, after checking the types the policy reads; errors name the field."""
    meta = job.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise PolicyError(ref, "metadata", "must be an object")
    for key in ("labels", "annotations"):
        if not isinstance((meta or {}).get(key) or {}, dict):
            raise PolicyError(ref, f"metadata.{key}", "must be a map of strings")
    spec = job.get("spec")
    if not isinstance(spec, dict):
        raise PolicyError(ref, "spec", "required: a Volcano Job needs a spec")
    tasks = spec.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        raise PolicyError(ref, "spec.tasks", "required: a Volcano Job needs at least one task")
    _check_policies(spec.get("policies"), ref, "spec.policies")
    for i, task in enumerate(tasks):
        if not isinstance(task, dict):
            raise PolicyError(ref, f"spec.tasks[{i}]", "must be an object")
        replicas = task.get("replicas", 0)
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise PolicyError(ref, f"spec.tasks[{i}].replicas", f"must be an integer >= 0, got {replicas!r}")
        if task.get("name") is not None and not isinstance(task["name"], str):
            raise PolicyError(ref, f"spec.tasks[{i}].name", f"must be a string, got {task['name']!r}")
        _check_policies(task.get("policies"), ref, f"spec.tasks[{i}].policies")
        min_available = task.get("minAvailable")
        if min_available is not None and (isinstance(min_available, bool) or not isinstance(min_available, int)):
            raise PolicyError(ref, f"spec.tasks[{i}].minAvailable", f"must be an integer, got {min_available!r}")
        if task.get("partitionPolicy") is not None and not isinstance(task["partitionPolicy"], dict):
            raise PolicyError(ref, f"spec.tasks[{i}].partitionPolicy", "must be an object")
    return tasks


def _check_policies(policies: Any, ref: str, path: str) -> None:
    """Lifecycle policies are a list of objects whose event is a string, events a list of
    strings and exitCode an integer (the CRD's types)."""
    if policies is None:
        return
    if not isinstance(policies, list):
        raise PolicyError(ref, path, "must be a list")
    for j, policy in enumerate(policies):
        p = f"{path}[{j}]"
        if not isinstance(policy, dict):
            raise PolicyError(ref, p, "must be an object")
        if policy.get("event") is not None and not isinstance(policy["event"], str):
            raise PolicyError(ref, f"{p}.event", f"must be a string, got {policy['event']!r}")
        events = policy.get("events")
        if events is not None and not (isinstance(events, list) and all(isinstance(e, str) for e in events)):
            raise PolicyError(ref, f"{p}.events", f"must be a list of strings, got {events!r}")
        code = policy.get("exitCode")
        if code is not None and (isinstance(code, bool) or not isinstance(code, int)):
            raise PolicyError(ref, f"{p}.exitCode", f"must be an integer, got {code!r}")


def _write_task(draft: Draft, i: int, task: dict, size: int | None, settings: VolcanoSettings,
                notes: _Notes) -> dict:
    """Edit task ``i`` in the draft; returns the task as it ends."""
    name = task.get("name")
    new_task = task
    if task.get("partitionPolicy") is not None:
        notes.reasons.append(f"task {name}: keeps its own partitionPolicy")
        own = task["partitionPolicy"]
        ignored = unenforced_partition_tier_name(own, settings.version)
        if ignored:
            notes.warnings.append(f"task {name}: partitionPolicy.networkTopology.highestTierName {ignored!r} is not "
                                  f"enforced by Volcano {settings.version}'s scheduler (from v1.15.0); use "
                                  "highestTierAllowed")
        if isinstance(own, dict) and "minPartitions" not in own and task.get("minAvailable") is None:
            notes.warnings.append(f"task {name}: partitionPolicy without minPartitions: Volcano v1.14.0-v1.15.0 "
                                  "default the task's minAvailable to 0 and gang nothing (volcano issue 5401); "
                                  f"set minPartitions: {own.get('totalPartitions')}")
    elif size is not None:
        policy, why = partition_policy_for(task, size, settings)
        (notes.warnings if policy is None and task.get("replicas", 0) > size else notes.reasons).append(why)
        if policy is not None:
            new_task = dict(task, partitionPolicy=policy)
    if new_task.get("partitionPolicy") is not None and settings.restartPartitionEvents:
        own = list(new_task.get("policies") or [])
        added, warning = restart_partition_policies(own, settings.restartPartitionEvents)
        if warning:
            notes.warnings.append(f"task {name}: {warning}")
        if added:
            new_task = dict(new_task, policies=own + added)
            notes.reasons.append(f"task {name}: RestartPartition on {', '.join(p['event'] for p in added)}")
    if new_task is not task:
        tasks = draft.get(TASKS)
        if tasks is (draft.original.get("spec") or {}).get("tasks"):
            tasks = list(tasks)
            draft.set(TASKS, tasks)
        tasks[i] = new_task
    return new_task


JOB_POLICIES = ("spec", "policies")


def move_job_restart_partition(draft: Draft, tasks: list[dict], notes: _Notes) -> list[dict]:
    """Volcano's ValidatingAdmissionPolicy denies a job-level RestartPartition policy (Volcano v1.14.1's
    controller does restart the failed pod's partition from there when the VAP is off; without a
    partitioned task it does nothing): its events go to every partitioned task (as task-level
    RestartPartition policies, where the task does not handle them already) and the job-level entries
    are removed, with a warning. Returns the tasks as they end."""
    policies = draft.get(JOB_POLICIES)
    if not isinstance(policies, list):
        return tasks
    moved = [p for p in policies if isinstance(p, dict) and p.get("action") == RESTART_PARTITION]
    if not moved:
        return tasks
    events = tuple(dict.fromkeys(e for p in moved for e in policy_events(p)))
    kept = [p for p in policies if p not in moved]
    draft.set(JOB_POLICIES, kept) if kept else draft.delete(JOB_POLICIES)
    partitioned = [i for i, t in enumerate(tasks) if isinstance(t.get("partitionPolicy"), dict)]
    out = list(tasks)
    for i in partitioned:
        own = list(out[i].get("policies") or [])
        added, warning = restart_partition_policies(own, events)
        if warning:
            notes.warnings.append(f"task {out[i].get('name')}: {warning}")
        if added:
            out[i] = dict(out[i], policies=own + added)
            task_list = draft.get(TASKS)
            if task_list is (draft.original.get("spec") or {}).get("tasks"):
                task_list = list(task_list)
                draft.set(TASKS, task_list)
            task_list[i] = out[i]
    where = (f"to task {', '.join(str(out[i].get('name')) for i in partitioned)}" if partitioned
             else "away: no task is partitioned")
    effect = "denied by Volcano's VAP at job level" if partitioned else "no-op, denied by Volcano's VAP at job level"
    notes.warnings.append(f"moved job-level RestartPartition ({', '.join(events)}) {where}: {effect}")
    return out


def _feasibility(tasks: list[dict], config: Config, facts: ClusterFacts, notes: _Notes) -> None:
    """With Nodes in the input: does each partition fit (see :func:`partition_feasibility`),
    and does a hard ``highestTierName`` name a tier that exists (one that does not is
    silently not enforced by the scheduler)? HyperNodes are discovered once for both."""
    partitioned = [t for t in tasks if isinstance(t.get("partitionPolicy"), dict)]
    if not partitioned or not facts.nodes:
        return
    if not any(s.source == "label" and s.enabled for s in config.volcano.networkTopologyDiscovery):
        notes.reasons.append("feasibility not checked: no enabled label source in volcano.networkTopologyDiscovery")
        return
    hypernodes = discover_hypernodes(facts.nodes, config.volcano.networkTopologyDiscovery)
    tier_names = {h["spec"]["tierName"] for h in hypernodes}
    for task in partitioned:
        topo = task["partitionPolicy"].get("networkTopology") or {}
        name = topo.get("highestTierName") if isinstance(topo, dict) else None
        if name and topo.get("mode", "hard") == "hard" and name not in tier_names:
            notes.warnings.append(f"task {task.get('name')}: highestTierName {name!r} matches no HyperNode tierName; "
                                  "the scheduler will not enforce it")
        if unenforced_partition_tier_name(task["partitionPolicy"], config.volcano.version):
            notes.reasons.append(f"task {task.get('name')}: feasibility not checked: Volcano "
                                 f"{config.volcano.version} places its partitions without a HyperNode bound")
            continue
        message, ok = partition_feasibility(task, hypernodes, facts.nodes)
        (notes.reasons if ok else notes.warnings).append(message)


def mutate_volcano_job(obj: dict, config: Config | None = None, *, old: dict | None = None,
                       facts: ClusterFacts | None = None, namespace: str | None = None) -> Result:
    """Apply seed 001 to a ``batch.volcano.sh/v1alpha1`` Job on CREATE; UPDATE gets no patch."""
    config = load_config(config)
    facts = facts or NO_FACTS
    ref = object_ref(obj, namespace or namespace_of(obj))
    if is_opted_out(obj):
        return Result(obj, reasons=[f"skipped: {SKIP_KEY}=true"])
    tasks = _checked_tasks(obj, ref)
    if old is not None:
        return Result(obj, reasons=["UPDATE: Volcano rejects changes to policies and partitionPolicy; not mutated"])
    notes = _Notes()
    before = validate_volcano_job(obj, config.volcano.version)
    notes.reasons += [f"as submitted: {e}" for e in before]
    size = partition_size_for(obj, config.volcano, ref)
    job_topology = obj["spec"].get("networkTopology")
    if size is not None and isinstance(job_topology, dict) and job_topology.get("mode") == "soft":
        notes.warnings.append("the job's networkTopology is soft, which a partition policy does not support "
                              "(seed 001 \"Constraints\"): no partitionPolicy added")
        size = None
    draft = Draft(obj)
    final = [_write_task(draft, i, t, size, config.volcano, notes) for i, t in enumerate(tasks)]
    final = move_job_restart_partition(draft, final, notes)
    owned = [TASKS + (i, key) for i in range(len(tasks)) for key in ("partitionPolicy", "policies")] + [JOB_POLICIES]
    patch = diff_owned(obj, draft.root, owned)
    result_obj = draft.root if patch else obj
    introduced = [e for e in validate_volcano_job(result_obj, config.volcano.version) if e not in before]
    if introduced:  # never emit a Job Volcano's webhook would reject because of us
        return Result(obj, [], notes.reasons + [f"not mutated: the change would break {e}" for e in introduced],
                      notes.warnings)
    _feasibility(final, config, facts, notes)
    return Result(result_obj, patch, notes.reasons, notes.warnings)


def mutate_other_volcano_kind(obj: dict) -> Result:
    """Seed 001 "Constraints": HyperJob workloads ignore network topology. Other
    Volcano kinds (PodGroups, Queues) come back unchanged without comment."""
    if obj.get("kind") != "HyperJob":
        return Result(obj)
    if _contains_key(obj.get("spec"), "networkTopology") or _contains_key(obj.get("spec"), "partitionPolicy"):
        return Result(obj, warnings=[f"{obj.get('kind')} workloads ignore networkTopology and partition "
                                     "policies: they will not take effect"])
    return Result(obj)
