"""The gang policy: write, keep or leave a job's gang metadata."""
from __future__ import annotations

from typing import Any

from ..config import Config
from ..facts import ClusterFacts
from ..request import admission
from ..result import Outcome, Result
from .gangs import plan_gangs
from .job import GENERATE_NAME_WARNING, has_scheduling_policy, named_by_generate_name_only, read_job
from .metadata import current_metadata, desired_metadata, has_gang
from .operator import operator_gang_reason, volcano_without_gang
from .podgroup import build_podgroups
from .priority import priority_violation
from .topology import gang_words
from .update import read_old_job, update_gang
from .workload import native_gang, native_notes, workload_objects
from .write import GangCase, describe_plan, leave_existing, write_gang


def mutate_kubeflow_job(obj: dict[str, Any], config: Config | None = None, *, old: dict[str, Any] | None = None,
                        namespace: str | None = None, facts: ClusterFacts | None = None) -> Result:
    """Apply the gang rules (G1-G11) to a ``kubeflow.org/v1`` TFJob, PyTorchJob or MPIJob on CREATE
    (``old`` None) or UPDATE. PodGroups of method podgroup, and the Workload and PodGroup of method workload
    (in the version ``facts`` say the cluster serves, rule G22), come back in
    ``Result.extra_objects``; ``Result.denial`` is set for a violation under
    ``onViolation: deny``.
    """
    req, skipped = admission(obj, config, old, facts, namespace)
    if skipped:
        return skipped
    settings, namespace, ref = req.config.gang, req.namespace, req.ref
    out = Outcome()
    if settings.trainingOperatorGang:
        out.reason(training_operator_reason(obj))
        return out.result(obj)
    if named_by_generate_name_only(obj):
        out.warn(GENERATE_NAME_WARNING.format(what="job"))
        return out.result(obj)
    job = read_job(obj, namespace, update=old is not None)
    operator = operator_gang_reason(obj, settings)
    if operator:   # rule G15, once the job reads well (G7)
        (out.warn if volcano_without_gang(obj, settings) else out.reason)(operator)
        return out.result(obj)
    plan = plan_gangs(job, settings)
    if plan is None:
        out.reason("the job has no pods (every replica type has 0 replicas): nothing to gang")
        return out.result(obj)
    current = current_metadata(obj, job)
    desired = desired_metadata(job, plan, settings)
    native = native_gang(req.config, facts)
    words = gang_words(req.config)
    if current == desired and priority_violation(job, plan) is None:
        out.reason(f"gang metadata up to date: {describe_plan(plan, settings)}")
        native_notes(native, out)
        out.reason(*words.reasons)
        return out.result(obj, extra=build_podgroups(job, plan, settings, words.network_topology)
                          + workload_objects(job, plan, native))
    case = GangCase(obj, job, plan, current, settings, ref, out, native, words)
    old_job = read_old_job(old, namespace) if old is not None else None
    if old is not None and old_job is not None:
        return update_gang(case, old, old_job)
    if has_gang(current):
        return leave_existing(case)
    return write_gang(case)


def training_operator_reason(obj: dict[str, Any]) -> str:
    """Rule G13: why ``trainingOperatorGang: true`` leaves every job alone.

    With gang scheduling enabled, training-operator gangs every job, not only
    those with ``runPolicy.schedulingPolicy``: ReconcileJobs creates a PodGroup
    named after the job (minMember = all replicas unless minAvailable is set)
    and DecoratePodTemplateSpec overwrites the pod-group label on every pod
    (pkg/controller.v1/common/job.go, control/podgroup_control.go).
    """
    if has_scheduling_policy(obj):
        return ("gang.trainingOperatorGang: the job has runPolicy.schedulingPolicy and training-operator "
                "gangs it itself: left untouched")
    return ("gang.trainingOperatorGang: training-operator gangs every job itself (a PodGroup named after the "
            "job with all replicas): left untouched")
