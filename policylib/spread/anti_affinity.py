"""The pod anti-affinity the spread replaces (rules S9, S10)."""
from __future__ import annotations

from typing import Any

from ..config import Config
from ..constants import DO_NOT_SCHEDULE
from ..labels import selector_matches
from ..values import json_key
from .model import (
    ANTI_AFFINITY_TERMS,
    HOST_WEAKENED_WARNING,
)


def term_selects_own_pods(term: Any, pod_labels: dict[str, Any], namespace: str) -> bool:
    """Whether a PodAffinityTerm selects the Deployment's own pods.

    Namespaces follow the API: ``namespaces`` and ``namespaceSelector`` are a
    union; both unset means the pod's own namespace; ``{}`` selects all. A
    non-empty namespaceSelector cannot be evaluated without Namespace objects
    and counts only through ``namespaces``. A term with mismatchLabelKeys is
    never counted as selecting its own revision.
    """
    if not isinstance(term, dict) or term.get("mismatchLabelKeys"):
        return False
    namespaces = term.get("namespaces") or []
    ns_selector = term.get("namespaceSelector")
    if not isinstance(namespaces, list) or not (ns_selector is None or isinstance(ns_selector, dict)):
        return False  # malformed (the API server rejects it): never removed by us
    in_scope = (not namespaces or namespace in namespaces) if ns_selector is None else \
        (ns_selector == {} or namespace in namespaces)
    return in_scope and selector_matches(term.get("labelSelector"), pod_labels)


def remove_pod_anti_affinity(affinity: Any, pod_labels: dict[str, Any], namespace: str, mode: str) -> tuple[Any, int]:
    """Rule S9: the spread replaces ``ha_topology_key`` anti-affinity.

    Returns the new affinity (None when emptied) and how many terms went. Mode
    ``own`` removes required and preferred terms that select the Deployment's
    own pods; ``all`` removes every pod anti-affinity term, as the literal
    "removes any pod anti-affinity" says literally. Emptied maps are removed.
    """
    if not isinstance(affinity, dict) or not isinstance(affinity.get("podAntiAffinity"), dict):
        return affinity, 0
    anti = affinity["podAntiAffinity"]
    new_anti, removed = {}, 0
    for key, value in anti.items():
        if key not in ANTI_AFFINITY_TERMS or not isinstance(value, list):
            new_anti[key] = value
            continue
        keep = []
        for term in value:
            inner = term.get("podAffinityTerm") if key.startswith("preferred") and isinstance(term, dict) else term
            if mode == "all" or term_selects_own_pods(inner, pod_labels, namespace):
                removed += 1
            else:
                keep.append(term)
        if keep:
            new_anti[key] = keep
    if not removed:
        return affinity, 0
    new_affinity = {k: v for k, v in affinity.items() if k != "podAntiAffinity"}
    if new_anti:
        new_affinity["podAntiAffinity"] = new_anti
    return (new_affinity or None), removed


def managed_anti_affinity(affinity: Any, pod_labels: dict[str, Any], namespace: str, mode: str) -> dict[str, list[Any]]:
    """The pod anti-affinity terms the spread replaces, by field (required/preferred)."""
    if not isinstance(affinity, dict) or not isinstance(affinity.get("podAntiAffinity"), dict):
        return {}
    out: dict[str, list[Any]] = {}
    for key, value in affinity["podAntiAffinity"].items():
        if key not in ANTI_AFFINITY_TERMS or not isinstance(value, list):
            continue
        for term in value:
            inner = term.get("podAffinityTerm") if key.startswith("preferred") and isinstance(term, dict) else term
            if mode == "all" or term_selects_own_pods(inner, pod_labels, namespace):
                out.setdefault(key, []).append(term)
    return out


def restore_anti_affinity(affinity: Any, terms: dict[str, list[Any]]) -> dict[str, Any]:
    """``affinity`` with ``terms`` put back into its podAntiAffinity."""
    new = dict(affinity) if isinstance(affinity, dict) else {}
    anti = dict(new.get("podAntiAffinity") or {}) if isinstance(new.get("podAntiAffinity"), dict) else {}
    for key, value in terms.items():
        present = anti.get(key)
        anti[key] = (list(present) if isinstance(present, list) else []) + list(value)
    new["podAntiAffinity"] = anti
    return new


def without_terms(affinity: dict[str, Any], terms: dict[str, list[Any]]) -> dict[str, Any] | None:
    """``affinity`` without ``terms`` (by field), emptied maps removed (None when nothing is left)."""
    anti = dict(affinity["podAntiAffinity"])
    for key, gone in terms.items():
        removed = {json_key(t) for t in gone}
        kept = [t for t in anti.get(key) or [] if json_key(t) not in removed]
        if kept:
            anti[key] = kept
        else:
            anti.pop(key, None)
    new = {k: v for k, v in affinity.items() if k != "podAntiAffinity"}
    if anti:
        new["podAntiAffinity"] = anti
    return new or None


def weakened_anti_affinity_warning(config: Config, effective: int) -> str:
    """Rule S10: a required self anti-affinity was removed while the host spread written is only a preference:
    the setting that would keep it enforced (kept short: kubectl prints webhook warnings whole)."""
    host = config.host
    if not host.enabled:
        fix = "enable hostTopologySpread"
    elif host.whenUnsatisfiable == DO_NOT_SCHEDULE:
        fix = f"set hostTopologySpread.hardMinReplicas <= {effective}"
    else:
        fix = "set hostTopologySpread.enforceForRequiredAntiAffinity: true"
    return f"{HOST_WEAKENED_WARNING}: {fix}"
