"""Gang scheduling metadata for Kubeflow TFJob, PyTorchJob and MPIJob (seed 002).

Seed 002 ("Gang scheduling ... All-or-Nothing") gangs every pod of a
distributed job so that all start or none do. The scheduler reads the gang
from metadata on each pod, so this policy writes it on every replica
template, in the keys and API group the configured scheduler reads
(issue 5, "Facts that bind us"; upstream sources cited per function):

========================  ==================================================
``gang.method``           what every replica template gets
========================  ==================================================
``labels``                labels ``pod-group.scheduling.sigs.k8s.io/name`` and
                          ``.../min-available`` (ACK, Koordinator)
``podgroup``              the one pod label the scheduler reads; the PodGroup
                          itself is returned in ``Result.extra_objects``
``koordinator``           annotations ``gang.scheduling.koordinator.sh/name``
                          and ``/min-available`` (+ ``/total-number`` and
                          ``/mode`` for scheduler koordinator)
========================  ==================================================

The webhook has no side effects: PodGroups are shown by ``policylib preview``
and created by the controller. Mutations edit a :class:`~policylib.patch.Draft`
and the patch is diffed from the templates' metadata, so a second run is a
no-op.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from .config import Config, GangSettings
from .errors import (INT32_MAX, FieldError, FieldPath, Path, PolicyError, duplicate, int32_errors, invalid,
                     map_errors, object_ref, raise_if_any, required)
from .facts import namespace_of
from .labels import dns1123_subdomain_errors, label_value_errors, qualified_name_errors
from .patch import Draft, diff_owned
from .result import Outcome, Result, admission

API_VERSION = "kubeflow.org/v1"
#: The MPI Operator's current API (v0.4+): the same mpiReplicaSpecs (Launcher, Worker) and
#: runPolicy.schedulingPolicy as kubeflow.org/v1, so the same gang treatment.
MPI_V2_API_VERSION = "kubeflow.org/v2beta1"
#: Where each kind keeps its replica specs (kubeflow/training-operator v1.9 CRDs; mpi-operator v2beta1).
REPLICA_SPECS = {"TFJob": "tfReplicaSpecs", "PyTorchJob": "pytorchReplicaSpecs", "MPIJob": "mpiReplicaSpecs"}
#: The kinds served in each API version.
KINDS_BY_API_VERSION = {API_VERSION: frozenset(REPLICA_SPECS), MPI_V2_API_VERSION: frozenset({"MPIJob"})}

# --- the keys each scheduler reads ------------------------------------------------
#: ACK / Koordinator lightweight coscheduling labels (seed 002 "Metode 1"; Koordinator
#: apis/extension/coscheduling.go LabelLightweightCoschedulingPodGroupName/MinAvailable).
SIGS_PREFIX = "pod-group.scheduling.sigs.k8s.io"
NAME_LABEL = f"{SIGS_PREFIX}/name"
MIN_AVAILABLE_LABEL = f"{SIGS_PREFIX}/min-available"
#: ACK's match policy (a label on pods for method labels, on the PodGroup for method podgroup).
ACK_MATCH_POLICY = f"{SIGS_PREFIX}/match-policy"
#: ACK's GangGroup key; its value is a JSON array, so it is always an annotation.
ACK_GROUPS = f"{SIGS_PREFIX}/groups"
#: The pod label of Koordinator and scheduler-plugins <= v0.24 (v1alpha1.PodGroupLabel).
LEGACY_POD_GROUP_LABEL = SIGS_PREFIX
#: The pod label of scheduler-plugins >= v0.25 (scheduling.x-k8s.io PodGroupLabel).
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
#: Koordinator gang annotations (apis/extension/coscheduling.go).
KOORD_PREFIX = "gang.scheduling.koordinator.sh"
KOORD_NAME = f"{KOORD_PREFIX}/name"
KOORD_MIN_AVAILABLE = f"{KOORD_PREFIX}/min-available"
KOORD_TOTAL_NUMBER = f"{KOORD_PREFIX}/total-number"
KOORD_MODE = f"{KOORD_PREFIX}/mode"
KOORD_WAITING_TIME = f"{KOORD_PREFIX}/waiting-time"
KOORD_GROUPS = f"{KOORD_PREFIX}/groups"
KOORD_MATCH_POLICY = f"{KOORD_PREFIX}/match-policy"
KOORD_STRICT = "Strict"
#: Volcano's pod group annotation (training-operator's Volcano gang mode, upstream examples).
VOLCANO_GROUP_NAME = "scheduling.k8s.io/group-name"

#: The PodGroup API each scheduler watches: ACK >= 1.31 accepts only scheduling.x-k8s.io
#: (seed 002 "Penting"); Koordinator still vendors scheduling.sigs.k8s.io.
PODGROUP_API_VERSION = {
    "ack": "scheduling.x-k8s.io/v1alpha1",
    "koordinator": "scheduling.sigs.k8s.io/v1alpha1",
    "scheduler-plugins": "scheduling.x-k8s.io/v1alpha1",
}
#: The pod label that points a pod at its PodGroup, per scheduler (seed 002 "Metode 2";
#: Koordinator coscheduling/util GetGangNameByPod; scheduler-plugins PodGroupLabel).
PODGROUP_POD_LABEL = {
    "ack": NAME_LABEL,
    "koordinator": LEGACY_POD_GROUP_LABEL,
    "scheduler-plugins": POD_GROUP_LABEL,
}
#: Keys whose value names a gang, in the order Koordinator's GetGangNameByPod reads them,
#: then scheduler-plugins' and Volcano's.
NAME_KEYS = (("labels", LEGACY_POD_GROUP_LABEL), ("labels", NAME_LABEL), ("annotations", KOORD_NAME),
             ("labels", POD_GROUP_LABEL), ("annotations", VOLCANO_GROUP_NAME))
#: Which of the name keys each scheduler reads on a pod.
NAME_KEYS_READ = {
    "ack": {NAME_LABEL, KOORD_NAME},
    "koordinator": {LEGACY_POD_GROUP_LABEL, NAME_LABEL, KOORD_NAME},
    "scheduler-plugins": {POD_GROUP_LABEL},
}
MIN_KEYS = (("labels", MIN_AVAILABLE_LABEL), ("annotations", KOORD_MIN_AVAILABLE))
GROUPS_KEYS = (("annotations", ACK_GROUPS), ("annotations", KOORD_GROUPS))
_GANG_EXACT_KEYS = {LEGACY_POD_GROUP_LABEL, POD_GROUP_LABEL, VOLCANO_GROUP_NAME}
_GANG_PREFIXES = (f"{SIGS_PREFIX}/", f"{KOORD_PREFIX}/")

MAX_GANG_NAME = 63
_HASH_LEN = 8


def is_kubeflow_job(obj: object) -> bool:
    """A ``kubeflow.org/v1`` TFJob, PyTorchJob or MPIJob, or a ``kubeflow.org/v2beta1`` MPIJob."""
    if not isinstance(obj, dict) or not isinstance(obj.get("apiVersion"), str) or not isinstance(obj.get("kind"), str):
        return False
    return obj["kind"] in KINDS_BY_API_VERSION.get(obj["apiVersion"], ())


def is_gang_key(key: str) -> bool:
    """Gang metadata of any scheduler: the sigs.k8s.io and Koordinator families,
    the scheduler-plugins pod label, and Volcano's group-name annotation."""
    return key in _GANG_EXACT_KEYS or key.startswith(_GANG_PREFIXES)


