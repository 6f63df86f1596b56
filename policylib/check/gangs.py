"""Kubeflow jobs' gangs against the Nodes as the one simulation of the input leaves them, the job's own pods
released (rules G14, G21), and the gang schedulers a live cluster runs (rule D5)."""
from __future__ import annotations

from typing import Any, Sequence

from ..config import Config
from ..facts import namespace_of
from ..gang import is_kubeflow_job, job_minimum, operator_gang_reason, policylib_gangs_volcano, read_job, volcano_without_gang
from ..gang.topology import gang_topology
from ..kubescheduler.model import NodeState
from ..kubescheduler.snapshot import bound_pod_shape
from ..schedulers import gang_scheduler_findings, running_gang_schedulers
from ..simulate import gang_capacity, gang_owner, is_bound_pod
from .finding import Finding
from .simulated import Simulations


def _released(job: dict[str, Any], owner: str, load: list[NodeState], objects: list[dict[str, Any]]) -> list[NodeState]:
    """Rule G14: ``load`` (the Nodes as the one simulation leaves them) with the job's own pods released: those
    the simulation placed (``owner``'s) and the job's bound Pods (a gang does not crowd out itself)."""
    states = [n.copy() for n in load]
    by_name = {n.name: n for n in states}
    for n in states:
        n.release(owner)
    for pod in objects:
        if is_bound_pod(pod) and _pod_of(pod, job) and pod["spec"]["nodeName"] in by_name:
            by_name[pod["spec"]["nodeName"]].unbind(bound_pod_shape(pod))
    return states


#: The label training-operator and the MPI Operator put on every pod of a job: the job's name.
JOB_NAME_LABEL = "training.kubeflow.org/job-name"


def _pod_of(obj: dict[str, Any], job: dict[str, Any]) -> bool:
    """A Pod of ``job``: owned by it, or labelled with its name by its operator, in its namespace."""
    if obj.get("kind") != "Pod" or namespace_of(obj) != namespace_of(job):
        return False
    meta, job_meta = obj.get("metadata") or {}, job.get("metadata") or {}
    uid = job_meta.get("uid")
    owned = uid and any(isinstance(r, dict) and r.get("uid") == uid for r in meta.get("ownerReferences") or [])
    return bool(owned) or (meta.get("labels") or {}).get(JOB_NAME_LABEL) == job_meta.get("name")


def check_gangs(config: Config, objects: list[dict[str, Any]], simulations: Simulations) -> list[Finding]:
    """Rules G14, G21: each Kubeflow job whose gang minimum the Nodes cannot hold at once, on the Nodes as the one
    simulation of the input leaves them with the job's own pods released (:func:`_released`)."""
    level = gang_topology(config) if config.gang.enabled else None
    load: list[NodeState] | None = None
    out = []
    for obj in objects:
        if not is_kubeflow_job(obj):
            continue
        job = read_job(obj, namespace_of(obj))
        operator = operator_gang_reason(obj, config.gang)
        if operator:
            out.append(Finding("warning" if volcano_without_gang(obj, config.gang) else "info", "gang.operatorGang",
                               f"{job.kind} {job.namespace}/{job.name}: {operator}"))
        minimum = job_minimum(job)
        specs = (obj.get("spec") or {}).get(job.specs_key) or {}
        key = level.key if level is not None and not operator else None
        load = simulations.load(objects) if load is None else load
        capacity = gang_capacity(job, specs, _released(obj, gang_owner(job), load, objects), minimum, key)
        if capacity < minimum:
            # rule G21: a Volcano PodGroup has no timeout; its gang plugin keeps it Unschedulable
            outcome = gang_stuck_outcome(config, operator)
            where = f"one {key} domain can" if key else "Nodes can"
            out.append(Finding("error", "gang.topology" if key else "gang.method",
                               f"{job.kind} {job.namespace}/{job.name}: its gang needs {minimum} pods at once; the "
                               f"{where} hold {capacity} of them now: {outcome}"))
    return out


def gang_stuck_outcome(config: Config, operator: str | None) -> str:
    """What the scheduler does with a gang whose minimum the Nodes cannot hold: Volcano's PodGroup (rule G21)
    and Kubernetes' own (G18, whose Permit wait is fixed) have no timeout of ours; the others time out."""
    if policylib_gangs_volcano(config.gang) and not operator:
        return "Volcano would keep its PodGroup Unschedulable and start none of them"
    if config.gang.method == "workload":
        return "kube-scheduler would keep its PodGroup Unschedulable and bind none of them"
    return "it would wait for its scheduleTimeout and never start"


def check_gang_schedulers(config: Config, nodes: list[dict[str, Any]], objects: list[dict[str, Any]],
                          served_apis: Sequence[str] | None) -> list[Finding]:
    """Rule D5, on a live cluster only (``served_apis`` given): the gang schedulers it runs, and a warning
    when the configured gang method targets one that is absent."""
    if served_apis is None or not config.gang.enabled:
        return []
    running = running_gang_schedulers(objects, nodes, served_apis)
    key = "gang.operatorGang" if config.gang.operatorGang != "none" else "gang.scheduler"
    return [Finding(severity, key, message) for severity, message in gang_scheduler_findings(config, running)]
