"""The planners (pure): for one existing object of a workload family, the writes that keep it right.

Each workload family (:data:`policylib.families.FAMILIES`) lists its planners; :func:`policylib.plan.plan`
runs them over a snapshot. A compliant object never gets a write.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from .config import ON_NEXT_ROLLOUT, Config
from .constants import APPS_API_VERSION, INSTALL_NAMESPACE, NATIVE_GANG_V1ALPHA2
from .errors import PolicyError
from .facts import ClusterFacts, namespace_of
from .gang import is_kubeflow_job, mutate_kubeflow_job
from .gang.workload import min_count, native_gang, topology_keys
from .jobset import is_jobset, mutate_jobset
from .result import is_opted_out
from .spread import (
    DEPLOYMENT,
    RECORD_ANNOTATIONS,
    effective_replicas,
    is_deployment,
    mutate_workload,
    pending_rewrite,
    pod_template_kind,
    recorded_replicas,
    spread_drift,
)
from .statefulset import is_statefulset, mutate_statefulset
from .statefulset.mutate import owned_skip
from .trainer import is_trainjob, mutate_trainjob, read_trainjob


@dataclass
class Write:
    """One write the controller would make.

    ``action`` is ``patch`` (an RFC 6902 ``patch`` guarded by the object's
    resourceVersion) or ``create`` (``object`` is created). ``rollout`` says
    whether the write changes a pod template and so rolls pods. ``legacy_anti_affinity`` says the
    rewrite replaces pod anti-affinity (:attr:`policylib.spread.Drift.replaces_anti_affinity`).
    """

    kind: str
    namespace: str
    name: str
    reasons: list[str]
    rollout: bool
    action: str = "patch"
    patch: list[dict[str, Any]] = field(default_factory=list)
    object: dict[str, Any] | None = None
    api_version: str = APPS_API_VERSION
    resource_version: str | None = None
    error: bool = False
    legacy_anti_affinity: bool = False
    #: Rule S19: the Deployment's new constraints wait for its next rollout (``action`` is ``patch``
    #: for the metadata-only write that records it, ``none`` when it is recorded already).
    pending: str | None = None
    #: Rule S20: a stored Deployment policylib manages that carries none of its record annotations.
    unrecorded: bool = False

    def as_dict(self) -> dict[str, Any]:
        out = {"kind": self.kind, "namespace": self.namespace, "name": self.name, "reasons": self.reasons,
               "rollout": self.rollout, "action": self.action}
        if self.patch:
            out["patch"] = self.patch
        if self.object is not None:
            out["object"] = self.object
        if self.error:
            out["error"] = True
        if self.pending:
            out["pending"] = self.pending
        if self.unrecorded:
            out["unrecorded"] = True
        return out


def rolls_pods(patch: list[dict[str, Any]]) -> bool:
    """A write rolls pods exactly when it changes the pod template."""
    return any(op["path"].startswith("/spec/template") for op in patch)


def plan_deployment(deployment: dict[str, Any], config: Config, facts: ClusterFacts) -> Write | None:
    """Rules S11 and S17 for one existing Deployment.

    - the effective replica count differs from the one recorded when the spread
      was written: rewrite (HPA minReplicas changes, scale-subresource writes);
    - ``reconcileDrift: true``: a Deployment with >= hardMinReplicas effective
      replicas that still has pod anti-affinity or constraints differing from
      the current settings: remove the anti-affinity, write the current spread;
    - otherwise, or when the rewrite would change nothing: no write.
    """
    if not is_deployment(deployment) or is_opted_out(deployment):
        return None
    return _plan_spread(deployment, config, facts, mutate_workload)


def plan_statefulset(statefulset: dict[str, Any], config: Config, facts: ClusterFacts) -> Write | None:
    """Rules A4, S11, S17, S19 and S20 for one existing StatefulSet, as :func:`plan_deployment` for a Deployment
    (its policy is the StatefulSet family's, so one owned by a controller gets no write: rule A5; none with
    ``statefulSets.enabled: false``); every write
    that changes the pod template restarts the pods one ordinal at a time, highest first."""
    if not is_statefulset(statefulset) or not config.statefulSets.enabled or is_opted_out(statefulset) \
            or owned_skip(statefulset) is not None:
        return None
    return _plan_spread(statefulset, config, facts, mutate_statefulset)


def _plan_spread(deployment: dict[str, Any], config: Config, facts: ClusterFacts,
                 policy: Callable[..., Any]) -> Write | None:
    """Rules S11, S17, S19 and S20 for a Deployment or StatefulSet, written through its family's policy."""
    kind = str(deployment["kind"])
    ns = namespace_of(deployment)
    meta = deployment.get("metadata") or {}
    effective = effective_replicas(deployment, facts, ns)
    recorded = recorded_replicas(deployment)
    reasons: list[str] = []
    legacy = False
    if recorded is not None and recorded != effective.replicas:
        reasons.append(f"effective replicas changed: {recorded} when the spread was written, "
                       f"{effective.replicas} now ({effective.source})")
    elif config.host.reconcileDrift:
        drift = spread_drift(deployment, config, facts, ns)
        if drift.needs_rewrite:
            reasons += [f"reconcileDrift: {r}" for r in drift.reasons]
            legacy = drift.replaces_anti_affinity
    unrecorded = admitted_without_policy(deployment, config)
    if unrecorded and not reasons:
        return Write(kind, ns, meta.get("name", ""), [UNRECORDED_REASON], False, action="none",
                     unrecorded=True)
    if not reasons:
        return None
    held = (pod_template_kind(deployment) or DEPLOYMENT).settings(config).host.rewrite == ON_NEXT_ROLLOUT
    if held and recorded is not None and recorded != effective.replicas:   # rules S19, A9
        # rule S19: the webhook's UPDATE path with nothing changed by a user: the count change alone
        # writes the pending record, never the pod template
        result = policy(deployment, config, old=deployment, facts=facts, namespace=ns)
        pending = pending_rewrite(result.object)
        if pending and not rolls_pods(result.patch):
            return Write(kind, ns, meta.get("name", ""), reasons + [f"pending until the next rollout: {pending}"],
                         False, action="patch" if result.patch else "none", patch=result.patch,
                         resource_version=meta.get("resourceVersion"), pending=pending)
    result = policy(deployment, config, facts=facts, namespace=ns)
    if not result.patch:
        return Write(kind, ns, meta.get("name", ""), [UNRECORDED_REASON] + reasons, False, action="none",
                     unrecorded=True) if unrecorded else None
    rollout = rolls_pods(result.patch)
    detail = [r for r in result.reasons if r.startswith(("host spread enforced", "removed"))]
    return Write(kind, ns, meta.get("name", ""), reasons + detail, rollout, patch=result.patch,
                 resource_version=meta.get("resourceVersion"), legacy_anti_affinity=legacy, unrecorded=unrecorded)