# --- reading the job ------------------------------------------------------------------

@dataclass(frozen=True)
class ReplicaType:
    """One replica spec: its key as written, pod count, priority class and field path."""

    key: str
    replicas: int
    priority_class: str | None
    path: str


@dataclass(frozen=True)
class KubeflowJob:
    """What the gang depends on, read from a job and checked."""

    kind: str
    name: str
    namespace: str
    specs_key: str
    types: tuple[ReplicaType, ...]
    min_available: int | None
    schedule_timeout: int | None

    @property
    def total(self) -> int:
        return sum(t.replicas for t in self.types)

    def shape(self) -> tuple:
        """What the minimum is computed from: replicas per type (case-insensitive) and minAvailable."""
        return tuple(sorted((t.key.lower(), t.replicas) for t in self.types)), self.min_available

    def template_path(self, key: str) -> tuple[str, ...]:
        return ("spec", self.specs_key, key, "template")


def _mapping(value: Any, path: Path, errs: list[FieldError]) -> dict:
    """``value`` when it is a map (None reads as empty); else ``{}`` and an error in ``errs``."""
    errs += map_errors(value, path)
    return value if isinstance(value, dict) else {}


def replica_count(spec: dict, path: FieldPath, errs: list[FieldError]) -> int:
    """``replicas`` of a replica spec; absent means 1 (training-operator setDefaultReplicas)."""
    value = spec.get("replicas")
    if value is None:
        return 1
    found = int32_errors(value, path.child("replicas"), 0)
    errs += found
    return 0 if found else value


