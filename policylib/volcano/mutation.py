"""The Volcano Job policy: partitions with network topology, and RestartPartition (rules V13-V19).

Pod rescheduling by partition has a job restart a whole
partition when one of its pods is evicted or fails, so that the partition is
rescheduled together inside one HyperNode. This policy writes, on CREATE:

- a task ``partitionPolicy`` (``totalPartitions``, ``partitionSize``,
  ``minPartitions``, ``networkTopology``) when the configured partition size
  divides the task's replicas;
- task-level ``{event: E, action: RestartPartition}`` for each configured
  event the task does not already handle, on every task with a partitionPolicy.

Volcano's Job webhook rejects any change to ``policies`` or
``partitionPolicy`` on UPDATE, so UPDATE gets no patch, except one that re-applies the
manifest the stored Job came from: it gets the CREATE treatment back (rule V17). A job-level
RestartPartition policy is moved to the partitioned tasks (Volcano's
ValidatingAdmissionPolicy denies it at job level; where the VAP is off it acts
there as on a task, and without a partitioned task it does nothing); other
job-level policies are never touched.
"""
from __future__ import annotations

from typing import Any

from ..config import Config, VolcanoSettings
from ..errors import FieldPath, PolicyError, errors_not_in, invalid, raise_if_any
from ..facts import ClusterFacts
from ..limits import VOLCANO_ENTRIES, budget
from ..patch import Draft, diff_owned
from ..request import admission
from ..result import DOMAIN, Outcome, Result
from ..volcano_api.admission import validate_volcano_job
from ..volcano_api.partitions import unenforced_partition_tier_name, validate_partition_topology_mode
from ..volcano_api.policies import RESTART_PARTITION, policy_events
from ..volcano_api.shape import validate_volcano_job_shape
from .topology import (
    UNWRITTEN_TOPOLOGY,
    feasibility_notes,
    partitions_without_topology_schedule,
    written_topology,
)

#: Per-job override of ``volcano.partitionSize``: a whole number, or ``none`` to add no partitionPolicy.
PARTITION_SIZE_ANNOTATION = f"{DOMAIN}/partition-size"
TASKS = ("spec", "tasks")


def _contains_key(node: Any, key: str) -> bool:
    if isinstance(node, dict):
        return key in node or any(_contains_key(v, key) for v in node.values())
    if isinstance(node, list):
        return any(_contains_key(v, key) for v in node)
    return False


# --- decisions -------------------------------------------------------------------

def partition_size_for(job: dict[str, Any], settings: VolcanoSettings, ref: str) -> int | None:
    """Rule V14: the partition size for this job: the annotation override, else the setting."""
    meta = job.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    annotations = annotations if isinstance(annotations, dict) else {}
    if PARTITION_SIZE_ANNOTATION not in annotations:
        return settings.partitionSize
    raw = str(annotations[PARTITION_SIZE_ANNOTATION]).strip()
    if raw.lower() == "none":
        return None
    if not (raw.isascii() and raw.isdigit()) or int(raw) < 1:
        raise PolicyError.from_errors(ref, [invalid(FieldPath("metadata", "annotations").key(PARTITION_SIZE_ANNOTATION),
                                                    annotations[PARTITION_SIZE_ANNOTATION],
                                                    "must be a whole number >= 1 or 'none'")])
    return int(raw)


def partition_policy_for(task: dict[str, Any], size: int, settings: VolcanoSettings) -> tuple[dict[str, Any] | None, str]:
    """Rule V13: the partitionPolicy to add to a task without one, or None and why not.

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
    policy: dict[str, Any] = {"totalPartitions": total, "partitionSize": size, "minPartitions": min_partitions}
    if settings.networkTopology is not None:
        policy["networkTopology"] = settings.networkTopology.as_spec()
    return policy, f"task {name}: {total} partitions of {size} pods (minPartitions {min_partitions})"


def handled_events(policies: list[Any]) -> set[str]:
    """Events a task's own policies already handle (``event`` and ``events`` merged)."""
    return {e for p in policies if isinstance(p, dict) for e in policy_events(p)}


