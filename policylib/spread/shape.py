"""The workload the spread reads (a Deployment or a StatefulSet), checked (rules S1, A1), and the inputs the spread is
computed from."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config import Config
from ..constants import APPS_API_VERSION
from ..errors import (
    INT32_MAX,
    FieldError,
    int32_errors,
    invalid,
    is_int,
    map_errors,
    raise_if_any,
    required,
)
from ..labels import selector_plainly_valid, validate_label_selector
from ..limits import SPREAD_ENTRIES, budget, budget_errors
from ..request import Admission
from .effective import Effective, effective_replicas
from .model import (
    CONSTRAINTS_PATH,
)
from .workload import PodTemplateKind, kind_of

ANTI_AFFINITY_PATH = "spec.template.spec.affinity.podAntiAffinity"


@dataclass(frozen=True)
class SpreadInputs:
    """What the spread of one Deployment or StatefulSet is computed from; ``config`` is the settings as written for
    its kind (:meth:`~policylib.spread.workload.PodTemplateKind.settings`)."""

    config: Config
    namespace: str
    selector: dict[str, Any]
    pod_labels: dict[str, Any]
    effective: Effective
    kind: PodTemplateKind

    @property
    def noun(self) -> str:
        return self.kind.kind


def deployment_shape_errors(obj: dict[str, Any], entries: int = SPREAD_ENTRIES) -> list[FieldError]:
    """Rule S1: the fields the spread policy reads have the API's types: a non-empty valid selector,
    metadata and pod template maps, a constraint list and an affinity object; and the lists it walks are
    within their budget, ``entries`` (rule P7: that error alone, before anything is read). All errors at once."""
    too_many = spread_budget_errors(obj, entries)
    if too_many:
        return too_many
    if _plainly_valid_shape(obj):
        return []
    meta = obj.get("metadata")
    meta_errs = [] if isinstance(meta, dict) else [invalid("metadata", meta, "must be an object")]
    for key in ("labels", "annotations"):
        meta_errs += map_errors((meta if isinstance(meta, dict) else {}).get(key), f"metadata.{key}")
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [required("spec", f"a {kind_of(obj).kind} needs a spec")] + meta_errs
    selector = spec.get("selector")
    if not isinstance(selector, dict) or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        errs = [required("spec.selector", f"{APPS_API_VERSION} {kind_of(obj).kind}s need a non-empty selector")]
    else:
        errs = validate_label_selector(selector, "spec.selector")
    errs += meta_errs
    if spec.get("replicas") is not None:
        errs += int32_errors(spec["replicas"], "spec.replicas", 0)
    template = spec.get("template")
    if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
        return errs + [required("spec.template.spec", f"a {kind_of(obj).kind} needs a pod template")]
    constraints = template["spec"].get("topologySpreadConstraints")
    if constraints is not None and not isinstance(constraints, list):
        errs.append(invalid(CONSTRAINTS_PATH, constraints, "must be a list"))
    template_meta = template.get("metadata")
    errs += map_errors(template_meta, "spec.template.metadata")
    errs += map_errors((template_meta if isinstance(template_meta, dict) else {}).get("labels"),
                       "spec.template.metadata.labels")
    affinity = template["spec"].get("affinity")
    if affinity is not None and not isinstance(affinity, dict):
        errs.append(invalid("spec.template.spec.affinity", affinity, "must be an object"))
    return errs


#: What the spread's budget counts (rule P7), for the message.
SPREAD_SCOPE = "the spread reads of the selector, the topologySpreadConstraints and the pod anti-affinity together"


def spread_budget_errors(obj: dict[str, Any], entries: int = SPREAD_ENTRIES) -> list[FieldError]:
    """Rule P7: the fields the spread walks entry by entry (the selector, the constraints, the pod anti-affinity
    terms) hold at most ``entries`` together; counted before any is read."""
    spec = obj.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    template = spec.get("template")
    pod = template.get("spec") if isinstance(template, dict) else None
    pod = pod if isinstance(pod, dict) else {}
    affinity = pod.get("affinity")
    return budget_errors((("spec.selector", spec.get("selector")),
                          (CONSTRAINTS_PATH, pod.get("topologySpreadConstraints")),
                          (ANTI_AFFINITY_PATH, affinity.get("podAntiAffinity") if isinstance(affinity, dict) else None)),
                         entries, SPREAD_SCOPE)


def _plainly_valid_shape(obj: dict[str, Any]) -> bool:
    """Every check of :func:`deployment_shape_errors` passes, told by type tests alone (the common case, with no
    error to name); any doubt goes to the full check, which names each error."""
    meta, spec = obj.get("metadata"), obj.get("spec")
    if not (isinstance(meta, dict) and isinstance(spec, dict)):
        return False
    labels, annotations = meta.get("labels"), meta.get("annotations")
    if not ((labels is None or isinstance(labels, dict)) and (annotations is None or isinstance(annotations, dict))):
        return False
    selector, replicas, template = spec.get("selector"), spec.get("replicas"), spec.get("template")
    if not (isinstance(selector, dict) and selector.get("matchLabels") and selector_plainly_valid(selector)):
        return False
    if replicas is not None and not (is_int(replicas) and 0 <= replicas <= INT32_MAX):
        return False
    if not isinstance(template, dict):
        return False
    pod, template_meta = template.get("spec"), template.get("metadata")
    if not isinstance(pod, dict) or not (template_meta is None or isinstance(template_meta, dict)):
        return False
    template_labels = template_meta.get("labels") if template_meta is not None else None
    constraints, affinity = pod.get("topologySpreadConstraints"), pod.get("affinity")
    return ((template_labels is None or isinstance(template_labels, dict))
            and (constraints is None or isinstance(constraints, list)) and (affinity is None or isinstance(affinity, dict)))


def _checked_shape(obj: dict[str, Any], ref: str, update: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """The selector and pod labels, after :func:`deployment_shape_errors` found nothing (with an UPDATE's budget
    when ``update``)."""
    raise_if_any(ref, deployment_shape_errors(obj, budget(SPREAD_ENTRIES, update)))
    template = obj["spec"]["template"]
    return obj["spec"]["selector"], (template.get("metadata") or {}).get("labels") or {}


def checked_old_object(old: Any, ref: str) -> None:
    """Rule S1 for the old object of an UPDATE (the API server's stored Deployment): the update rules
    read it too; its errors are named under ``oldObject``."""
    if not isinstance(old, dict):
        raise_if_any(ref, [invalid("oldObject", old, "must be an object")])
    raise_if_any(ref, [e.under("oldObject") for e in deployment_shape_errors(old, budget(SPREAD_ENTRIES, True))])


def spread_inputs(req: Admission) -> SpreadInputs:
    """The Deployment or StatefulSet read and checked (rules S1, A1), with its effective replica count (rules S2,
    A2) and the settings as written for its kind (rule A3)."""
    selector, pod_labels = _checked_shape(req.obj, req.ref, req.old is not None)
    effective = effective_replicas(req.obj, req.facts, req.namespace)
    kind = kind_of(req.obj)
    return SpreadInputs(kind.settings(req.config), req.namespace, selector, pod_labels, effective, kind)
