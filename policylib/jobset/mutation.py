"""The JobSet policy: write, keep or leave the gang metadata of a JobSet's pod templates (rules J1-J6)."""
from __future__ import annotations

import copy
from typing import Any

from ..config import Config
from ..errors import FieldError, raise_if_any
from ..facts import ClusterFacts
from ..gang import (
    GangCase,
    GangPlan,
    build_podgroups,
    describe_plan,
    desired_metadata,
    has_gang,
    is_gang_key,
    leave_existing,
    metadata_errors,
    notes_on_job,
    priority_violation,
    validate_gang_labels,
)
from ..gang.job import GENERATE_NAME_WARNING, named_by_generate_name_only
from ..gang.topology import TopologyLevel, gang_words, jobset_topology
from ..gang.workload import native_gang, native_notes, other_scheduler_warning, workload_objects
from ..patch import Draft, OwnedPath, diff_owned
from ..request import admission
from ..result import Outcome, Result
from .keys import EXCLUSIVE_TOPOLOGY, trainjob_owner
from .read import REPLICATED_JOBS, JobSet, plan_jobset_gangs, read_jobset, template_path

#: Each ReplicatedJob's gang labels and annotations, by its name.
Current = dict[str, tuple[dict[str, Any], dict[str, Any]]]


def _pod_meta(rjob: Any) -> dict[str, Any]:
    template = (((rjob.get("template") or {}).get("spec") or {}).get("template") or {}) if isinstance(rjob, dict) else {}
    meta = template.get("metadata") if isinstance(template, dict) else None
    return meta if isinstance(meta, dict) else {}


def current_gang_keys(obj: dict[str, Any]) -> Current:
    """The gang keys (:func:`~policylib.gang.is_gang_key`) on each ReplicatedJob's pod template."""
    out: Current = {}
    for rjob in (obj.get("spec") or {}).get("replicatedJobs") or []:
        if isinstance(rjob, dict) and isinstance(rjob.get("name"), str):
            meta = _pod_meta(rjob)
            labels, annotations = ({k: v for k, v in (meta.get(part) or {}).items() if is_gang_key(k)}
                                   for part in ("labels", "annotations"))
            out[rjob["name"]] = (labels, annotations)
    return out


def exclusive_annotations(obj: dict[str, Any]) -> dict[str, str]:
    """Where the JobSet already carries :data:`EXCLUSIVE_TOPOLOGY` (``metadata`` or a ReplicatedJob's Job
    template), and its value there."""
    found = {}
    meta = obj.get("metadata") or {}
    if isinstance(meta.get("annotations"), dict) and EXCLUSIVE_TOPOLOGY in meta["annotations"]:
        found["metadata.annotations"] = str(meta["annotations"][EXCLUSIVE_TOPOLOGY])
    for i, rjob in enumerate((obj.get("spec") or {}).get("replicatedJobs") or []):
        job_meta = (rjob.get("template") or {}).get("metadata") if isinstance(rjob, dict) else None
        annotations = job_meta.get("annotations") if isinstance(job_meta, dict) else None
        if isinstance(annotations, dict) and EXCLUSIVE_TOPOLOGY in annotations:
            found[f"spec.replicatedJobs[{i}].template.metadata.annotations"] = str(annotations[EXCLUSIVE_TOPOLOGY])
    return found


def deadlocks(jobset: JobSet, plan: GangPlan | None) -> list[str]:
    """Rule J5: the ReplicatedJobs whose Jobs would deadlock under exclusive placement and a gang: JobSet's pod
    webhook refuses to create a Job's other pods until its index-0 pod is bound, and the gang binds none of them
    until every pod of the gang exists. Empty when every Job of a gang has one pod, or there is no gang."""
    if plan is None:
        return []
    ganged = {t for g in plan.gangs for t in g.replica_types}
    return [f"{j.name} ({j.pods_per_job} pods per Job)" for j in jobset.jobs if j.name in ganged and j.pods_per_job > 1]