def _replica_type(key: Any, rspec: Any, path: FieldPath, errs: list[FieldError]) -> ReplicaType | None:
    """One replica spec, read and checked (rule G7); None when it cannot be read."""
    if not isinstance(rspec, dict):
        errs.append(invalid(path, rspec, "must be a replica spec (replicas, template)"))
        return None
    template = rspec.get("template")
    count = replica_count(rspec, path, errs)
    if not isinstance(template, dict):
        errs.append(required(path.child("template"), "a replica spec needs a pod template"))
        return None
    meta = _mapping(template.get("metadata"), path.child("template", "metadata"), errs)
    for part in ("labels", "annotations"):
        _mapping(meta.get(part), path.child("template", "metadata", part), errs)
    pod_spec = _mapping(template.get("spec"), path.child("template", "spec"), errs)
    priority = pod_spec.get("priorityClassName") or None
    if priority is not None and not isinstance(priority, str):
        errs.append(invalid(path.child("template", "spec", "priorityClassName"), priority, "must be a string"))
    return ReplicaType(key, count, priority, str(path))


def read_job(obj: dict, namespace: str | None = None) -> KubeflowJob:
    """Read and check what the gang depends on (rule G7); bad input raises one :class:`PolicyError`
    listing every error.

    Replica-type keys are matched case-insensitively, as training-operator does
    when it applies its defaults after admission, so ``Worker`` and ``worker``
    in one job are one type written twice.
    """
    namespace = namespace or namespace_of(obj)
    ref = object_ref(obj, namespace)
    errs: list[FieldError] = []
    meta = _mapping(obj.get("metadata"), FieldPath("metadata"), errs)
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        errs.append(required("metadata.name", "the gang is named after the job, and a name from generateName "
                                              "is not known at admission"))
    specs_key = REPLICA_SPECS[obj["kind"]]
    specs_path = FieldPath("spec", specs_key)
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise PolicyError.from_errors(ref, errs + [required("spec", f"a {obj['kind']} needs a spec")])
    specs = spec.get(specs_key)
    if not isinstance(specs, dict):
        errs.append(required(specs_path, "a mapping of replica type to replica spec"))
        specs = {}
    types, seen = [], {}
    for key, rspec in specs.items():
        path = specs_path.child(str(key))
        if not isinstance(key, str) or not key:
            errs.append(invalid(path, key, "a replica type must be a non-empty string such as Worker"))
            continue
        if key.lower() in seen:
            errs.append(duplicate(specs_path, key, f"the same replica type as {seen[key.lower()]!r}: "
                                                   "training-operator matches replica types case-insensitively"))
            continue
        seen[key.lower()] = key
        rtype = _replica_type(key, rspec, path, errs)
        if rtype is not None:
            types.append(rtype)
    policy_path = FieldPath("spec", "runPolicy", "schedulingPolicy")
    policy = _mapping(_mapping(spec.get("runPolicy"), FieldPath("spec", "runPolicy"), errs).get("schedulingPolicy"),
                      policy_path, errs)
    min_available = policy.get("minAvailable")
    if min_available is not None:
        errs += int32_errors(min_available, policy_path.child("minAvailable"), 1)
    timeout = policy.get("scheduleTimeoutSeconds")
    if timeout is not None:
        errs += int32_errors(timeout, policy_path.child("scheduleTimeoutSeconds"), 1)
    raise_if_any(ref, errs)
    job = KubeflowJob(obj["kind"], name, namespace, specs_key, tuple(types), min_available, timeout)
    if min_available is None and job.total > INT32_MAX:
        # the gang's minimum (minMember, min-available) is an int32 field
        raise_if_any(ref, [invalid(specs_path, job.total, f"the replicas add up to more than the {INT32_MAX} a "
                                                          "gang's minimum can hold (int32)")])
    return job


def has_scheduling_policy(obj: dict) -> bool:
    run_policy = (obj.get("spec") or {}).get("runPolicy")
    return isinstance(run_policy, dict) and run_policy.get("schedulingPolicy") is not None


# --- the gangs (issue 5 "Mutation"; seed 002 "GangGroup") ----------------------------

@dataclass(frozen=True)
class Gang:
    """One gang: its name, minimum, pod count and the replica types whose pods it holds."""

    name: str
    min_available: int
    total: int
    replica_types: tuple[str, ...]


@dataclass(frozen=True)
class GangPlan:
    """The gangs of one job; ``groups`` lists ``<namespace>/<gang>`` when they form a GangGroup."""

    namespace: str
    gangs: tuple[Gang, ...]
    groups: tuple[str, ...] = ()

    def gang_of(self, replica_type: str) -> Gang | None:
        return next((g for g in self.gangs if replica_type in g.replica_types), None)