#: Namespaces the webhook configuration never sends (manifests/base/mutatingwebhookconfiguration.yaml), for
#: a snapshot planned without one; the controller and ``plan --cluster`` plan only what the installed
#: configuration sends (``only``: :meth:`policylib.scope.Scope.admits`, rules W5, W6).
UNWATCHED_NAMESPACES = frozenset({"kube-system", "kube-node-lease", INSTALL_NAMESPACE})
UNRECORDED_REASON = ("no policylib record: admitted while the webhook was unreachable (failurePolicy Ignore), or "
                     "created before policylib was installed")


def admitted_without_policy(deployment: dict[str, Any], config: Config) -> bool:
    """Rule S20: a Deployment the API server stored (it has a uid) in a namespace the webhook serves,
    not opted out, while a spread is enabled, that carries none of the record annotations rule S15
    writes on every admission: the webhook never saw it (fail-open, or it predates the install).
    Manifests (no uid) never count."""
    meta = deployment.get("metadata") or {}
    if not meta.get("uid") or not (config.zone.enabled or config.host.enabled) or is_opted_out(deployment):
        return False
    if namespace_of(deployment) in UNWATCHED_NAMESPACES:
        return False
    annotations = meta.get("annotations") or {}
    return not any(k in annotations for k in RECORD_ANNOTATIONS)


def owner_reference(job: dict[str, Any]) -> dict[str, Any] | None:
    """The controller ownerReference to ``job``; None without a uid (a snapshot made from manifests)."""
    meta = job.get("metadata") or {}
    if not meta.get("uid"):
        return None
    return {"apiVersion": job["apiVersion"], "kind": job["kind"], "name": meta.get("name"), "uid": meta["uid"],
            "controller": True, "blockOwnerDeletion": True}


