"""What an UPDATE keeps (rules S11-S13) and the re-applied anti-affinity it removes again (rule S22)."""
from __future__ import annotations

from typing import Any

from ..constants import DO_NOT_SCHEDULE
from ..patch import Draft
from ..result import SKIP_KEY, Outcome
from ..values import json_key
from .anti_affinity import (
    managed_anti_affinity,
    restore_anti_affinity,
    weakened_anti_affinity_warning,
    without_terms,
)
from .effective import Effective
from .model import (
    AFFINITY,
    ANNOTATIONS,
    CONSTRAINTS,
    RECORD_ANNOTATIONS,
    REQUIRED_ANTI_AFFINITY,
    affinity_of,
    constraints_of,
    managed_keys,
    recorded_keys,
    replaced_required_before,
    split_managed,
)
from .shape import SpreadInputs


def update_trigger(new: Effective, old: Effective | None, recorded: int | None) -> str | None:
    """Rule S11: on UPDATE, write only when the effective count changed.

    Changed from the old object, or from the count recorded when the spread was
    last written (an HPA's minReplicas can change without a write to the
    Deployment). Returns the reason, or None to keep the old placement.
    """
    if old is None:
        return "old object unreadable: writing the spread"
    if new.replicas != old.replicas:
        return f"effective replicas changed {old.replicas} -> {new.replicas}"
    if recorded is not None and recorded != new.replicas:
        return f"effective replicas {new.replicas} differ from the {recorded} recorded when the spread was written"
    return None


def keep_old_placement(draft: Draft, old: dict[str, Any], ctx: SpreadInputs, out: Outcome) -> None:
    """Rule S12: keep the old object's placement rules.

    Managed constraints and the record come back from the old object when the new one dropped or
    changed them (``kubectl replace`` drops them), so an update never rolls pods through this policy
    unless the count changed. A Deployment policylib never wrote keeps its previous rules too when an
    update drops them: its constraints on the managed keys and its anti-affinity that the spread would
    replace (a constraint on another key that the update drops is the user's own change).
    """
    if not recorded_keys(old):
        keep_unwritten_placement(draft, old, ctx, out)
        return
    remove_restored_anti_affinity(draft, old, ctx, out)
    keys = managed_keys(ctx.config, old, draft.original)
    current = constraints_of(draft.root)
    others, ours_new = split_managed(current, keys)
    _, ours_old = split_managed(constraints_of(old), keys)
    if ours_new != ours_old:
        new = others + ours_old
        draft.set(CONSTRAINTS, new) if new else draft.delete(CONSTRAINTS)
        changed = sorted(k for k in keys if [c for c in ours_new if c.get("topologyKey") == k] !=
                         [c for c in ours_old if c.get("topologyKey") == k])
        if ours_new:
            out.warn(f"reverted changes to the managed spread on {', '.join(changed)}: set by policylib "
                                f"when the effective replica count changes (opt out: label {SKIP_KEY}=true)")
        else:
            out.reason(f"restored the spread on {', '.join(changed)} from the old object")
    old_annotations = (old.get("metadata") or {}).get("annotations") or {}
    new_annotations = draft.get(ANNOTATIONS) or {}
    if any(old_annotations.get(k) != new_annotations.get(k) for k in RECORD_ANNOTATIONS):
        target = draft.dict_at(ANNOTATIONS)
        for k in RECORD_ANNOTATIONS:
            if k in old_annotations:
                target[k] = old_annotations[k]
            else:
                target.pop(k, None)
        draft.prune_empty(ANNOTATIONS)


