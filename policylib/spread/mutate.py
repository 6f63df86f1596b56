"""The entry points: :func:`mutate_deployment` (rules P4, S2-S22) and :func:`mutate_workload`, the same rules for any
pod-template workload (a StatefulSet's family calls it: rule A4), on CREATE or UPDATE."""
from __future__ import annotations

from typing import Any

from ..config import Config
from ..errors import (
    PolicyError,
)
from ..facts import ClusterFacts
from ..patch import Draft, diff_owned
from ..request import admission
from ..result import Outcome, Result
from .effective import Effective, effective_replicas
from .model import (
    ANNOTATIONS,
    OWNED_PATHS,
    PENDING,
    constraints_of,
    recorded_replicas,
)
from .rollout import hold_for_next_rollout
from .shape import checked_old_object, spread_inputs
from .update import (
    brings_new_required_anti_affinity,
    keep_old_placement,
    update_trigger,
)
from .write import invalid_constraint_warnings, matches_current_settings, write_spread


def _old_effective(old: dict[str, Any], facts: ClusterFacts, namespace: str) -> Effective | None:
    try:
        return effective_replicas(old, facts, namespace)
    except PolicyError:
        return None


def mutate_deployment(obj: dict[str, Any], config: Config | None = None, *, old: dict[str, Any] | None = None,
                      facts: ClusterFacts | None = None, namespace: str | None = None) -> Result:
    """Rules P4, S2-S22: apply the spread rules to an ``apps/v1`` Deployment on CREATE (``old`` None) or UPDATE."""
    return mutate_workload(obj, config, old=old, facts=facts, namespace=namespace)


def mutate_workload(obj: dict[str, Any], config: Config | None = None, *, old: dict[str, Any] | None = None,
                    facts: ClusterFacts | None = None, namespace: str | None = None,
                    notes: Outcome | None = None) -> Result:
    """Rules S2-S22, A4: the spread of a pod-template workload (a Deployment or a StatefulSet, read through its
    :class:`~policylib.spread.workload.PodTemplateKind`) on CREATE (``old`` None) or UPDATE; ``notes`` are the
    caller's own reasons and warnings, given after the effective count."""
    req, skipped = admission(obj, config, old, facts, namespace)
    if skipped:
        return skipped
    ctx = spread_inputs(req)
    out = Outcome([f"effective replicas {ctx.effective.replicas} ({ctx.effective.source})"],
                  list(ctx.effective.warnings))
    if notes is not None:
        out.merge(notes)
    draft = Draft(obj)
    written: list[dict[str, Any]] = []
    if old is None:
        written = write_spread(draft, ctx, out)
    else:
        checked_old_object(old, req.ref)
        trigger = update_trigger(ctx.effective, _old_effective(old, req.facts, req.namespace), recorded_replicas(old))
        held = hold_for_next_rollout(obj, old, ctx) if trigger else None
        if not trigger and brings_new_required_anti_affinity(obj, old, ctx):
            trigger = "the update adds a required anti-affinity the spread replaces: written as on CREATE"
        if held is not None:
            out.reason(trigger or "", held.reasons[-1])
            draft = held.draft
        elif trigger:
            out.reason(trigger)
            written = write_spread(draft, ctx, out, previous=old)
        else:
            kept = Outcome()
            keep_old_placement(draft, old, ctx, kept)
            # only an update that keeping the old rules would change needs the probe rewrite
            if diff_owned(obj, draft.root, OWNED_PATHS) and matches_current_settings(obj, ctx, old):
                draft = Draft(obj)
                out.reason("placement rules already match the current settings: accepted")
            else:
                out.merge(kept)
                out.reason("effective replica count unchanged: placement rules kept")
    if written and PENDING in (draft.get(ANNOTATIONS) or {}):
        draft.dict_at(ANNOTATIONS).pop(PENDING)   # rule S19: the pending constraints are written now
        draft.prune_empty(ANNOTATIONS)
    patch = diff_owned(obj, draft.root, OWNED_PATHS)
    result_obj = draft.root if patch else obj
    out.warn(*invalid_constraint_warnings(constraints_of(result_obj), written, ctx.noun))
    return out.result(result_obj, patch)
