"""Jobs whose gang their operator manages itself (rule G15).

training-operator started with ``--gang-scheduler-name`` (and the MPI Operator with
``--gang-scheduling``) gangs every job itself: it creates a PodGroup named after the job, owned by
it, and points every pod at it (scheduler-plugins: the label ``scheduling.x-k8s.io/pod-group``
overwritten on every pod; Volcano: the annotation ``scheduling.k8s.io/group-name``), setting
``schedulerName`` when the template has none (training-operator
pkg/controller.v1/control/podgroup_control.go DecoratePodTemplateSpec); the MPI Operator v0.7.0
overwrites ``schedulerName`` whatever the template says (pkg/controller/podgroup.go
decoratePodTemplateSpec). policylib must then write nothing: not a second PodGroup, not a label
the operator overwrites.
"""
from __future__ import annotations

from typing import Any

from ..config import GangSettings
from ..constants import MPI_V2_API_VERSION, VOLCANO_PODGROUP_API_VERSION, X_K8S_PODGROUP_API_VERSION
from .keys import POD_GROUP_LABEL, REPLICA_SPECS, VOLCANO_GROUP_NAME

#: The PodGroup each operator gang mode creates, and the pod key that points at it.
OPERATOR_PODGROUP = {
    "scheduler-plugins": (X_K8S_PODGROUP_API_VERSION, f"label {POD_GROUP_LABEL}"),
    "volcano": (VOLCANO_PODGROUP_API_VERSION, f"annotation {VOLCANO_GROUP_NAME}"),
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


def policylib_gangs_volcano(settings: GangSettings) -> bool:
    """Rule G21: policylib itself gangs pods scheduled by ``volcano`` (method podgroup, scheduler volcano)."""
    return settings.method == "podgroup" and settings.scheduler == VOLCANO_SCHEDULER


def volcano_without_gang(obj: dict[str, Any], settings: GangSettings) -> bool:
    """Rule G15: a template is scheduled by ``volcano``, no operator gang mode is named and policylib is not
    set to make the Volcano PodGroup (G21): nobody may gang the job, which deserves a warning."""
    return (settings.operatorGang == "none" and not policylib_gangs_volcano(settings)
            and VOLCANO_SCHEDULER in template_scheduler_names(obj))


def operator_gang_reason(obj: dict[str, Any], settings: GangSettings) -> str | None:
    """Rule G15: why the job's gang belongs to its operator, or None when it does not.

    The setting ``gang.operatorGang`` names the operator's gang mode. Without it, a
    template scheduled by ``volcano`` is left alone too unless policylib is set to
    make the Volcano PodGroup itself (method podgroup, scheduler volcano: rule G21),
    since metadata for another scheduler would be read by none; the reason says
    that without the operator's Volcano gang mode Volcano's own controller makes a
    one-pod PodGroup per pod (no gang), and names the two settings that fix it.
    """
    meta = obj.get("metadata")
    name = (meta.get("name") if isinstance(meta, dict) else None) or "<job name>"
    operator = operator_of(obj)
    mode = settings.operatorGang
    if volcano_without_gang(obj, settings):
        flag = "--gang-scheduling=volcano" if operator == "the MPI Operator" else "--gang-scheduler-name=volcano"
        return (f"the pods are scheduled by {VOLCANO_SCHEDULER!r}: policylib writes no gang metadata and no PodGroup "
                f"for them. Only {operator} run with {flag} gangs them (PodGroup {VOLCANO_PODGROUP_API_VERSION} "
                f"{name}; set gang.operatorGang: volcano to say so); without it Volcano makes a one-pod PodGroup per "
                "pod and nothing gangs the job: set gang.method: podgroup and gang.scheduler: volcano for policylib "
                "to create the Volcano PodGroup")
    if mode == "none":
        return None
    api_version, key = OPERATOR_PODGROUP[mode]
    return (f"gang.operatorGang {mode}: {operator} gangs the job itself (PodGroup {api_version} {name}, owned by "
            f"the job, and the {key}={name} on every pod); policylib writes no gang metadata and creates no "
            "second PodGroup")