def keep_unwritten_placement(draft: Draft, old: dict[str, Any], ctx: SpreadInputs, out: Outcome) -> None:
    """Rule S13: a Deployment policylib never wrote, updated by a manifest that drops its placement (a new
    generator version, ``kubectl replace``) with its count unchanged: put back what was dropped, per
    managed topology key and for the anti-affinity the spread would replace. With both spreads off
    nothing of ours is in play, and the update is the user's."""
    if not (ctx.config.zone.enabled or ctx.config.host.enabled):
        return
    keys = managed_keys(ctx.config, old, draft.original)
    current = constraints_of(draft.root)
    present = {c.get("topologyKey") for c in current if isinstance(c, dict)}
    _, ours_old = split_managed(constraints_of(old), keys)
    dropped = [c for c in ours_old if c.get("topologyKey") not in present]
    kept = []
    if dropped:
        draft.set(CONSTRAINTS, current + dropped)
        kept.append("spread on " + ", ".join(sorted({c.get("topologyKey", "") for c in dropped})))
    old_spec = ((old.get("spec") or {}).get("template") or {}).get("spec") or {}
    old_terms = managed_anti_affinity(old_spec.get("affinity"), ctx.pod_labels, ctx.namespace,
                                      ctx.config.removePodAntiAffinity)
    new_terms = managed_anti_affinity(draft.get(AFFINITY), ctx.pod_labels, ctx.namespace,
                                      ctx.config.removePodAntiAffinity)
    if old_terms and not new_terms:
        draft.set(AFFINITY, restore_anti_affinity(draft.get(AFFINITY), old_terms))
        kept.insert(0, "anti-affinity")
    if kept:
        out.warn(f"kept the dropped placement ({'; '.join(kept)}) until replicas change, or "
                            "reconcileDrift")


def restored_anti_affinity(obj: dict[str, Any], old: dict[str, Any], ctx: SpreadInputs) -> dict[str, list[Any]]:
    """Rule S22: the pod anti-affinity terms the spread replaces that ``obj`` has and the stored
    Deployment ``old``, which policylib wrote (S15's record), does not: terms an UPDATE brings back.
    With both spreads off nothing is replaced, and so nothing is brought back."""
    config = ctx.config
    if not recorded_keys(old) or not (config.zone.enabled or config.host.enabled):
        return {}
    mode = config.removePodAntiAffinity
    new_terms = managed_anti_affinity(affinity_of(obj), ctx.pod_labels, ctx.namespace, mode)
    old_terms = managed_anti_affinity(affinity_of(old), ctx.pod_labels, ctx.namespace, mode)
    out: dict[str, list[Any]] = {}
    for key, terms in new_terms.items():
        stored = {json_key(t) for t in old_terms.get(key, [])}
        back = [t for t in terms if json_key(t) not in stored]
        if back:
            out[key] = back
    return out


def remove_restored_anti_affinity(draft: Draft, old: dict[str, Any], ctx: SpreadInputs, out: Outcome) -> int:
    """Rule S22: the anti-affinity the spread replaces gets the CREATE treatment on an UPDATE of a
    Deployment policylib wrote (S15's record), so a re-applied manifest changes nothing.

    ``kubectl apply``'s three-way merge puts back a term the webhook removed (the last-applied
    annotation has it, the live object does not); server-side apply and ``kubectl replace`` send the
    manifest, which has it. Removed again, the stored pod template (and its hash) stays the same.
    Terms the stored object still has are its own placement and stay (S12). Returns how many terms
    went; a required one under a host spread that is only a preference warns as on CREATE (S10)."""
    terms = restored_anti_affinity(draft.root, old, ctx)
    if not terms:
        return 0
    affinity = without_terms(draft.get(AFFINITY), terms)
    draft.set(AFFINITY, affinity) if affinity is not None else draft.delete(AFFINITY)
    removed = sum(len(t) for t in terms.values())
    scope = "" if ctx.config.removePodAntiAffinity == "all" else f" selecting the {ctx.noun}'s own pods"
    out.reason(f"removed {removed} pod anti-affinity term(s){scope} that the update brought back: "
               "the spread replaced them when it was written")
    host = next((c for c in constraints_of(old) if isinstance(c, dict)
                 and c.get("topologyKey") == ctx.config.host.topologyKey), None)
    if terms.get(REQUIRED_ANTI_AFFINITY) and (host is None or host.get("whenUnsatisfiable") != DO_NOT_SCHEDULE):
        out.warn(weakened_anti_affinity_warning(ctx.config, ctx.effective.replicas))
    return removed


def brings_new_required_anti_affinity(obj: dict[str, Any], old: dict[str, Any], ctx: SpreadInputs) -> bool:
    """Rule S22: an UPDATE of a Deployment policylib wrote brings a required self anti-affinity that the
    record does not say the spread replaced (S18): a change of the user's, written as on CREATE."""
    if replaced_required_before(old):
        return False
    return bool(restored_anti_affinity(obj, old, ctx).get(REQUIRED_ANTI_AFFINITY))