def exclusive_decision(obj: dict[str, Any], jobset: JobSet, plan: GangPlan | None, level: TopologyLevel | None,
                       out: Outcome) -> str | None:
    """Rule J5: the exclusive-topology value to write on the JobSet's ``metadata.annotations``, or None: written
    only for ``gang.jobSetExclusiveTopology`` (or ``topology.jobSets.jobPerDomain``) and only where it cannot
    deadlock the gang (:func:`deadlocks`); a JobSet that carries the annotation already keeps its own (a warning
    when that deadlocks, and, rule N8, when it names another level than the configuration)."""
    existing = exclusive_annotations(obj)
    blocked = deadlocks(jobset, plan)
    if existing:
        where = ", ".join(f"{k} ({v})" for k, v in existing.items())
        out.reason(f"{EXCLUSIVE_TOPOLOGY} is set already at {where}: left as it is")
        if blocked:
            out.warn(f"{EXCLUSIVE_TOPOLOGY} with a gang deadlocks the Jobs of {', '.join(blocked)}: JobSet's pod "
                     "webhook creates a Job's other pods only once its first pod is bound, and the gang binds none "
                     "until all exist (remove the annotation, or run one pod per Job)")
        other = sorted({v for v in existing.values() if level is not None and v != level.key})
        if other and level is not None:   # rule N8: the user's own value is kept
            out.warn(f"{EXCLUSIVE_TOPOLOGY} is kept as the JobSet sets it ({', '.join(other)}); {level.setting} "
                     f"says {level.key}")
        return None
    if level is None:
        return None
    if blocked:
        out.warn(f"{level.setting} {level.key}: not written: the Jobs of {', '.join(blocked)} would "
                 "deadlock (JobSet's pod webhook creates a Job's other pods only once its first pod is bound, and "
                 "the gang binds none until all exist); it is written only where every Job of a gang has one pod")
        return None
    out.reason(f"metadata.annotations {EXCLUSIVE_TOPOLOGY}: {level.key}: each Job alone in one {level.key} domain "
               f"({level.why}; enforced by JobSet's pod webhooks)")
    return level.key


def kept_on_update(old: dict[str, Any], current: Current) -> Current:
    """Rule J4: on UPDATE the pod templates' gang keys are the stored ones (JobSet's validation refuses a change
    to a running JobSet's ReplicatedJobs): a ReplicatedJob the stored JobSet has keeps its stored keys; any other
    keeps what it carries."""
    stored = current_gang_keys(old)
    return {name: stored.get(name, have) for name, have in current.items()}


def emitted_errors(jobset: JobSet, desired: Current, extra: list[dict[str, Any]]) -> list[FieldError]:
    """Everything written is valid by construction (rule G8): its labels, annotations and gang names, and the
    PodGroups'."""
    errs: list[FieldError] = []
    for j in jobset.jobs:
        labels, annotations = desired.get(j.name, ({}, {}))
        errs += metadata_errors({"labels": labels, "annotations": annotations}, template_path(j.index).child("metadata"))
    for pg in extra:
        errs += [e.under(f"{pg['kind']} {pg['metadata']['name']}") for e in validate_gang_labels(pg)]
    return errs