def owned_by(obj: dict[str, Any], job: dict[str, Any]) -> bool:
    uid = (job.get("metadata") or {}).get("uid")
    return any(r.get("controller") and (r.get("uid") == uid if uid else r.get("name") == job["metadata"].get("name"))
               and r.get("kind") == job.get("kind") for r in (obj.get("metadata") or {}).get("ownerReferences") or [])


def gang_policy(job: dict[str, Any]) -> Callable[..., Any] | None:
    """Rules J3, T3: the gang policy of a job whose PodGroups or Workloads the controller makes: a Kubeflow job's,
    a JobSet's or a TrainJob's (with its runtime among the facts); None for any other object."""
    if is_kubeflow_job(job):
        return mutate_kubeflow_job
    if is_jobset(job):
        return mutate_jobset
    if is_trainjob(job):
        return mutate_trainjob
    return None


def gang_facts(job: dict[str, Any], facts: ClusterFacts) -> ClusterFacts | None:
    """Rule T1: the facts a job's gang is computed from, whatever the cluster serves of the Workload API: a
    TrainJob's runtime alone (None for any other job, or a TrainJob whose runtime is not known)."""
    if not is_trainjob(job):
        return None
    try:
        trainjob = read_trainjob(job, namespace_of(job))
    except PolicyError:
        return None
    runtime = facts.runtime(trainjob.runtime_kind, trainjob.namespace, trainjob.runtime_name)
    return ClusterFacts.from_objects([runtime]) if runtime is not None else None


def plan_podgroups(job: dict[str, Any], config: Config, facts: ClusterFacts) -> list[Write] | None:
    """Gang ``method: podgroup`` (rules G5, J3): the job's PodGroups must exist,
    owned by the job, before its pods are scheduled (a Kubeflow job or a JobSet).

    Only jobs that carry our pod-group metadata as the gang policy writes it
    get PodGroups (the webhook wrote it, so the policy has nothing to change);
    a missing PodGroup is created with a controller ownerReference; one we own
    whose ``minMember`` differs from the job's minimum is patched; one owned by
    someone else (training-operator's own gang mode) is left alone.
    """
    policy = gang_policy(job)
    if not config.gang.enabled or config.gang.method != "podgroup" or policy is None:
        return None
    ns = namespace_of(job)
    result = policy(job, config, namespace=ns, facts=facts)   # facts: a TrainJob's runtime (rule T1)
    if result.patch or result.denial or not result.extra_objects:
        return None
    writes = []
    for pg in result.extra_objects:
        name = pg["metadata"]["name"]
        existing = facts.podgroup(pg["apiVersion"], ns, name)
        if existing is None:
            writes.append(create_owned(job, pg, f"{job['kind']} {ns}/{job['metadata'].get('name')} carries gang "
                                                f"{name} and has no PodGroup (minMember {pg['spec']['minMember']})"))
        elif owned_by(existing, job) and (existing.get("spec") or {}).get("minMember") != pg["spec"]["minMember"]:
            old = (existing.get("spec") or {}).get("minMember")
            writes.append(Write("PodGroup", ns, name, [f"minMember {old} -> {pg['spec']['minMember']}: the job's "
                                                       "minimum changed"], False,
                                patch=[{"op": "replace" if old is not None else "add", "path": "/spec/minMember",
                                        "value": pg["spec"]["minMember"]}],
                                api_version=pg["apiVersion"],
                                resource_version=(existing.get("metadata") or {}).get("resourceVersion")))
    return writes or None


def create_owned(job: dict[str, Any], obj: dict[str, Any], reason: str) -> Write:
    """The create of a gang object the job lacks (a PodGroup, a Workload), with a controller
    ownerReference to the job so garbage collection deletes it with the job."""
    owner = owner_reference(job)
    meta = obj["metadata"]
    created = dict(obj, metadata=dict(meta, **({"ownerReferences": [owner]} if owner else {})))
    reasons = [reason]
    if owner is None:
        reasons.append("the job has no uid in this snapshot: the controller sets the ownerReference")
    return Write(obj["kind"], meta["namespace"], meta["name"], reasons, False, action="create", object=created,
                 api_version=obj["apiVersion"])


