"""Writing the spread and its record (rules S14-S16)."""
from __future__ import annotations

from typing import Any

from ..constants import DO_NOT_SCHEDULE
from ..patch import Draft, diff_owned
from ..result import Outcome
from ..validation import validate_topology_spread_constraints
from .anti_affinity import (
    managed_anti_affinity,
    remove_pod_anti_affinity,
    weakened_anti_affinity_warning,
)
from .constraints import (
    desired_constraints,
)
from .model import (
    AFFINITY,
    ANNOTATIONS,
    CONSTRAINTS,
    OWNED_PATHS,
    RECORD_ANNOTATIONS,
    RECORD_KEYS,
    RECORD_REPLICAS,
    RECORD_REQUIRED,
    RECORD_SETTINGS,
    REQUIRED_ANTI_AFFINITY,
    constraints_of,
    managed_keys,
    replaced_required_before,
    split_managed,
)
from .shape import SpreadInputs


def write_spread(draft: Draft, ctx: SpreadInputs, out: Outcome, previous: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Rule S15: write the current spread: replace managed constraints, drop legacy anti-affinity, record.
    Returns the constraints written.

    ``previous`` is the object whose record says which keys we wrote before
    (the old object on UPDATE).
    """
    config = ctx.config
    required = managed_anti_affinity(draft.get(AFFINITY), ctx.pod_labels, ctx.namespace,
                                     config.removePodAntiAffinity).get(REQUIRED_ANTI_AFFINITY)
    replaced_required = bool(required) or replaced_required_before(draft.original, previous)
    desired, why = desired_constraints(ctx.selector, ctx.effective.replicas, config, replaced_required)
    out.reason(*why)
    current = constraints_of(draft.root)
    others, _ = split_managed(current, managed_keys(config, draft.original, previous))
    new = others + desired
    if new != current:
        if new:
            draft.set(CONSTRAINTS, new)
        else:
            draft.delete(CONSTRAINTS)
    annotations = draft.get(ANNOTATIONS) or {}
    if desired:
        affinity, removed = remove_pod_anti_affinity(draft.get(AFFINITY), ctx.pod_labels, ctx.namespace,
                                                     config.removePodAntiAffinity)
        if removed:
            draft.set(AFFINITY, affinity) if affinity is not None else draft.delete(AFFINITY)
            scope = "" if config.removePodAntiAffinity == "all" else f" selecting the {ctx.noun}'s own pods"
            out.reason(f"removed {removed} pod anti-affinity term(s){scope}: the spread replaces them")
            host = next((c for c in desired if c["topologyKey"] == config.host.topologyKey), None)
            if required and (host is None or host["whenUnsatisfiable"] != DO_NOT_SCHEDULE):
                out.warn(weakened_anti_affinity_warning(config, ctx.effective.replicas))
        record = {RECORD_REPLICAS: str(ctx.effective.replicas), RECORD_SETTINGS: config.spread_fingerprint(),
                  RECORD_KEYS: ",".join(c["topologyKey"] for c in desired)}
        if replaced_required:
            record[RECORD_REQUIRED] = "true"
        for k, v in record.items():
            if annotations.get(k) != v:
                draft.dict_at(ANNOTATIONS).update(record)
                break
    elif any(k in annotations for k in RECORD_ANNOTATIONS):
        target = draft.dict_at(ANNOTATIONS)
        for k in RECORD_ANNOTATIONS:
            target.pop(k, None)
        draft.prune_empty(ANNOTATIONS)
    if not desired:
        out.reason("both spreads are disabled: no constraints written")
    return desired


def matches_current_settings(obj: dict[str, Any], ctx: SpreadInputs, old: dict[str, Any]) -> bool:
    """Rule S14: whether ``obj`` already carries exactly what the current settings write (the
    controller's reconcileDrift rewrite, or a user who applied it): such an update is
    accepted, never reverted to the old object's rules."""
    probe = Draft(obj)
    written = write_spread(probe, ctx, Outcome(), previous=old)
    return bool(written) and not diff_owned(obj, probe.root, OWNED_PATHS)


def invalid_constraint_warnings(constraints: list[Any], written: list[dict[str, Any]], noun: str = "Deployment") -> list[str]:
    """Rule S16: report constraints the API server would reject; ours are valid by construction,
    so the check runs only when the list holds constraints we did not just write."""
    if constraints == written:
        return []
    return [f"{err} (the API server will reject this {noun})"
            for err in validate_topology_spread_constraints(constraints or None)]
