"""UPDATE handling: when gang metadata is recomputed, restored or left alone."""
from __future__ import annotations

from typing import Any

from ..errors import PolicyError
from ..result import Result
from .existing import existing_metadata_findings
from .gangs import plan_gangs
from .job import KubeflowJob, read_job
from .keys import is_kubeflow_job
from .metadata import current_metadata, desired_metadata, has_gang
from .write import GangCase, leave_existing, write_gang


def read_old_job(old: dict[str, Any], namespace: str) -> KubeflowJob | None:
    try:
        return read_job(old, namespace, update=True) if is_kubeflow_job(old) else None
    except PolicyError:
        return None


def update_gang(case: GangCase, old: dict[str, Any], old_job: KubeflowJob) -> Result:
    """Rule G11: an UPDATE that changes replicas recomputes the minimum on every template;
    other updates change nothing.

    The metadata is recomputed only when the old object carried exactly what
    this policy writes for it and the update did not change it; otherwise it
    belongs to someone else and is left as it is.
    """
    job, current, settings, out = case.job, case.current, case.settings, case.out
    old_current = current_metadata(old, old_job)
    old_plan = plan_gangs(old_job, settings)
    ours = has_gang(old_current) and old_plan is not None and \
        old_current == desired_metadata(old_job, old_plan, settings)
    if old_job.shape() == job.shape():
        if ours and not has_gang(current):  # kubectl replace dropped what we wrote: put it back
            out.reason("the update dropped the gang metadata policylib wrote: restored")
            return write_gang(case)
        out.reason("replicas and minAvailable unchanged: gang metadata left as it is")
        violation = existing_metadata_findings(job, current, settings)[1] if has_gang(current) else None
        if violation:
            out.violation(violation, case.deny)
        return out.result(case.obj)
    if not has_gang(old_current):
        out.reason("replicas changed, but the job had no gang metadata before this update: "
                   "none is added to a job whose pods may already run")
        return out.result(case.obj)
    if not ours or not kept_or_dropped(current, old_current):
        return leave_existing(case)
    out.reason(f"replicas changed ({describe_shape(old_job)} -> {describe_shape(job)}): "
               "gang metadata recomputed")
    return write_gang(case)


def kept_or_dropped(current: dict[str, Any], old_current: dict[str, Any]) -> bool:
    """The update left our metadata alone: each replica type kept its old gang keys or
    carries none (a type added by the update, or keys dropped by ``kubectl replace``);
    types the update removed do not matter."""
    empty: tuple[dict[str, Any], dict[str, Any]] = ({}, {})
    return all(meta == empty or meta == old_current.get(key) for key, meta in current.items())


def describe_shape(job: KubeflowJob) -> str:
    text = ", ".join(f"{t.key} {t.replicas}" for t in job.types)
    return text + (f", minAvailable {job.min_available}" if job.min_available is not None else "")