def plan_workload(job: dict[str, Any], config: Config, facts: ClusterFacts) -> list[Write] | None:
    """Gang ``method: workload`` (rules G19, G22-G25, J3): the job's (a Kubeflow job's or a JobSet's)
    ``scheduling.k8s.io`` Workload, then its PodGroup, must exist in the version the cluster serves, owned by the
    job (garbage collection deletes them with it).

    Only a job that carries our scheduling-group label as the gang policy writes it gets them. A missing
    one is created with a controller ownerReference. One the job owns whose ``minCount`` differs from the
    job's minimum is patched where the version lets it change (``v1beta1``: the PodGroup's and the Workload
    template's ``gang.minCount``) and is an error entry where it is immutable (``v1alpha2``: delete both to
    have them made again); one whose topology constraint differs from ``gang.topology`` is an error entry in
    both (immutable); one owned by someone else is left alone. When the cluster serves no version policylib
    writes, one error entry says which API to enable (rule G23).
    """
    policy = gang_policy(job)
    if not config.gang.enabled or config.gang.method != "workload" or policy is None:
        return None
    ns = namespace_of(job)
    native = native_gang(config, facts)
    ref = f"{job['kind']} {ns}/{(job.get('metadata') or {}).get('name')}"
    if native is not None and native.api.version is None:
        # the gang the job carries, were an API served (a TrainJob's from its runtime)
        wanted = policy(job, config, namespace=ns, facts=gang_facts(job, facts))
        if wanted.patch or wanted.denial or not wanted.extra_objects:
            return None
        name = wanted.extra_objects[0]["metadata"]["name"]
        return [Write("Workload", ns, name, [f"{ref} carries gang {name}: no Workload or PodGroup can be made: "
                                             f"{native.api.missing()}"], False, action="none",
                      api_version=wanted.extra_objects[0]["apiVersion"], error=True)]
    result = policy(job, config, namespace=ns, facts=facts)
    if result.patch or result.denial or not result.extra_objects:
        return None
    writes = []
    for want in result.extra_objects:
        writes += _native_gang_writes(job, want, facts, ref)
    return writes or None


def _native_gang_writes(job: dict[str, Any], want: dict[str, Any], facts: ClusterFacts, ref: str) -> list[Write]:
    """Rules G19, G25: the writes one wanted Workload or PodGroup needs (see :func:`plan_workload`)."""
    kind, ns, name, count = want["kind"], want["metadata"]["namespace"], want["metadata"]["name"], min_count(want)
    existing = facts.native_gang_object(kind, ns, name, want["apiVersion"])
    if existing is None:
        return [create_owned(job, want, f"{ref} carries gang {name} and has no {kind} (minCount {count})")]
    if not owned_by(existing, job):
        return []
    writes = []
    have, keys = min_count(existing), topology_keys(want)
    if topology_keys(existing) != keys:
        writes.append(Write(kind, ns, name, [
            f"{kind} {ns}/{name} has schedulingConstraints.topology {topology_keys(existing) or 'none'} but the gang "
            f"needs {keys or 'none'} (gang.topology): the constraint is immutable, so delete the Workload and PodGroup "
            "to have them made again (an API server without the TopologyAwareWorkloadScheduling gate drops the "
            "constraint on create)"], False, action="none", api_version=want["apiVersion"], error=True))
    if have == count:
        return writes
    if want["apiVersion"].endswith("/" + NATIVE_GANG_V1ALPHA2):
        writes.append(Write(kind, ns, name, [
            f"{kind} {ns}/{name} has minCount {have} but the gang of {ref} needs {count}: its "
            "gang policy is immutable; delete the Workload and PodGroup to have them made again"], False,
            action="none", api_version=want["apiVersion"], error=True))
        return writes
    path = "/spec/podGroupTemplates/0/schedulingPolicy/gang/minCount" if kind == "Workload" else \
        "/spec/schedulingPolicy/gang/minCount"
    writes.append(Write(kind, ns, name, [f"minCount {have} -> {count}: the job's minimum changed"], False,
                        patch=[{"op": "replace" if have is not None else "add", "path": path, "value": count}],
                        api_version=want["apiVersion"],
                        resource_version=(existing.get("metadata") or {}).get("resourceVersion")))
    return writes


#: A planner: the writes one existing object needs (an entry of a workload family's ``planners``,
#: :data:`policylib.families.FAMILIES`).
Planner = Callable[[dict[str, Any], Config, ClusterFacts], "Write | list[Write] | None"]