def gang_name(base: str) -> str:
    """A name that is both a DNS subdomain and a label value (issue 5 "Gang names").

    ``base`` is kept when it is both; otherwise it is lowercased, reduced to
    ``[a-z0-9-]`` and cut so that ``-`` and an 8-character SHA-256 prefix of
    ``base`` fit in 63 characters. The hash keeps two long names apart and
    gives the same name on every run.
    """
    if not dns1123_subdomain_errors(base) and not label_value_errors(base) and len(base) <= MAX_GANG_NAME:
        return base
    digest = hashlib.sha256(base.encode()).hexdigest()[:_HASH_LEN]
    head = re.sub(r"[^a-z0-9-]+", "-", base.lower()).strip("-")[:MAX_GANG_NAME - _HASH_LEN - 1].rstrip("-")
    return f"{head}-{digest}" if head else digest


def role_gang_name(job_name: str, replica_type: str) -> str:
    """``<job>-<type>``, the type lowercased, kept within 63 characters (issue 5 "groupByRole")."""
    return gang_name(f"{job_name}-{replica_type.lower()}")


def job_minimum(job: KubeflowJob) -> int:
    """``runPolicy.schedulingPolicy.minAvailable`` when set, else the sum of replicas over
    every replica type, Evaluator included (training-operator ReconcileJobs, minMember)."""
    return job.min_available if job.min_available is not None else job.total


def plan_gangs(job: KubeflowJob, settings: GangSettings) -> GangPlan | None:
    """One gang named after the job, or with ``groupByRole`` one gang per replica type
    linked as a GangGroup (seed 002 "Grup beberapa gang"). None when the job has no pods.

    A role with 0 replicas gets no gang: a GangGroup member with no pods would
    hold the other gangs forever.
    """
    if job.total == 0:
        return None
    if not settings.groupByRole:
        return GangPlan(job.namespace, (Gang(gang_name(job.name), job_minimum(job), job.total,
                                             tuple(t.key for t in job.types)),))
    gangs = tuple(Gang(role_gang_name(job.name, t.key), t.replicas, t.replicas, (t.key,))
                  for t in job.types if t.replicas > 0)
    return GangPlan(job.namespace, gangs, tuple(sorted(f"{job.namespace}/{g.name}" for g in gangs)))


def priority_violation(job: KubeflowJob, plan: GangPlan) -> str | None:
    """Seed 002 "Cara kerja": all pods of a PodGroup must share one priority.

    Gangs of a GangGroup are bound together, so the whole plan must share one
    priorityClassName; a missing one means the cluster default. Replica types
    with 0 replicas create no pods and do not count.
    """
    members = [t for t in job.types if t.replicas > 0 and plan.gang_of(t.key) is not None]
    classes = {t.priority_class for t in members}
    if len(classes) <= 1:
        return None
    listing = ", ".join(f"{t.key}: {t.priority_class or '<none: cluster default>'}" for t in members)
    what = "the gang group" if plan.groups else f"gang {plan.gangs[0].name}"
    return (f"replica types {_and([t.key for t in members])} have different priorityClassName ({listing}); "
            f"all pods of {what} must share one priority (seed 002), so no gang metadata was written")


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


# --- where each scheduler reads what --------------------------------------------------

def match_policy_key(settings: GangSettings, on_podgroup: bool) -> tuple[str, str] | None:
    """``(labels|annotations, key)`` for the match policy, or None for ``none``.

    ACK: a label on each pod (method labels) or on the PodGroup (seed 002
    "Konfigurasi kebijakan pencocokan"); its annotation method takes the
    Koordinator annotation. Koordinator reads annotations only: on pods
    GetGangMatchPolicy reads ``gang.scheduling.koordinator.sh/match-policy``,
    on a PodGroup tryInitByPodGroup reads the same key (coscheduling/core/gang.go).
    """
    if settings.matchPolicy == "none":
        return None
    if settings.scheduler == "ack" and (on_podgroup or settings.method == "labels"):
        return "labels", ACK_MATCH_POLICY
    return "annotations", KOORD_MATCH_POLICY


def groups_key(settings: GangSettings) -> str:
    """The GangGroup key (seed 002 table): ACK's sigs.k8s.io key for methods labels and
    podgroup, Koordinator's annotation otherwise and on every Koordinator object
    (Koordinator reads only ``gang.scheduling.koordinator.sh/groups``)."""
    if settings.scheduler == "ack" and settings.method in ("labels", "podgroup"):
        return ACK_GROUPS
    return KOORD_GROUPS


