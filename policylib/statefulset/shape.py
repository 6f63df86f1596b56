"""The fields of a StatefulSet the spread reads beside a Deployment's (rule A1)."""
from __future__ import annotations

from typing import Any

from ..errors import FieldError, FieldPath, int32_errors, invalid, not_supported

#: ``spec.podManagementPolicy`` (k8s.io/api apps/v1 ``PodManagementPolicyType``); immutable once created.
POD_MANAGEMENT_POLICIES = ("OrderedReady", "Parallel")
#: ``spec.updateStrategy.type``: 1.37's alpha ``Recreate`` is accepted as the API server does behind its gate.
UPDATE_STRATEGIES = ("RollingUpdate", "OnDelete", "Recreate")


def statefulset_errors(obj: dict[str, Any]) -> list[FieldError]:
    """Rule A1: besides the spread's own shape (rule S1), the StatefulSet's ``podManagementPolicy`` and
    ``updateStrategy.type`` are values the API takes, ``ordinals.start`` an int32 of at least 0 and
    ``volumeClaimTemplates`` a list of objects; every error at once, with its field path."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return []
    errs: list[FieldError] = []
    policy = spec.get("podManagementPolicy")
    if policy is not None and policy not in POD_MANAGEMENT_POLICIES:
        errs.append(not_supported("spec.podManagementPolicy", policy, POD_MANAGEMENT_POLICIES))
    strategy = spec.get("updateStrategy")
    if strategy is not None and not isinstance(strategy, dict):
        errs.append(invalid("spec.updateStrategy", strategy, "must be an object"))
    elif isinstance(strategy, dict) and strategy.get("type") is not None \
            and strategy["type"] not in UPDATE_STRATEGIES:
        errs.append(not_supported("spec.updateStrategy.type", strategy["type"], UPDATE_STRATEGIES))
    ordinals = spec.get("ordinals")
    if ordinals is not None and not isinstance(ordinals, dict):
        errs.append(invalid("spec.ordinals", ordinals, "must be an object"))
    elif isinstance(ordinals, dict) and ordinals.get("start") is not None:
        errs += int32_errors(ordinals["start"], "spec.ordinals.start", 0)
    claims = spec.get("volumeClaimTemplates")
    if claims is not None and not isinstance(claims, list):
        errs.append(invalid("spec.volumeClaimTemplates", claims, "must be a list"))
    elif isinstance(claims, list):
        path = FieldPath("spec", "volumeClaimTemplates")
        errs += [invalid(path.index(i), c, "must be an object") for i, c in enumerate(claims) if not isinstance(c, dict)]
    return errs


def update_strategy(obj: dict[str, Any]) -> str:
    """``spec.updateStrategy.type``, defaulted as the API server does (RollingUpdate)."""
    strategy = (obj.get("spec") or {}).get("updateStrategy") or {}
    return str(strategy.get("type") or "RollingUpdate")


def controller_owner(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The StatefulSet's controller ownerReference (a LeaderWorkerSet's, an operator's), or None."""
    refs = (obj.get("metadata") or {}).get("ownerReferences")
    return next((r for r in refs if isinstance(r, dict) and r.get("controller") is True), None) \
        if isinstance(refs, list) else None
