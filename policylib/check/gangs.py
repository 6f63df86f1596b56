"""Every gang kind's gangs (Kubeflow jobs, Volcano Jobs, JobSets, TrainJobs: the kinds of
:data:`~policylib.simulate.gangs.GANG_MODELS`) against the Nodes as the one simulation of the input leaves them,
the job's own pods released (rules G14, G21, G26), and the gang schedulers a live cluster runs (rule D5)."""
from __future__ import annotations

from typing import Any, Sequence

from ..config import Config
from ..errors import PolicyError, object_ref
from ..facts import ClusterFacts, namespace_of
from ..gang import is_kubeflow_job, operator_gang_reason, policylib_gangs_volcano, read_job, volcano_without_gang
from ..kubescheduler.model import NodeState
from ..kubescheduler.snapshot import bound_pod_shape
from ..schedulers import gang_scheduler_findings, running_gang_schedulers
from ..simulate import (
    COSCHEDULING,
    KUBE_SCHEDULER,
    VOLCANO,
    GangVerdict,
    gang_model,
    is_bound_pod,
    owner_of,
)
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
#: The label each other gang kind's controller puts on every pod with the job's name: JobSet's (a TrainJob's
#: JobSet is named after it) and Volcano's job controller's.
NAME_LABELS = {"JobSet": "jobset.sigs.k8s.io/jobset-name", "TrainJob": "jobset.sigs.k8s.io/jobset-name",
               "Job": "volcano.sh/job-name"}


def _pod_of(obj: dict[str, Any], job: dict[str, Any]) -> bool:
    """A Pod of ``job``: owned by it, or labelled with its name by its operator, in its namespace."""
    if obj.get("kind") != "Pod" or namespace_of(obj) != namespace_of(job):
        return False
    meta, job_meta = obj.get("metadata") or {}, job.get("metadata") or {}
    uid = job_meta.get("uid")
    owned = uid and any(isinstance(r, dict) and r.get("uid") == uid for r in meta.get("ownerReferences") or [])
    label = NAME_LABELS.get(str(job.get("kind")), JOB_NAME_LABEL)
    return bool(owned) or (meta.get("labels") or {}).get(label) == job_meta.get("name")


def check_gangs(config: Config, objects: list[dict[str, Any]], simulations: Simulations) -> list[Finding]:
    """Rules G14, G21, G26: each gang whose minimum the Nodes cannot hold at once, on the Nodes as the one
    simulation of the input leaves them with the job's own pods released (:func:`_released`), judged by the
    model ``simulate`` runs for its kind (:func:`model_gang_findings`), so the level is the one written on the
    gang (rules R17, R18); a Kubeflow job's operator gang is named too (:func:`kubeflow_gang_findings`)."""
    load: list[NodeState] | None = None
    out: list[Finding] = []
    facts: ClusterFacts | None = None
    for obj in objects:
        if gang_model(obj) is None:
            continue
        load = simulations.load(objects) if load is None else load
        if facts is None:
            facts = ClusterFacts.from_objects(objects)
            facts.workload_api = simulations.workload_api
        if is_kubeflow_job(obj):
            out += kubeflow_gang_findings(config, obj, objects, load, simulations.nodes, facts)
        else:
            out += model_gang_findings(config, obj, objects, load, simulations.nodes, facts)
    return out


def model_gang_findings(config: Config, obj: dict[str, Any], objects: list[dict[str, Any]], load: list[NodeState],
                        nodes: list[dict[str, Any]], facts: ClusterFacts, operator: str | None = None) -> list[Finding]:
    """Rule G26: a job's gangs as the model ``simulate`` runs judges them (each start wave with the waves before it
    in place), on ``load`` with the job's own pods released: one finding per gang that does not fit or can never
    bind. ``operator``: the job's operator makes its gang (rule G15)."""
    model = gang_model(obj)
    assert model is not None
    released = _released(obj, owner_of(obj), load, objects)
    try:
        probe = model(obj, config, released, nodes, facts)
    except (TypeError, ValueError, AttributeError, KeyError) as e:   # as simulate reports it
        raise PolicyError(object_ref(obj), "spec", f"cannot be simulated: {type(e).__name__}: {e}") from None
    return [gang_finding(config, probe.kind, probe.namespace, probe.name, v, operator) for v in probe.gangs
            if not v.fits]


def kubeflow_gang_findings(config: Config, obj: dict[str, Any], objects: list[dict[str, Any]], load: list[NodeState],
                           nodes: list[dict[str, Any]], facts: ClusterFacts) -> list[Finding]:
    """Rules G14, G15, G21: a Kubeflow job whose gang its operator makes is named; its gang minimum is judged as
    every gang kind's (:func:`model_gang_findings`)."""
    out = []
    job = read_job(obj, namespace_of(obj))
    operator = operator_gang_reason(obj, config.gang)
    if operator:
        out.append(Finding("warning" if volcano_without_gang(obj, config.gang) else "info", "gang.operatorGang",
                           f"{job.kind} {job.namespace}/{job.name}: {operator}"))
    return out + model_gang_findings(config, obj, objects, load, nodes, facts, operator)


def gang_finding(config: Config, kind: str, namespace: str, name: str, verdict: GangVerdict,
                 operator: str | None = None) -> Finding:
    """Rules G14, G26: a gang whose minimum the Nodes (or the one domain its words name) cannot hold at once, or
    that can never bind: per start wave where the job has waves."""
    which = f"its gang {verdict.name} ({verdict.wave})" if verdict.wave else "its gang"
    if verdict.never is not None:
        return Finding("error", "gang.method", f"{kind} {namespace}/{name}: {verdict.never}")
    key = "gang.topology" if verdict.where != "Nodes" else "gang.method"
    return Finding("error", key, f"{kind} {namespace}/{name}: {which} needs {verdict.minimum} pods at once; the "
                                 f"{verdict.where} can hold {verdict.placeable} of them now: "
                                 f"{stuck_outcome(config, verdict.scheduler, operator)}")


def stuck_outcome(config: Config, scheduler: str | None, operator: str | None = None) -> str:
    """What the gang's scheduler does with a gang whose minimum the Nodes cannot hold: ``scheduler`` the one the
    words on the gang name (None: the configured gang scheduler, or the operator's, :func:`gang_stuck_outcome`)."""
    if scheduler == VOLCANO:
        return "Volcano would keep its PodGroup Unschedulable and start none of them"
    if scheduler == KUBE_SCHEDULER:
        return "kube-scheduler would keep its PodGroup Unschedulable and bind none of them"
    if scheduler == COSCHEDULING:
        return "it would wait for its scheduleTimeout and never start"
    return gang_stuck_outcome(config, operator)


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
