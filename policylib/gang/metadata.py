"""The gang labels (or Koordinator annotations) of each replica template, and their checks."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ..config import GangSettings
from ..errors import FieldError, FieldPath, Path, invalid, raise_if_any
from ..labels import dns1123_subdomain_errors, label_value_errors, qualified_name_errors
from .gangs import Gang, GangPlan, podgroup_timeout
from .job import KubeflowJob
from .keys import (
    KOORD_MIN_AVAILABLE,
    KOORD_MODE,
    KOORD_NAME,
    KOORD_STRICT,
    KOORD_TOTAL_NUMBER,
    KOORD_WAITING_TIME,
    MIN_AVAILABLE_LABEL,
    NAME_KEYS,
    NAME_LABEL,
    PODGROUP_POD_ANNOTATION,
    PODGROUP_POD_LABEL,
    REPLICA_SPECS,
    SCHEDULING_GROUP_LABEL,
    is_gang_key,
    is_kubeflow_job,
)
from .match import groups_key, groups_value, match_policy_key


@dataclass
class Meta:
    """Labels and annotations for one object."""

    labels: dict[str, Any] = field(default_factory=dict)
    annotations: dict[str, Any] = field(default_factory=dict)

    def put(self, where: str, key: str, value: str) -> None:
        getattr(self, where)[key] = value

    def as_tuple(self) -> tuple[dict[str, Any], dict[str, Any]]:
        return self.labels, self.annotations


def pod_metadata(gang: Gang, plan: GangPlan, settings: GangSettings, timeout: int | None = None) -> Meta:
    """Rule G4: the gang metadata every template of ``gang`` gets, per method and scheduler.

    labels: the lightweight coscheduling labels. podgroup: only the label pointing at the
    PodGroup; match policy and groups go on the PodGroup. koordinator: the Koordinator annotations;
    ACK does not support total-number or mode, Koordinator defaults mode to Strict
    and total-number to min-available (coscheduling/core/gang.go tryInitByPodConfig);
    on Koordinator, ``gang.scheduleTimeoutSeconds`` (or the job's own) becomes the
    ``waiting-time`` annotation.
    """
    meta = Meta()
    if settings.method == "workload":   # rule G16: the label the webhook turns into spec.schedulingGroup
        meta.put("labels", SCHEDULING_GROUP_LABEL, gang.name)
        return meta
    if settings.method == "podgroup" and settings.scheduler in PODGROUP_POD_ANNOTATION:
        meta.put("annotations", PODGROUP_POD_ANNOTATION[settings.scheduler], gang.name)   # rule G21
        return meta
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


def desired_metadata(job: KubeflowJob, plan: GangPlan,
                     settings: GangSettings) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """The gang labels and annotations of each replica template; ``({}, {})`` for a template in no gang."""
    out = {}
    for t in job.types:
        gang = plan.gang_of(t.key)
        out[t.key] = pod_metadata(gang, plan, settings, podgroup_timeout(job, settings)).as_tuple() \
            if gang else ({}, {})
    return out



def metadata_errors(meta: Mapping[str, Any], path: Path) -> list[FieldError]:
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


def validate_gang_labels(obj: dict[str, Any]) -> list[FieldError]:
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


def check_emitted(ref: str, job: KubeflowJob, desired: dict[str, Any], podgroups: list[dict[str, Any]]) -> None:
    """Everything we write is valid by construction; a finding here is an input we cannot serve."""
    errs = []
    for key, (labels, annots) in desired.items():
        errs += metadata_errors({"labels": labels, "annotations": annots},
                                FieldPath("spec", job.specs_key, key, "template", "metadata"))
    for pg in podgroups:
        errs += [e.under(f"PodGroup {pg['metadata']['name']}") for e in validate_gang_labels(pg)]
    raise_if_any(ref, errs)



def current_metadata(obj: dict[str, Any], job: KubeflowJob) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """The gang keys (:func:`is_gang_key`) on each replica template, labels and annotations."""
    out = {}
    specs = obj["spec"][job.specs_key]
    for t in job.types:
        meta = specs[t.key]["template"].get("metadata") or {}
        labels, annots = ({k: v for k, v in (meta.get(part) or {}).items() if is_gang_key(k)}
                          for part in ("labels", "annotations"))
        out[t.key] = (labels, annots)
    return out


def has_gang(current: dict[str, Any]) -> bool:
    return any(labels or annotations for labels, annotations in current.values())


def first_key(meta: tuple[dict[str, Any], dict[str, Any]], keys: tuple[Any, ...]) -> tuple[str, Any] | None:
    parts = {"labels": meta[0], "annotations": meta[1]}
    return next(((k, parts[w][k]) for w, k in keys if k in parts[w]), None)
