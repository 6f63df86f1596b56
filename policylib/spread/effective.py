"""The effective replica count of a Deployment or a StatefulSet (rules S2, A2)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import (
    INT32_MAX,
    FieldPath,
    PolicyError,
    int_field,
    invalid,
    is_int,
    object_ref,
)
from ..facts import NO_FACTS, ClusterFacts, namespace_of
from .model import (
    AUTOSCALING_MIN_ANNOTATION,
)
from .workload import kind_of


@dataclass(frozen=True)
class Effective:
    """The effective replica count and where it came from."""

    replicas: int
    source: str
    warnings: tuple[str, ...] = ()


def hpa_min_replicas(hpa: dict[str, Any]) -> int:
    """``spec.minReplicas`` of an autoscaling/v1 or v2 HPA; the API defaults it to 1."""
    spec = hpa.get("spec") or {}
    value = spec.get("minReplicas")
    if value is None:
        return 1
    return int_field(value, object_ref(hpa), "spec.minReplicas", 0)


def effective_replicas(deployment: dict[str, Any], facts: ClusterFacts = NO_FACTS,
                       namespace: str | None = None) -> Effective:
    """Rules S2, A2: the autoscaling minimum, else the replicas.

    An HPA in the same namespace whose ``scaleTargetRef`` is the Deployment (or the StatefulSet) wins; without one,
    the annotation ``policylib.io/autoscaling-min-replicas`` states the minimum
    for clusters whose HPAs we cannot see; otherwise ``spec.replicas``, which
    the API defaults to 1.
    """
    ns = namespace or namespace_of(deployment)
    replicas = (deployment.get("spec") or {}).get("replicas")
    if replicas is not None and not (is_int(replicas) and 0 <= replicas <= INT32_MAX):
        int_field(replicas, object_ref(deployment, ns), "spec.replicas", 0)
    name = (deployment.get("metadata") or {}).get("name")
    kind = kind_of(deployment)
    hpas = facts.hpas_for(ns, kind.hpa_index_name(name)) if isinstance(name, str) and name else []
    if hpas:
        mins = sorted((hpa_min_replicas(h), h["metadata"].get("name", "")) for h in hpas)
        count, hpa_name = mins[-1]
        warnings: tuple[str, ...] = ()
        if len(hpas) > 1:
            names = ", ".join(n for _, n in mins)
            warnings = (f"{len(hpas)} HorizontalPodAutoscalers target this {kind.kind} ({names}); "
                        f"using the highest minReplicas, {count}",)
        return Effective(count, f"HorizontalPodAutoscaler {hpa_name} minReplicas {count}", warnings)
    annotations = (deployment.get("metadata") or {}).get("annotations") or {}
    if AUTOSCALING_MIN_ANNOTATION in annotations:
        raw = annotations[AUTOSCALING_MIN_ANNOTATION]
        path = FieldPath("metadata", "annotations").key(AUTOSCALING_MIN_ANNOTATION)
        try:
            count = int(str(raw).strip(), 10)
        except ValueError:
            raise PolicyError.from_errors(object_ref(deployment, ns),
                                          [invalid(path, raw, "must be a whole number as a string")]) from None
        if count <= INT32_MAX:
            int_field(count, object_ref(deployment, ns), path, 0)
            return Effective(count, f"annotation {AUTOSCALING_MIN_ANNOTATION}={count}")
        shown = str(raw).strip()
        shown = shown if len(shown) <= 20 else shown[:20] + "..."
        ignored = (f"{AUTOSCALING_MIN_ANNOTATION} {shown!r} is over int32 ({INT32_MAX}): ignored, spec.replicas "
                   "counts",)
        base = effective_replicas({**deployment, "metadata": {k: v for k, v in (deployment.get("metadata") or {}).items()
                                                              if k != "annotations"}}, facts, ns)
        return Effective(base.replicas, base.source, base.warnings + ignored)
    if replicas is None:
        return Effective(1, "spec.replicas absent (defaults to 1)")
    return Effective(replicas, f"spec.replicas {replicas}")