def groups_value(plan: GangPlan) -> str:
    """A JSON array of ``"<namespace>/<gang>"``, sorted so that every template and every run agree."""
    return json.dumps(list(plan.groups))


@dataclass
class Meta:
    """Labels and annotations for one object."""

    labels: dict = field(default_factory=dict)
    annotations: dict = field(default_factory=dict)

    def put(self, where: str, key: str, value: str) -> None:
        getattr(self, where)[key] = value

    def as_tuple(self) -> tuple[dict, dict]:
        return self.labels, self.annotations


def pod_metadata(gang: Gang, plan: GangPlan, settings: GangSettings, timeout: int | None = None) -> Meta:
    """The gang metadata every template of ``gang`` gets, per method and scheduler.

    labels: seed 002 "Metode 1". podgroup: only the label pointing at the PodGroup;
    match policy and groups go on the PodGroup. koordinator: seed 002 "Metode 3";
    ACK does not support total-number or mode, Koordinator defaults mode to Strict
    and total-number to min-available (coscheduling/core/gang.go tryInitByPodConfig);
    on Koordinator, ``gang.scheduleTimeoutSeconds`` (or the job's own) becomes the
    ``waiting-time`` annotation.
    """
    meta = Meta()
    if settings.method == "podgroup":
        meta.put("labels", PODGROUP_POD_LABEL[settings.scheduler], gang.name)
        return meta
    if settings.method == "labels":
        meta.put("labels", NAME_LABEL, gang.name)
        meta.put("labels", MIN_AVAILABLE_LABEL, str(gang.min_available))
    else:
        meta.put("annotations", KOORD_NAME, gang.name)
        meta.put("annotations", KOORD_MIN_AVAILABLE, str(gang.min_available))
        if settings.scheduler == "koordinator":
            meta.put("annotations", KOORD_TOTAL_NUMBER, str(gang.total))
            meta.put("annotations", KOORD_MODE, KOORD_STRICT)
            if timeout is not None:  # a Go duration (coscheduling/util gang_helper: time.ParseDuration)
                meta.put("annotations", KOORD_WAITING_TIME, f"{timeout}s")
    where = match_policy_key(settings, on_podgroup=False)
    if where:
        meta.put(*where, settings.matchPolicy)
    if plan.groups:
        meta.put("annotations", groups_key(settings), groups_value(plan))
    return meta


def desired_metadata(job: KubeflowJob, plan: GangPlan, settings: GangSettings) -> dict[str, tuple[dict, dict]]:
    """The gang labels and annotations of each replica template; ``({}, {})`` for a template in no gang."""
    out = {}
    for t in job.types:
        gang = plan.gang_of(t.key)
        out[t.key] = pod_metadata(gang, plan, settings, podgroup_timeout(job, settings)).as_tuple() \
            if gang else ({}, {})
    return out


def podgroup_timeout(job: KubeflowJob, settings: GangSettings) -> int:
    """``runPolicy.schedulingPolicy.scheduleTimeoutSeconds`` when set, else ``gang.scheduleTimeoutSeconds``."""
    return job.schedule_timeout if job.schedule_timeout is not None else settings.scheduleTimeoutSeconds


def build_podgroups(job: KubeflowJob, plan: GangPlan, settings: GangSettings) -> list[dict]:
    """The PodGroups of method podgroup (seed 002 "Metode 2"), in the job's namespace.

    ``apiVersion`` is the one the scheduler watches; ``minMember`` the gang's
    minimum; match policy and groups go on the PodGroup where the scheduler
    reads them there.
    """
    if settings.method != "podgroup":
        return []
    out = []
    for gang in plan.gangs:
        meta = Meta()
        where = match_policy_key(settings, on_podgroup=True)
        if where:
            meta.put(*where, settings.matchPolicy)
        if plan.groups:
            meta.put("annotations", groups_key(settings), groups_value(plan))
        metadata: dict = {"name": gang.name, "namespace": plan.namespace}
        if meta.labels:
            metadata["labels"] = meta.labels
        if meta.annotations:
            metadata["annotations"] = meta.annotations
        out.append({"apiVersion": PODGROUP_API_VERSION[settings.scheduler], "kind": "PodGroup", "metadata": metadata,
                    "spec": {"scheduleTimeoutSeconds": podgroup_timeout(job, settings),
                             "minMember": gang.min_available}})
    return out


# --- validation of what we emit -------------------------------------------------------

