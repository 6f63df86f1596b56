"""Jobs whose gang their operator manages itself (rule G15).

training-operator started with ``--gang-scheduler-name`` (and the MPI Operator with
``--gang-scheduling``) gangs every job itself: it creates a PodGroup named after the job, owned by
it, and points every pod at it (scheduler-plugins: the label ``scheduling.x-k8s.io/pod-group``
overwritten on every pod; Volcano: the annotation ``scheduling.k8s.io/group-name``), setting
``schedulerName`` when the template has none (training-operator
pkg/controller.v1/control/podgroup_control.go DecoratePodTemplateSpec). policylib must then write
nothing: not a second PodGroup, not a label the operator overwrites.
"""
from __future__ import annotations

from typing import Any

from ..config import GangSettings
from .keys import MPI_V2_API_VERSION, POD_GROUP_LABEL, REPLICA_SPECS, VOLCANO_GROUP_NAME

#: The PodGroup each operator gang mode creates, and the pod key that points at it.
OPERATOR_PODGROUP = {
    "scheduler-plugins": ("scheduling.x-k8s.io/v1alpha1", f"label {POD_GROUP_LABEL}"),
    "volcano": ("scheduling.volcano.sh/v1beta1", f"annotation {VOLCANO_GROUP_NAME}"),
}
#: The scheduler name whose pods only an operator's Volcano gang mode gangs.
VOLCANO_SCHEDULER = "volcano"


def operator_of(obj: dict[str, Any]) -> str:
    """Which operator creates the job's pods: the MPI Operator for kubeflow.org/v2beta1 MPIJobs."""
    return "the MPI Operator" if obj.get("apiVersion") == MPI_V2_API_VERSION else "training-operator"


def template_scheduler_names(obj: dict[str, Any]) -> set[str]:
    """The ``schedulerName`` of every replica template that sets one (anything malformed is skipped:
    :func:`~policylib.gang.job.read_job` reports it)."""
    spec = obj.get("spec")
    specs = spec.get(REPLICA_SPECS.get(str(obj.get("kind")), "")) if isinstance(spec, dict) else None
    names = set()
    for rspec in specs.values() if isinstance(specs, dict) else ():
        template = rspec.get("template") if isinstance(rspec, dict) else None
        pod = template.get("spec") if isinstance(template, dict) else None
        if isinstance(pod, dict) and isinstance(pod.get("schedulerName"), str) and pod["schedulerName"]:
            names.add(pod["schedulerName"])
    return names


def operator_gang_reason(obj: dict[str, Any], settings: GangSettings) -> str | None:
    """Rule G15: why the job's gang belongs to its operator, or None when it does not.

    The setting ``gang.operatorGang`` names the operator's gang mode; without it, a
    template scheduled by ``volcano`` says the same: Volcano gangs only pods of a
    Volcano PodGroup, which only the operator's Volcano gang mode creates for a
    Kubeflow job (policylib writes none), so any metadata policylib wrote would be
    read by no scheduler.
    """
    meta = obj.get("metadata")
    name = (meta.get("name") if isinstance(meta, dict) else None) or "<job name>"
    operator = operator_of(obj)
    mode = settings.operatorGang
    if mode == "none" and VOLCANO_SCHEDULER in template_scheduler_names(obj):
        return (f"the pods are scheduled by {VOLCANO_SCHEDULER!r}: only {operator}'s Volcano gang mode gangs them "
                f"(PodGroup scheduling.volcano.sh/v1beta1 {name}); policylib writes no gang metadata and no PodGroup "
                "for it (set gang.operatorGang: volcano to say so)")
    if mode == "none":
        return None
    api_version, key = OPERATOR_PODGROUP[mode]
    return (f"gang.operatorGang {mode}: {operator} gangs the job itself (PodGroup {api_version} {name}, owned by "
            f"the job, and the {key}={name} on every pod); policylib writes no gang metadata and creates no "
            "second PodGroup")
