"""Gang method ``workload``: Kubernetes' own gang scheduling (``scheduling.k8s.io`` Workload and PodGroup, in
the version the cluster serves: ``v1beta1`` on 1.37, ``v1alpha2`` on 1.36; rules G16-G18, G22-G25).

The default kube-scheduler gangs the pods whose ``spec.schedulingGroup.podGroupName`` names a PodGroup
with ``spec.schedulingPolicy.gang.minCount`` (its GangScheduling plugin: PreEnqueue holds every pod of the
group until the group's PodGroup exists and ``minCount`` pods are queued; Permit binds none until
``minCount`` are placed). A Kubeflow job cannot carry ``schedulingGroup`` in its pod templates
(training-operator's CRDs prune it, and the operators' Go types drop it), so the method works in three
steps, all from this module:

1. the job's mutation writes the label :data:`~policylib.gang.keys.SCHEDULING_GROUP_LABEL` (the gang's
   name) on every replica template (rule G16); the operators copy template labels to the pods;
2. the webhook, on the CREATE of a Pod carrying that label, writes ``spec.schedulingGroup.podGroupName``
   from it (:func:`mutate_pod`, rule G17), or refuses the pod when the cluster serves no Workload API
   policylib writes (rule G23);
3. the controller creates the job's Workload (one gang ``podGroupTemplate``) and the PodGroup made from
   it, both owned by the job (:func:`workload_objects`, rule G18), as the Job controller does for a
   batch Job (pkg/controller/job/job_scheduling_manager.go).

The shapes differ by version (k8s.io/api scheduling/v1alpha2 at v0.36.3, scheduling/v1beta1 at v0.37.2): the
PodGroup points at its template by ``podGroupTemplateRef.workload {workloadName, podGroupTemplateName}`` in
``v1alpha2`` and by ``workloadRef {workloadName, templateName}`` in ``v1beta1``; both carry
``schedulingPolicy.gang.minCount`` and, for ``gang.topology`` (rule G25), ``schedulingConstraints.topology``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config import Config, GangSettings
from ..constants import NATIVE_GANG_V1ALPHA2
from ..facts import ClusterFacts
from ..labels import dns1123_subdomain_errors
from ..patch import Draft, diff_owned
from ..request import admission
from ..result import Outcome, Result
from ..workload_api import WorkloadApi, resolve
from .gangs import GangPlan
from .job import KubeflowJob
from .keys import SCHEDULING_GROUP_LABEL
from .operator import template_scheduler_names
from .topology import TopologyLevel, gang_topology

#: The one podGroupTemplate of a job's Workload (a DNS label, as the API requires of template names).
TEMPLATE_NAME = "gang"


@dataclass(frozen=True)
class NativeGang:
    """Rules G22 and G25: how a gang of method workload is written on one cluster: the Workload API version
    (:class:`~policylib.workload_api.WorkloadApi`) and the topology level, if any."""

    api: WorkloadApi
    topology: TopologyLevel | None


def workload_api_for(settings: GangSettings, facts: ClusterFacts | None) -> WorkloadApi:
    """Rule G22: the version to write, from ``gang.workloadAPIVersion`` and what ``facts`` know of the cluster
    (served versions, minor); without facts, Kubernetes 1.37 is assumed."""
    known = facts.workload_api if facts is not None else None
    if known is None:
        return resolve(settings.workloadAPIVersion)
    return resolve(settings.workloadAPIVersion, known.served, known.minor)


def native_gang(config: Config, facts: ClusterFacts | None) -> NativeGang | None:
    """Rules G22, G25: what a native gang is written as, for gang method workload; None for another method."""
    if config.gang.method != "workload":
        return None
    return NativeGang(workload_api_for(config.gang, facts), gang_topology(config))


def gang_policy(min_count: int) -> dict[str, Any]:
    return {"gang": {"minCount": min_count}}


def scheduling_constraints(topology: TopologyLevel | None) -> dict[str, Any]:
    """Rule G25: ``{"schedulingConstraints": {"topology": [{"key": ...}]}}``, or nothing without a level."""
    return {"schedulingConstraints": {"topology": [{"key": topology.key}]}} if topology else {}


def podgroup_spec(version: str, name: str, min_count: int, topology: TopologyLevel | None) -> dict[str, Any]:
    """Rule G18: a PodGroup's spec in ``version``: the reference to its Workload's template, the gang policy and
    (rule G25) the topology constraint."""
    ref: dict[str, Any]
    if version == NATIVE_GANG_V1ALPHA2:
        ref = {"podGroupTemplateRef": {"workload": {"workloadName": name, "podGroupTemplateName": TEMPLATE_NAME}}}
    else:
        ref = {"workloadRef": {"workloadName": name, "templateName": TEMPLATE_NAME}}
    return {**ref, "schedulingPolicy": gang_policy(min_count), **scheduling_constraints(topology)}


def workload_objects(job: KubeflowJob, plan: GangPlan, native: NativeGang | None) -> list[dict[str, Any]]:
    """Rules G18, G22 and G25: for method workload, the job's ``Workload`` (one gang podGroupTemplate,
    ``minCount`` the gang minimum of rule G2) and the ``PodGroup`` made from it, both named after the gang
    (rule G3), in the job's namespace, in the Workload API version the cluster serves, with the topology
    constraint of ``gang.topology`` on both; ``[]`` for any other method, or when no version can be written.

    ``spec.controllerRef`` points back at the job, as the Job controller's Workloads do. One gang only:
    configuration refuses ``groupByRole`` with this method (rule G16).
    """
    if native is None or native.api.version is None:
        return []
    version, api_version = native.api.version, native.api.api_version
    out: list[dict[str, Any]] = []
    for gang in plan.gangs:
        meta = {"name": gang.name, "namespace": plan.namespace}
        template = {"name": TEMPLATE_NAME, "schedulingPolicy": gang_policy(gang.min_available),
                    **scheduling_constraints(native.topology)}
        out.append({"apiVersion": api_version, "kind": "Workload", "metadata": dict(meta),
                    "spec": {"controllerRef": {"apiGroup": job.api_group, "kind": job.kind, "name": job.name},
                             "podGroupTemplates": [template]}})
        out.append({"apiVersion": api_version, "kind": "PodGroup", "metadata": dict(meta),
                    "spec": podgroup_spec(version, gang.name, gang.min_available, native.topology)})
    return out


def native_notes(native: NativeGang | None, out: Outcome) -> None:
    """Rules G22, G23, G25: the job's reasons say which version is written and why, and the topology level;
    a warning when no Workload API can be written (its pods will be refused until the API is served)."""
    if native is None:
        return
    if native.api.version is None:
        out.warn(f"gang.method workload: {native.api.missing_in_short()}, so the job's pods are refused (rule G23): "
                 f"no Workload or PodGroup can be made: {native.api.missing()}")
        return
    out.reason(f"Workload and PodGroup in {native.api.describe()}")
    if native.topology is not None:
        out.reason(f"schedulingConstraints.topology [{native.topology.key}]: the gang's pods all in one "
                   f"{native.topology.key} domain ({native.topology.why}; kube-scheduler needs the "
                   "TopologyAwareWorkloadScheduling gate)")


#: The scheduler name of the default kube-scheduler's default profile.
DEFAULT_SCHEDULER = "default-scheduler"


def other_scheduler_warning(obj: dict[str, Any], settings: GangSettings, names: set[str] | None = None) -> str | None:
    """Rule G16: with method workload, a warning when replica templates (or ``names``, the schedulers a JobSet's
    pod templates name) name a scheduler other than the default one: the gang is kube-scheduler's (its
    GangScheduling plugin); another scheduler ignores ``spec.schedulingGroup`` (a kube-scheduler profile of that
    name with the plugin would not)."""
    if settings.method != "workload":
        return None
    others = sorted(n for n in (template_scheduler_names(obj) if names is None else names) if n != DEFAULT_SCHEDULER)
    if not others:
        return None
    return (f"gang.method workload: replica templates are scheduled by {', '.join(repr(n) for n in others)}: only "
            "kube-scheduler's GangScheduling plugin gangs pods by spec.schedulingGroup; unless that is a "
            "kube-scheduler profile, those pods are not gang-scheduled")


def _policy_holder(obj: dict[str, Any]) -> dict[str, Any]:
    """Where a Workload (its first template) or a PodGroup (its spec) keeps the policy and constraints."""
    spec = obj.get("spec") or {}
    if obj.get("kind") == "Workload":
        templates = spec.get("podGroupTemplates") or [{}]
        spec = templates[0] if isinstance(templates[0], dict) else {}
    return spec if isinstance(spec, dict) else {}


def min_count(obj: dict[str, Any]) -> int | None:
    """``minCount`` of a Workload's first template or of a PodGroup; None when absent."""
    value = ((_policy_holder(obj).get("schedulingPolicy") or {}).get("gang") or {}).get("minCount")
    return value if isinstance(value, int) else None