def metadata_errors(meta: Mapping, path: Path) -> list[FieldError]:
    """Rule G8: label keys and values, annotation keys (Kubernetes label syntax), and gang names.

    Gang names must also be DNS subdomains: Koordinator's gang cache drops a
    gang whose name is not (coscheduling/core/gang_cache.go onPodAdd).
    """
    path = path if isinstance(path, FieldPath) else FieldPath(path)
    errs: list[FieldError] = []
    for part in ("labels", "annotations"):
        values = meta.get(part) or {}
        for key, value in values.items():
            p = path.child(part).key(key)
            errs += [invalid(p, key, m) for m in qualified_name_errors(key)]
            if part == "labels":
                errs += [invalid(p, value, m) for m in label_value_errors(value)]
            elif not isinstance(value, str):
                errs.append(invalid(p, value, "must be a string"))
            if (part, key) in NAME_KEYS and isinstance(value, str):
                errs += [invalid(p, value, f"gang name: {m}") for m in dns1123_subdomain_errors(value)]
    return errs


def validate_gang_labels(obj: dict) -> list[FieldError]:
    """Check every label key and value, annotation key and gang name on a Kubeflow
    job's replica templates or on a PodGroup, with Kubernetes label syntax
    (ports in :mod:`policylib.labels`). Returns the findings with field paths."""
    if is_kubeflow_job(obj):
        key = REPLICA_SPECS[obj["kind"]]
        specs = (obj.get("spec") or {}).get(key) or {}
        errs: list[FieldError] = []
        for rtype, rspec in specs.items():
            template = rspec.get("template") if isinstance(rspec, dict) else None
            meta = template.get("metadata") if isinstance(template, dict) else None
            if isinstance(meta, dict):
                errs += metadata_errors(meta, FieldPath("spec", key, str(rtype), "template", "metadata"))
        return errs
    return metadata_errors(obj.get("metadata") or {}, "metadata")


def _check_emitted(ref: str, job: KubeflowJob, desired: dict, podgroups: list[dict]) -> None:
    """Everything we write is valid by construction; a finding here is an input we cannot serve."""
    errs = []
    for key, (labels, annots) in desired.items():
        errs += metadata_errors({"labels": labels, "annotations": annots},
                                FieldPath("spec", job.specs_key, key, "template", "metadata"))
    for pg in podgroups:
        errs += [e.under(f"PodGroup {pg['metadata']['name']}") for e in validate_gang_labels(pg)]
    raise_if_any(ref, errs)


# --- gang metadata already on the job -------------------------------------------------

def current_metadata(obj: dict, job: KubeflowJob) -> dict[str, tuple[dict, dict]]:
    """The gang keys (:func:`is_gang_key`) on each replica template, labels and annotations."""
    out = {}
    specs = obj["spec"][job.specs_key]
    for t in job.types:
        meta = specs[t.key]["template"].get("metadata") or {}
        out[t.key] = tuple({k: v for k, v in (meta.get(part) or {}).items() if is_gang_key(k)}
                           for part in ("labels", "annotations"))
    return out


def _has_gang(current: dict) -> bool:
    return any(labels or annotations for labels, annotations in current.values())


def _first(meta: tuple[dict, dict], keys: tuple) -> tuple[str, Any] | None:
    parts = {"labels": meta[0], "annotations": meta[1]}
    return next(((k, parts[w][k]) for w, k in keys if k in parts[w]), None)


