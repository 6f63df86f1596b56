"""Gang method ``workload``: Kubernetes' own gang scheduling (1.36 alpha, ``scheduling.k8s.io/v1alpha2``;
rules G16-G18).

The default kube-scheduler gangs the pods whose ``spec.schedulingGroup.podGroupName`` names a PodGroup
with ``spec.schedulingPolicy.gang.minCount`` (its GangScheduling plugin: PreEnqueue holds every pod of the
group until the group's PodGroup exists and ``minCount`` pods are queued; Permit binds none until
``minCount`` are placed). A Kubeflow job cannot carry ``schedulingGroup`` in its pod templates
(training-operator's CRDs prune it, and the operators' Go types drop it), so the method works in three
steps, all from this module:

1. the job's mutation writes the label :data:`~policylib.gang.keys.SCHEDULING_GROUP_LABEL` (the gang's
   name) on every replica template (rule G16); the operators copy template labels to the pods;
2. the webhook, on the CREATE of a Pod carrying that label, writes ``spec.schedulingGroup.podGroupName``
   from it (:func:`mutate_pod`, rule G17);
3. the controller creates the job's Workload (one gang ``podGroupTemplate``) and the PodGroup made from
   it, both owned by the job (:func:`workload_objects`, rule G18), as the 1.36 Job controller does for a
   batch Job (pkg/controller/job/job_scheduling_manager.go).
"""
from __future__ import annotations

from typing import Any

from ..config import Config, GangSettings
from ..constants import KUBEFLOW_GROUP, NATIVE_GANG_API_VERSION
from ..labels import dns1123_subdomain_errors
from ..patch import Draft, diff_owned
from ..result import Outcome, Result, admission
from .gangs import GangPlan
from .job import KubeflowJob
from .keys import SCHEDULING_GROUP_LABEL, WORKLOAD_API_VERSION
from .operator import template_scheduler_names

#: The one podGroupTemplate of a job's Workload (a DNS label, as the API requires of template names).
TEMPLATE_NAME = "gang"
#: What a cluster needs to serve and honour method workload (Kubernetes 1.36: the gate names of
#: pkg/features/kube_features.go; an alpha API is served only when --runtime-config enables it).
FEATURE_GATES = "GangScheduling=true,GenericWorkload=true"
RUNTIME_CONFIG = f"{NATIVE_GANG_API_VERSION}=true"
API_NOT_SERVED = (f"the API server does not serve {WORKLOAD_API_VERSION} (gang.method workload): start "
                  f"kube-apiserver, kube-scheduler and kube-controller-manager with --feature-gates={FEATURE_GATES} "
                  f"and kube-apiserver with --runtime-config={RUNTIME_CONFIG}")


def gang_policy(min_count: int) -> dict[str, Any]:
    return {"gang": {"minCount": min_count}}


def workload_objects(job: KubeflowJob, plan: GangPlan, settings: GangSettings) -> list[dict[str, Any]]:
    """Rule G18: for method workload, the job's ``Workload`` (one gang podGroupTemplate, ``minCount`` the
    gang minimum of rule G2) and the ``PodGroup`` made from it, both named after the gang (rule G3), in the
    job's namespace; ``[]`` for any other method.

    ``spec.controllerRef`` points back at the job, as the Job controller's Workloads do. Both
    ``podGroupTemplates`` and the PodGroup's ``schedulingPolicy`` are immutable (scheduling/v1alpha2
    types.go). One gang only: configuration refuses ``groupByRole`` with this method (rule G16).
    """
    if settings.method != "workload":
        return []
    out: list[dict[str, Any]] = []
    for gang in plan.gangs:
        meta = {"name": gang.name, "namespace": plan.namespace}
        out.append({"apiVersion": WORKLOAD_API_VERSION, "kind": "Workload", "metadata": dict(meta),
                    "spec": {"controllerRef": {"apiGroup": KUBEFLOW_GROUP, "kind": job.kind, "name": job.name},
                             "podGroupTemplates": [{"name": TEMPLATE_NAME,
                                                    "schedulingPolicy": gang_policy(gang.min_available)}]}})
        out.append({"apiVersion": WORKLOAD_API_VERSION, "kind": "PodGroup", "metadata": dict(meta),
                    "spec": {"podGroupTemplateRef": {"workload": {"workloadName": gang.name,
                                                                  "podGroupTemplateName": TEMPLATE_NAME}},
                             "schedulingPolicy": gang_policy(gang.min_available)}})
    return out


#: The scheduler name of the default kube-scheduler's default profile.
DEFAULT_SCHEDULER = "default-scheduler"


def other_scheduler_warning(obj: dict[str, Any], settings: GangSettings) -> str | None:
    """Rule G16: with method workload, a warning when replica templates name a scheduler other than the
    default one: the gang is kube-scheduler's (its GangScheduling plugin); another scheduler ignores
    ``spec.schedulingGroup`` (a kube-scheduler profile of that name with the plugin would not)."""
    if settings.method != "workload":
        return None
    others = sorted(n for n in template_scheduler_names(obj) if n != DEFAULT_SCHEDULER)
    if not others:
        return None
    return (f"gang.method workload: replica templates are scheduled by {', '.join(repr(n) for n in others)}: only "
            "kube-scheduler's GangScheduling plugin gangs pods by spec.schedulingGroup; unless that is a "
            "kube-scheduler profile, those pods are not gang-scheduled")


def min_count(obj: dict[str, Any]) -> int | None:
    """``minCount`` of a Workload's first template or of a PodGroup; None when absent."""
    spec = obj.get("spec") or {}
    if obj.get("kind") == "Workload":
        templates = spec.get("podGroupTemplates") or [{}]
        spec = templates[0] if isinstance(templates[0], dict) else {}
    value = ((spec.get("schedulingPolicy") or {}).get("gang") or {}).get("minCount")
    return value if isinstance(value, int) else None


# --- the Pod (rule G17) ----------------------------------------------------------------------------

def is_pod(obj: object) -> bool:
    return isinstance(obj, dict) and obj.get("apiVersion") == "v1" and obj.get("kind") == "Pod"


def scheduling_group_label(pod: dict[str, Any]) -> object:
    meta = pod.get("metadata")
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return labels.get(SCHEDULING_GROUP_LABEL) if isinstance(labels, dict) else None


def mutate_pod(obj: dict[str, Any], config: Config | dict[str, Any] | None = None, *,
               old: dict[str, Any] | None = None, namespace: str | None = None) -> Result:
    """Rule G17: a Pod created with the label ``policylib.io/scheduling-group`` gets
    ``spec.schedulingGroup.podGroupName`` from it, so the default kube-scheduler gangs it.

    Left unchanged, with the reason: an UPDATE (``schedulingGroup`` is immutable), gang policies off or
    a method other than workload (no PodGroup would ever be made, and the scheduler holds a pod whose
    PodGroup does not exist forever), a label value the API server would refuse as a PodGroup name (a
    warning), and a pod that already has a ``schedulingGroup`` (a warning when it names another group).
    """
    req, skipped = admission(obj, config, old, None, namespace)
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
