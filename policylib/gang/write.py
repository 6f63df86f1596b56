"""Writing a job's gang metadata, or leaving the metadata a job already carries."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config import GangSettings
from ..patch import Draft, diff_owned
from ..result import Outcome, Result
from .existing import existing_metadata_findings
from .gangs import GangPlan
from .job import KubeflowJob
from .metadata import check_emitted, desired_metadata
from .podgroup import build_podgroups
from .priority import and_list, priority_violation
from .topology import GangWords
from .workload import NativeGang, native_notes, other_scheduler_warning, workload_objects


@dataclass(frozen=True)
class GangCase:
    """One job under admission: the object, what was read from it, its planned gangs, the gang
    metadata its templates carry now, the settings, and the notes gathered so far."""

    obj: dict[str, Any]
    job: KubeflowJob
    plan: GangPlan
    current: dict[str, Any]
    settings: GangSettings
    ref: str
    out: Outcome
    #: Method workload (rules G22, G25): the Workload API version and topology level; None for other methods.
    native: NativeGang | None = None
    #: Rules N4, N5: the gang placement in the gang scheduler's words, and why.
    words: GangWords = GangWords()

    @property
    def deny(self) -> bool:
        return self.settings.onViolation == "deny"


def describe_plan(plan: GangPlan, settings: GangSettings) -> str:
    gangs = ", ".join(f"{g.name} (min-available {g.min_available} of {g.total} pods: {and_list(list(g.replica_types))})"
                      for g in plan.gangs)
    what = "gang group" if plan.groups else "gang"
    return f"method {settings.method}, scheduler {settings.scheduler}: {what} {gangs}"


def notes_on_job(job: KubeflowJob, obj: dict[str, Any], settings: GangSettings, out: Outcome) -> None:
    if job.min_available is not None and job.min_available > job.total and not settings.groupByRole:
        out.warn(f"runPolicy.schedulingPolicy.minAvailable {job.min_available} exceeds the "
                            f"{job.total} pods the job creates: the gang can never be satisfied")
    if job.min_available is not None and settings.groupByRole:
        out.warn(f"runPolicy.schedulingPolicy.minAvailable {job.min_available} is a job-wide minimum "
                            "and is not used with gang.groupByRole: each role's gang needs all its replicas")
    if settings.method == "podgroup" and settings.scheduler == "volcano":
        out.warn(*volcano_scheduler_warnings(job))
    if job.kind == "PyTorchJob" and (obj.get("spec") or {}).get("elasticPolicy") and job.min_available is None:
        out.reason("elastic PyTorchJob: the gang needs every current replica; set "
                           "runPolicy.schedulingPolicy.minAvailable to let it start with fewer")


def volcano_scheduler_warnings(job: KubeflowJob) -> list[str]:
    """Rule G21: Volcano schedules (and gangs) only pods whose ``schedulerName`` is ``volcano``; a template
    scheduled by another scheduler gets the annotation all the same, and a warning."""
    others = [f"{t.key} ({t.scheduler_name or 'default-scheduler'})" for t in job.types
              if t.replicas > 0 and t.scheduler_name != "volcano"]
    if not others:
        return []
    return [f"gang.scheduler volcano: the pods of {and_list(others)} are not scheduled by 'volcano', which alone "
            "reads the Volcano PodGroup: they are not held as one gang (set spec.schedulerName: volcano in "
            "their templates)"]


def owned_paths(job: KubeflowJob) -> list[tuple[str, ...]]:
    return [job.template_path(t.key) + ("metadata",) for t in job.types]


def apply_metadata(draft: Draft, job: KubeflowJob, current: dict[str, Any], desired: dict[str, Any]) -> None:
    """Make each template's gang keys exactly ``desired``: drop stale ones, set the rest.

    Other labels and annotations keep their place; new keys go at the end.
    """
    for t in job.types:
        meta_path = job.template_path(t.key) + ("metadata",)
        for i, part in enumerate(("labels", "annotations")):
            have, want = current[t.key][i], desired[t.key][i]
            if have == want:
                continue
            target = draft.dict_at(meta_path + (part,))
            for k in have:
                if k not in want:
                    target.pop(k)
            for k, v in want.items():
                if target.get(k) != v:
                    target[k] = v
            if not target:
                draft.delete(meta_path + (part,))


def write_gang(case: GangCase) -> Result:
    """Rules G1-G6, G9: write the planned gang metadata on every template (none on a priority
    violation), and the PodGroups beside the job."""
    obj, job, plan, settings, out = case.obj, case.job, case.plan, case.settings, case.out
    notes_on_job(job, obj, settings, out)
    elsewhere = other_scheduler_warning(obj, settings)
    if elsewhere:
        out.warn(elsewhere)
    violation = priority_violation(job, plan)
    desired = desired_metadata(job, plan, settings)
    podgroups = []
    if violation:
        out.violation(violation, case.deny)
        desired = {k: ({}, {}) for k in desired}
    else:
        podgroups = build_podgroups(job, plan, settings, case.words.network_topology) + \
            workload_objects(job, plan, case.native)
        out.reason(describe_plan(plan, settings))
        native_notes(case.native, out)
        out.reason(*case.words.reasons)
        check_emitted(case.ref, job, desired, podgroups)
    draft = Draft(obj)
    apply_metadata(draft, job, case.current, desired)
    patch = diff_owned(obj, draft.root, owned_paths(job))
    return out.result(draft.root if patch else obj, patch, podgroups)


def leave_existing(case: GangCase) -> Result:
    """Rule G10: a job that already carries gang metadata is left untouched, with a warning when
    inconsistent."""
    out = case.out
    keys = sorted({k for labels, annots in case.current.values() for k in (*labels, *annots)})
    out.reason(f"already carries gang metadata ({', '.join(keys)}): left untouched")
    warnings, violation = existing_metadata_findings(case.job, case.current, case.settings)
    out.warn(*(f"existing gang metadata is inconsistent: {w}" for w in warnings))
    if violation:
        out.violation(violation, case.deny)
    return out.result(case.obj)