def existing_metadata_findings(job: KubeflowJob, current: dict, settings: GangSettings) -> tuple[list[str], str | None]:
    """Warnings about gang metadata a job already carries, and a priority violation if any.

    Inconsistent means a scheduler would not gang the pods as the metadata
    seems to intend: templates with pods left out of every gang, one gang with
    two different minimums, a minimum that is not a whole number or exceeds
    the gang's pods, GangGroup annotations that differ between templates, or
    no key the configured scheduler reads.
    """
    warnings: list[str] = []
    with_pods = [t for t in job.types if t.replicas > 0]
    names = {t.key: _first(current[t.key], NAME_KEYS) for t in with_pods}
    missing = [t.key for t in with_pods if names[t.key] is None]
    if missing and len(missing) < len(with_pods):
        warnings.append(f"replica types {_and(missing)} carry no gang name while "
                        f"{_and([k for k in names if names[k]])} do: their pods are in no gang")
    by_gang: dict[str, list[ReplicaType]] = {}
    for t in with_pods:
        if names[t.key]:
            by_gang.setdefault(str(names[t.key][1]), []).append(t)
    violation = None
    for gname, members in by_gang.items():
        mins = {t.key: _first(current[t.key], MIN_KEYS) for t in members}
        values = {m[1] for m in mins.values() if m}
        if len(values) > 1:
            warnings.append(f"gang {gname} has different min-available on its templates ("
                            + ", ".join(f"{k}: {m[1]}" for k, m in mins.items() if m) + ")")
        for key, m in mins.items():
            if m and not (isinstance(m[1], str) and m[1].isdigit() and int(m[1]) >= 1):
                warnings.append(f"{m[0]} {m[1]!r} on {key} is not a whole number >= 1")
        pods = sum(t.replicas for t in members)
        numeric = [int(v) for v in values if isinstance(v, str) and v.isdigit()]
        if len(values) == 1 and numeric and numeric[0] > pods:
            warnings.append(f"gang {gname} needs min-available {numeric[0]} but the job creates only {pods} "
                            "pod(s) for it: it can never start")
        classes = {t.priority_class for t in members}
        if len(classes) > 1 and violation is None:
            listing = ", ".join(f"{t.key}: {t.priority_class or '<none: cluster default>'}" for t in members)
            violation = (f"replica types {_and([t.key for t in members])} of gang {gname} have different "
                         f"priorityClassName ({listing}); all pods of a gang must share one priority (seed 002)")
    groups = {t.key: _first(current[t.key], GROUPS_KEYS) for t in with_pods if names[t.key]}
    if len({g for g in groups.values()}) > 1:
        warnings.append("the GangGroup annotation differs between templates ("
                        + ", ".join(f"{k}: {g[1] if g else '<none>'}" for k, g in groups.items())
                        + "); it must be identical on every member")
    read = NAME_KEYS_READ[settings.scheduler]
    found = sorted({n[0] for n in names.values() if n})
    if found and not read.intersection(found):
        warnings.append(f"its gang keys ({', '.join(found)}) are not read by scheduler {settings.scheduler}: "
                        "these pods are not gang-scheduled by it")
    return warnings, violation


# --- the mutation ---------------------------------------------------------------------

def describe_plan(plan: GangPlan, settings: GangSettings) -> str:
    gangs = ", ".join(f"{g.name} (min-available {g.min_available} of {g.total} pods: {_and(list(g.replica_types))})"
                      for g in plan.gangs)
    what = "gang group" if plan.groups else "gang"
    return f"method {settings.method}, scheduler {settings.scheduler}: {what} {gangs}"


def _notes_on_job(job: KubeflowJob, obj: dict, settings: GangSettings, out: Outcome) -> None:
    if job.min_available is not None and job.min_available > job.total and not settings.groupByRole:
        out.warn(f"runPolicy.schedulingPolicy.minAvailable {job.min_available} exceeds the "
                            f"{job.total} pods the job creates: the gang can never be satisfied")
    if job.min_available is not None and settings.groupByRole:
        out.warn(f"runPolicy.schedulingPolicy.minAvailable {job.min_available} is a job-wide minimum "
                            "and is not used with gang.groupByRole: each role's gang needs all its replicas")
    if job.kind == "PyTorchJob" and (obj.get("spec") or {}).get("elasticPolicy") and job.min_available is None:
        out.reason("elastic PyTorchJob: the gang needs every current replica; set "
                           "runPolicy.schedulingPolicy.minAvailable to let it start with fewer")


def _owned_paths(job: KubeflowJob) -> list[tuple[str, ...]]:
    return [job.template_path(t.key) + ("metadata",) for t in job.types]


def _apply(draft: Draft, job: KubeflowJob, current: dict, desired: dict) -> None:
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


def _write(obj: dict, job: KubeflowJob, plan: GangPlan, settings: GangSettings, current: dict,
           out: Outcome, ref: str) -> Result:
    _notes_on_job(job, obj, settings, out)
    violation = priority_violation(job, plan)
    desired = desired_metadata(job, plan, settings)
    podgroups = []
    if violation:
        out.violation(violation, deny=settings.onViolation == "deny")
        desired = {k: ({}, {}) for k in desired}
    else:
        podgroups = build_podgroups(job, plan, settings)
        out.reason(describe_plan(plan, settings))
        _check_emitted(ref, job, desired, podgroups)
    draft = Draft(obj)
    _apply(draft, job, current, desired)
    patch = diff_owned(obj, draft.root, _owned_paths(job))
    return out.result(draft.root if patch else obj, patch, podgroups)


def _leave_existing(obj: dict, job: KubeflowJob, current: dict, settings: GangSettings, out: Outcome) -> Result:
    """Issue 5: a job that already carries gang metadata is left untouched, with a warning when inconsistent."""
    keys = sorted({k for labels, annotations in current.values() for k in (*labels, *annotations)})
    out.reason(f"already carries gang metadata ({', '.join(keys)}): left untouched")
    warnings, violation = existing_metadata_findings(job, current, settings)
    out.warnings += [f"existing gang metadata is inconsistent: {w}" for w in warnings]
    if violation:
        out.violation(violation, deny=settings.onViolation == "deny")
    return out.result(obj)