def write(obj: dict[str, Any], jobset: JobSet, current: Current, desired: Current,
          exclusive: str | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The JobSet with each pod template's gang keys exactly ``desired`` (other keys keep their place, new ones go
    at the end) and the exclusive annotation; and the patch (rule P3)."""
    draft = Draft(obj)
    owned: list[OwnedPath] = []
    rjobs = list(obj["spec"]["replicatedJobs"])
    changed = False
    for j in jobset.jobs:
        meta_path: OwnedPath = (*REPLICATED_JOBS, j.index, "template", "spec", "template", "metadata")
        owned.append(meta_path)
        if current.get(j.name) == desired.get(j.name, ({}, {})):
            continue
        rjob = copy.deepcopy(rjobs[j.index])
        pod = rjob["template"]["spec"]["template"]
        if not isinstance(pod.get("metadata"), dict):
            pod["metadata"] = {}
        meta = pod["metadata"]
        for i, part in enumerate(("labels", "annotations")):
            have, want = current[j.name][i], desired.get(j.name, ({}, {}))[i]
            if have == want:
                continue
            target = dict(meta.get(part) or {})
            for k in have:
                if k not in want:
                    target.pop(k)
            target.update(want)
            if target:
                meta[part] = target
            else:
                meta.pop(part, None)
        rjobs[j.index] = rjob
        changed = True
    if changed:
        draft.set(REPLICATED_JOBS, rjobs)
    if exclusive is not None:
        draft.dict_at(("metadata", "annotations"))[EXCLUSIVE_TOPOLOGY] = exclusive
        owned.append(("metadata", "annotations"))
    patch = diff_owned(obj, draft.root, owned)
    return (draft.root if patch else obj), patch


def waves_reason(jobset: JobSet, plan: GangPlan | None) -> str:
    """Rule J1: the start waves, their pods and the gang each makes."""
    gang_of = {t: g.name for g in (plan.gangs if plan else ()) for t in g.replica_types}
    parts = []
    for n, wave in enumerate(jobset.waves(), 1):
        pods = sum(j.pods for j in wave)
        gang = next((gang_of[j.name] for j in wave if j.name in gang_of), None)
        parts.append(f"{n}: {', '.join(j.name for j in wave)} ({pods} pod{'s' if pods != 1 else ''}, "
                     f"{'gang ' + gang if gang else 'no gang'})")
    if jobset.in_order:
        how = "startupPolicy InOrder"
    elif any(j.depends_on for j in jobset.jobs):
        how = "dependsOn"
    else:
        how = "no dependsOn: all start together"
    return f"start waves ({how}): {'; '.join(parts)}"


def mutate_jobset(obj: dict[str, Any], config: Config | None = None, *, old: dict[str, Any] | None = None,
                  namespace: str | None = None, facts: ClusterFacts | None = None) -> Result:
    """Rules J1-J6: the gang of each start wave of a ``jobset.x-k8s.io/v1alpha2`` JobSet written on its
    ReplicatedJobs' pod templates in the keys of ``gang.method`` and ``gang.scheduler`` (rule G4), with the
    PodGroups (method podgroup, rule G5) or the Workload and PodGroup (method workload, rules G18, G22) in
    ``Result.extra_objects``; ``gang.jobSetExclusiveTopology`` as JobSet's exclusive-topology annotation where it
    cannot deadlock (rule J5). On UPDATE the stored gang keys are kept (rule J4). A JobSet that a TrainJob controls
    is left alone (rule J6)."""
    req, skipped = admission(obj, config, old, facts, namespace)
    if skipped:
        return skipped
    settings, out = req.config.gang, Outcome()
    owner = trainjob_owner(obj)
    if owner is not None:
        out.reason(f"controlled by TrainJob {owner}: its pods are the TrainJob's gang, written on the TrainJob "
                   "(rule J6): left unchanged")
        return out.result(obj)
    if named_by_generate_name_only(obj):
        out.warn(GENERATE_NAME_WARNING.format(what="JobSet"))
        return out.result(obj)
    jobset = read_jobset(obj, req.namespace)
    plan = plan_jobset_gangs(jobset)
    out.reason(waves_reason(jobset, plan))
    if settings.groupByRole and plan is not None:
        out.reason("gang.groupByRole is for Kubeflow jobs' replica types: a JobSet's gangs are its start waves")
    job = jobset.gang_view()
    current = current_gang_keys(obj)
    desired: Current = desired_metadata(job, plan, settings) if plan else {j.name: ({}, {}) for j in jobset.jobs}
    native = native_gang(req.config, facts) if plan else None
    level = jobset_topology(req.config)
    if old is not None and isinstance(old.get("spec"), dict):
        kept = kept_on_update(old, current)
        if kept != desired:
            out.reason("UPDATE: JobSet's validation refuses changes to a running JobSet's ReplicatedJobs, so the "
                       "pod templates keep the gang metadata stored (rule J4)")
        desired = kept
        stored = exclusive_annotations(old).get("metadata.annotations")
        exclusive = stored if stored is not None and "metadata.annotations" not in exclusive_annotations(obj) else None
    elif plan is not None and has_gang(current) and current != desired:
        return leave_existing(GangCase(obj, job, plan, current, settings, req.ref, out, native))
    else:
        exclusive = exclusive_decision(obj, jobset, plan, level, out)
    extra: list[dict[str, Any]] = []
    if plan is None:
        out.reason("no start wave has more than one pod: nothing to gang")
    elif desired == desired_metadata(job, plan, settings):
        violation = priority_violation(job, plan)
        if violation and current != desired:
            out.violation(violation, settings.onViolation == "deny")
            desired = {j.name: ({}, {}) for j in jobset.jobs}
        else:
            notes_on_job(job, obj, settings, out)
            elsewhere = other_scheduler_warning(obj, settings, {t.scheduler_name for t in job.types if t.scheduler_name})
            if elsewhere:
                out.warn(elsewhere)
            words = gang_words(req.config)
            extra = build_podgroups(job, plan, settings, words.network_topology) + workload_objects(job, plan, native)
            out.reason(("gang metadata up to date: " if current == desired else "") + describe_plan(plan, settings))
            native_notes(native, out)
            out.reason(*words.reasons)
    # what policylib writes is checked (rule G8); keys kept as stored (rule J4) the API server has judged already
    raise_if_any(req.ref, emitted_errors(jobset, {} if old is not None else desired, extra))
    mutated, patch = write(obj, jobset, current, desired, exclusive)
    return out.result(mutated, patch, extra)