def topology_keys(obj: dict[str, Any]) -> list[str]:
    """The ``schedulingConstraints.topology`` keys of a Workload's first template or of a PodGroup (rule G25)."""
    constraints = _policy_holder(obj).get("schedulingConstraints") or {}
    return [str(t.get("key")) for t in constraints.get("topology") or [] if isinstance(t, dict)]


# --- the Pod (rule G17) ----------------------------------------------------------------------------

def is_pod(obj: object) -> bool:
    return isinstance(obj, dict) and obj.get("apiVersion") == "v1" and obj.get("kind") == "Pod"


def scheduling_group_label(pod: dict[str, Any]) -> object:
    meta = pod.get("metadata")
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return labels.get(SCHEDULING_GROUP_LABEL) if isinstance(labels, dict) else None


def mutate_pod(obj: dict[str, Any], config: Config | dict[str, Any] | None = None, *,
               old: dict[str, Any] | None = None, namespace: str | None = None,
               facts: ClusterFacts | None = None) -> Result:
    """Rule G17: a Pod created with the label ``policylib.io/scheduling-group`` gets
    ``spec.schedulingGroup.podGroupName`` from it, so the default kube-scheduler gangs it.

    Left unchanged, with the reason: an UPDATE (``schedulingGroup`` is immutable), gang policies off or
    a method other than workload (no PodGroup would ever be made, and the scheduler holds a pod whose
    PodGroup does not exist forever), a label value the API server would refuse as a PodGroup name (a
    warning), and a pod that already has a ``schedulingGroup`` (a warning when it names another group).

    Rule G23: refused (``Result.denial``) when ``facts`` know that the cluster serves no Workload API version
    policylib writes (:func:`workload_api_for`): no PodGroup can be made, and the field is immutable, so a pod
    admitted now would either wait forever or, admitted without it, never join its gang; the message names the
    missing API and the flags that turn it on, and the operator's retry succeeds once it is served.
    """
    req, skipped = admission(obj, config, old, facts, namespace)
    if skipped:
        return skipped
    out = Outcome()
    value = scheduling_group_label(obj)
    if value is None:
        return out.result(obj)
    gang = req.config.gang
    label = f"{SCHEDULING_GROUP_LABEL}={value}"
    if old is not None:
        out.reason(f"{label}: spec.schedulingGroup is immutable: an UPDATE is left unchanged")
        return out.result(obj)
    if not gang.enabled or gang.method != "workload":
        out.warn(f"{label} is ignored: gang.method is {gang.method if gang.enabled else 'off'}, not workload "
                 "(no PodGroup is made for it)")
        return out.result(obj)
    errors = dns1123_subdomain_errors(value) if isinstance(value, str) else ["must be a string"]
    if errors:
        out.warn(f"{label} is not a PodGroup name ({'; '.join(errors)}): spec.schedulingGroup not written")
        return out.result(obj)
    spec = obj.get("spec", {})
    if not isinstance(spec, dict):
        out.warn(f"{label}: spec is not an object: spec.schedulingGroup not written")
        return out.result(obj)
    existing = spec.get("schedulingGroup")
    api = workload_api_for(gang, facts)
    if existing is None and api.version is None and api.known:
        out.violation(f"{label}: no PodGroup {value} can be made, so the pod is refused rather than left waiting "
                      f"for one or run outside its gang: {api.missing()}", deny=True)
        return out.result(obj)
    if existing is not None:
        have = existing.get("podGroupName") if isinstance(existing, dict) else existing
        if have == value:
            out.reason(f"spec.schedulingGroup.podGroupName is {value} already")
        else:
            out.warn(f"spec.schedulingGroup.podGroupName is {have!r}, not {value!r} as {SCHEDULING_GROUP_LABEL} "
                     "says: left as it is (the field is the pod's own)")
        return out.result(obj)
    draft = Draft(obj)
    draft.dict_at(("spec",))["schedulingGroup"] = {"podGroupName": value}
    patch = diff_owned(obj, draft.root, [("spec", "schedulingGroup")])
    out.reason(f"spec.schedulingGroup.podGroupName {value} from {SCHEDULING_GROUP_LABEL} (gang method workload)")
    return out.result(draft.root, patch)