def _read_old(old: dict, namespace: str) -> KubeflowJob | None:
    try:
        return read_job(old, namespace) if is_kubeflow_job(old) else None
    except PolicyError:
        return None


def _update(obj: dict, job: KubeflowJob, plan: GangPlan, current: dict, old: dict, old_job: KubeflowJob,
            settings: GangSettings, out: Outcome, ref: str) -> Result:
    """Issue 5: an UPDATE that changes replicas recomputes the minimum on every template;
    other updates change nothing.

    The metadata is recomputed only when the old object carried exactly what
    this policy writes for it and the update did not change it; otherwise it
    belongs to someone else and is left as it is.
    """
    old_current = current_metadata(old, old_job)
    old_plan = plan_gangs(old_job, settings)
    ours = _has_gang(old_current) and old_plan is not None and \
        old_current == desired_metadata(old_job, old_plan, settings)
    if old_job.shape() == job.shape():
        if ours and not _has_gang(current):  # kubectl replace dropped what we wrote: put it back
            out.reason("the update dropped the gang metadata policylib wrote: restored")
            return _write(obj, job, plan, settings, current, out, ref)
        out.reason("replicas and minAvailable unchanged: gang metadata left as it is")
        violation = existing_metadata_findings(job, current, settings)[1] if _has_gang(current) else None
        if violation:
            out.violation(violation, deny=settings.onViolation == "deny")
        return out.result(obj)
    if not _has_gang(old_current):
        out.reason("replicas changed, but the job had no gang metadata before this update: "
                           "none is added to a job whose pods may already run")
        return out.result(obj)
    if not ours or not _kept_or_dropped(current, old_current):
        return _leave_existing(obj, job, current, settings, out)
    out.reason(f"replicas changed ({describe_shape(old_job)} -> {describe_shape(job)}): "
                       "gang metadata recomputed")
    return _write(obj, job, plan, settings, current, out, ref)


def _kept_or_dropped(current: dict, old_current: dict) -> bool:
    """The update left our metadata alone: each replica type kept its old gang keys or
    carries none (a type added by the update, or keys dropped by ``kubectl replace``);
    types the update removed do not matter."""
    empty = ({}, {})
    return all(meta == empty or meta == old_current.get(key) for key, meta in current.items())


def describe_shape(job: KubeflowJob) -> str:
    text = ", ".join(f"{t.key} {t.replicas}" for t in job.types)
    return text + (f", minAvailable {job.min_available}" if job.min_available is not None else "")


def mutate_kubeflow_job(obj: dict, config: Config | None = None, *, old: dict | None = None,
                        namespace: str | None = None) -> Result:
    """Apply seed 002 to a ``kubeflow.org/v1`` TFJob, PyTorchJob or MPIJob on CREATE
    (``old`` None) or UPDATE. PodGroups of method podgroup come back in
    ``Result.extra_objects``; ``Result.denial`` is set for a violation under
    ``onViolation: deny``.
    """
    req, skipped = admission(obj, config, old, None, namespace)
    if skipped:
        return skipped
    settings, namespace, ref = req.config.gang, req.namespace, req.ref
    out = Outcome()
    if settings.trainingOperatorGang:
        out.reason(training_operator_reason(obj))
        return out.result(obj)
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    if not meta.get("name") and meta.get("generateName"):
        out.warn("the job has only generateName: its gang is named after the job, whose name is not "
                            "known at admission, so no gang metadata was written (set metadata.name)")
        return out.result(obj)
    job = read_job(obj, namespace)
    plan = plan_gangs(job, settings)
    if plan is None:
        out.reason("the job has no pods (every replica type has 0 replicas): nothing to gang")
        return out.result(obj)
    current = current_metadata(obj, job)
    desired = desired_metadata(job, plan, settings)
    if current == desired and priority_violation(job, plan) is None:
        out.reason(f"gang metadata up to date: {describe_plan(plan, settings)}")
        return out.result(obj, extra=build_podgroups(job, plan, settings))
    old_job = _read_old(old, namespace) if old is not None else None
    if old_job is not None:
        return _update(obj, job, plan, current, old, old_job, settings, out, ref)
    if _has_gang(current):
        return _leave_existing(obj, job, current, settings, out)
    return _write(obj, job, plan, settings, current, out, ref)


def training_operator_reason(obj: dict) -> str:
    """Why ``trainingOperatorGang: true`` leaves every job alone.

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