def restart_partition_policies(policies: list[Any], events: tuple[str, ...]) -> tuple[list[dict[str, Any]], str | None]:
    """Rule V15: the RestartPartition policies to append, and a warning when one cannot be added.

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


# --- the mutation ------------------------------------------------------------------

def _checked_tasks(job: dict[str, Any], ref: str, update: bool = False) -> list[dict[str, Any]]:
    """The tasks, after :func:`~policylib.volcano_api.shape.validate_volcano_job_shape` found nothing (with an
    UPDATE's budget when ``update``: rule P7)."""
    raise_if_any(ref, validate_volcano_job_shape(job, budget(VOLCANO_ENTRIES, update)))
    tasks: list[dict[str, Any]] = job["spec"]["tasks"]
    return tasks


def checked_old_job(old: Any, ref: str) -> None:
    """Rule V24: the old object of an UPDATE (the stored Job) is checked as the Job is (rule V1, with the UPDATE's
    budget of rule P7): the update rule (V17) reads its policies and tasks too; its errors are named under
    ``oldObject``."""
    if not isinstance(old, dict):
        raise_if_any(ref, [invalid("oldObject", old, "must be an object")])
    raise_if_any(ref, [e.under("oldObject") for e in validate_volcano_job_shape(old, budget(VOLCANO_ENTRIES, True))])


def _write_task(draft: Draft, i: int, task: dict[str, Any], size: int | None, settings: VolcanoSettings,
                notes: Outcome) -> dict[str, Any]:
    """Edit task ``i`` in the draft; returns the task as it ends."""
    name = task.get("name")
    new_task = task
    if task.get("partitionPolicy") is not None:
        notes.reason(f"task {name}: keeps its own partitionPolicy")
        own = task["partitionPolicy"]
        ignored = unenforced_partition_tier_name(own, settings.version)
        if ignored:
            notes.warn(f"task {name}: partitionPolicy.networkTopology.highestTierName {ignored!r} is not "
                                  f"enforced by Volcano {settings.version}'s scheduler (from v1.15.0); use "
                                  "highestTierAllowed")
        if isinstance(own, dict) and "minPartitions" not in own and task.get("minAvailable") is None:
            notes.warn(f"task {name}: partitionPolicy without minPartitions: Volcano v1.14.0-v1.15.0 "
                                  "default the task's minAvailable to 0 and gang nothing (volcano issue 5401); "
                                  f"set minPartitions: {own.get('totalPartitions')}")
    elif size is not None:
        policy, why = partition_policy_for(task, size, settings)
        notes.note(why, ok=policy is not None or task.get("replicas", 0) <= size)
        if policy is not None:
            new_task = dict(task, partitionPolicy=policy)
    if new_task.get("partitionPolicy") is not None and settings.restartPartitionEvents:
        own = list(new_task.get("policies") or [])
        added, warning = restart_partition_policies(own, settings.restartPartitionEvents)
        if warning:
            notes.warn(f"task {name}: {warning}")
        if added:
            new_task = dict(new_task, policies=own + added)
            notes.reason(f"task {name}: RestartPartition on {', '.join(p['event'] for p in added)}")
    if new_task is not task:
        tasks: list[dict[str, Any]] = draft.get(TASKS)
        if tasks is (draft.original.get("spec") or {}).get("tasks"):
            tasks = list(tasks)
            draft.set(TASKS, tasks)
        tasks[i] = new_task
    return new_task


JOB_POLICIES = ("spec", "policies")


def _restarts_partition(policy: Any) -> bool:
    return isinstance(policy, dict) and policy.get("action") == RESTART_PARTITION


def move_job_restart_partition(draft: Draft, tasks: list[dict[str, Any]], notes: Outcome) -> list[dict[str, Any]]:
    """Rule V16: Volcano's ValidatingAdmissionPolicy denies a job-level RestartPartition policy (Volcano
    v1.14.1's controller does restart the failed pod's partition from there when the VAP is off; without
    a partitioned task it does nothing): its events go to every partitioned task (as task-level
    RestartPartition policies, where the task does not handle them already) and the job-level entries
    are removed, with a warning. Returns the tasks as they end."""
    policies = draft.get(JOB_POLICIES)
    if not isinstance(policies, list):
        return tasks
    moved = [p for p in policies if _restarts_partition(p)]
    if not moved:
        return tasks
    events = tuple(dict.fromkeys(e for p in moved for e in policy_events(p)))
    kept = [p for p in policies if not _restarts_partition(p)]
    draft.set(JOB_POLICIES, kept) if kept else draft.delete(JOB_POLICIES)
    partitioned = [i for i, t in enumerate(tasks) if isinstance(t.get("partitionPolicy"), dict)]
    out = list(tasks)
    received = []
    for i in partitioned:
        own = list(out[i].get("policies") or [])
        added, warning = restart_partition_policies(own, events)
        if warning:
            notes.warn(f"task {out[i].get('name')}: {warning}")
        if added:
            received.append(i)
            out[i] = dict(out[i], policies=own + added)
            task_list: list[dict[str, Any]] = draft.get(TASKS)
            if task_list is (draft.original.get("spec") or {}).get("tasks"):
                task_list = list(task_list)
                draft.set(TASKS, task_list)
            task_list[i] = out[i]
    where = (f"to task {', '.join(str(out[i].get('name')) for i in received)}" if received
             else "away: the partitioned tasks handle these events already" if partitioned
             else "away: no task is partitioned")
    effect = "denied by Volcano's VAP at job level" if partitioned else "no-op, denied by Volcano's VAP at job level"
    notes.warn(f"moved job-level RestartPartition ({', '.join(events)}) {where}: {effect}")
    return out


def _partition_settings(tasks: list[dict[str, Any]], size: int | None, settings: VolcanoSettings,
                        facts: ClusterFacts, notes: Outcome) -> tuple[VolcanoSettings, int | None]:
    """Rule V25: the settings and partition size the tasks are written with: without HyperNodes no hard network
    topology (a warning naming the setting, when a task would be partitioned), and before Volcano v1.14.1 no
    partitionPolicy at all then."""
    if size is None:
        return settings, size
    written, unwritten = written_topology(settings, facts)
    if not unwritten or not any(t.get("partitionPolicy") is None and partition_policy_for(t, size, written)[0]
                                is not None for t in tasks):
        return written, size
    if not partitions_without_topology_schedule(settings.version):
        notes.warn(f"no partitionPolicy on Volcano {settings.version} without HyperNodes: enable a label source in "
                   "volcano.networkTopologyDiscovery")
        notes.reason(f"Volcano {settings.version} never schedules a partitioned task without a network topology "
                     f"(volcano issue 4871, fixed in v1.14.1), and {unwritten}")
        return written, None
    notes.warn(UNWRITTEN_TOPOLOGY)
    notes.reason(unwritten)
    return written, size


def mutate_volcano_job(obj: dict[str, Any], config: Config | None = None, *, old: dict[str, Any] | None = None,
                       facts: ClusterFacts | None = None, namespace: str | None = None) -> Result:
    """Apply the partition rules (V13-V17) to a ``batch.volcano.sh/v1alpha1`` Job on CREATE; UPDATE
    gets no patch unless it re-applies the stored Job's manifest (V17)."""
    req, skipped = admission(obj, config, old, facts, namespace)
    if skipped:
        return skipped
    config = req.config
    tasks = _checked_tasks(obj, req.ref, old is not None)
    if old is not None:
        checked_old_job(old, req.ref)
        return reapplied_job(obj, old, req.config, req.facts, req.namespace)
    notes = Outcome()
    before = validate_volcano_job(obj, config.volcano.version)
    notes.reason(*(f"as submitted: {e}" for e in before))
    size = partition_size_for(obj, config.volcano, req.ref)
    if size is not None and validate_partition_topology_mode(obj["spec"].get("networkTopology"), "spec.networkTopology"):
        notes.warn("the job's networkTopology is soft, which a partition policy does not support "
                   "(rule V5): no partitionPolicy added")
        size = None
    if size is None and config.volcano.partitionSize is None:
        notes.reason("no partitionPolicy: volcano.partitionSize is not set (nor the job's "
                     f"{PARTITION_SIZE_ANNOTATION} annotation)")
    elif size is None and not notes.warnings:
        notes.reason(f"no partitionPolicy: the job's {PARTITION_SIZE_ANNOTATION} annotation says none")
    settings, size = _partition_settings(tasks, size, config.volcano, req.facts, notes)
    draft = Draft(obj)
    final = [_write_task(draft, i, t, size, settings, notes) for i, t in enumerate(tasks)]
    final = move_job_restart_partition(draft, final, notes)
    owned: list[tuple[str | int, ...]] = [TASKS + (i, key) for i in range(len(tasks))
                                          for key in ("partitionPolicy", "policies")]
    owned.append(JOB_POLICIES)
    patch = diff_owned(obj, draft.root, owned)
    result_obj = draft.root if patch else obj
    introduced = errors_not_in(validate_volcano_job(result_obj, config.volcano.version), before)
    if introduced:  # never emit a Job Volcano's webhook would reject because of us
        notes.reason(*(f"not mutated: the change would break {e}" for e in introduced))
        notes.warnings = [w for w in notes.warnings if not w.startswith("moved ")]   # not applied: not reported
        return notes.result(obj)
    feasibility_notes(final, config, req.facts, notes)
    return notes.result(result_obj, patch)


def policy_fields(job: dict[str, Any]) -> tuple[Any, list[tuple[Any, Any, Any]]]:
    """The fields this policy writes on a Job: the job-level policies, and per task its name,
    partitionPolicy and policies."""
    spec = job.get("spec") or {}
    tasks = spec.get("tasks")
    if not isinstance(tasks, list):
        tasks = []
    return spec.get("policies"), [(t.get("name"), t.get("partitionPolicy"), t.get("policies")) if isinstance(t, dict)
                                  else (None, None, None) for t in tasks]


def reapplied_job(obj: dict[str, Any], old: dict[str, Any], config: Config, facts: ClusterFacts,
                  namespace: str) -> Result:
    """Rule V17: an UPDATE is patched only when it re-applies the manifest the stored Job came from.

    ``kubectl apply`` of a custom resource replaces a changed list whole (a JSON merge patch): the
    manifest's tasks come back without the partitionPolicy and RestartPartition policies written on
    CREATE, and its job-level RestartPartition comes back; ``kubectl replace`` and server-side apply
    send the manifest itself. When the CREATE treatment of the incoming Job gives exactly the stored
    Job's policies and partitionPolicy, that treatment is the patch, so the stored Job is unchanged
    (Volcano's webhook rejects any change to those fields on UPDATE). Any other UPDATE is never
    patched: a change to those fields is the user's, for Volcano to judge."""
    kept = Result(obj, reasons=["UPDATE: Volcano rejects changes to policies and partitionPolicy; not mutated"])
    if policy_fields(obj) == policy_fields(old):
        return kept
    try:
        created = mutate_volcano_job(obj, config, facts=facts, namespace=namespace)
    except PolicyError:
        return kept
    if not created.patch or policy_fields(created.object) != policy_fields(old):
        return kept
    reason = ("UPDATE re-applies what CREATE wrote (policies, partitionPolicy): written again as on CREATE, "
              "the stored Job is unchanged")
    return Result(created.object, created.patch, [reason, *created.reasons], created.warnings)


def mutate_other_volcano_kind(obj: dict[str, Any]) -> Result:
    """Rule V19: HyperJob workloads ignore network topology. Other
    Volcano kinds (PodGroups, Queues) come back unchanged without comment."""
    if obj.get("kind") != "HyperJob":
        return Result(obj)
    if _contains_key(obj.get("spec"), "networkTopology") or _contains_key(obj.get("spec"), "partitionPolicy"):
        return Result(obj, warnings=[f"{obj.get('kind')} workloads ignore networkTopology and partition "
                                     "policies: they will not take effect"])
    return Result(obj)
