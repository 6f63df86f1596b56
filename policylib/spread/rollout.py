"""``rewrite: OnNextRollout``: a count change held until the next rollout (rule S19)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config import ON_NEXT_ROLLOUT
from ..patch import Draft
from ..result import Outcome
from .model import (
    ANNOTATIONS,
    PENDING,
    constraints_of,
    describe_constraint,
    recorded_keys,
    recorded_replicas,
    template_of,
)
from .shape import SpreadInputs
from .update import (
    keep_old_placement,
)
from .write import write_spread


def pending_note(before: list[Any], after: list[Any], recorded: int | None, effective: int) -> str:
    """What the held rewrite would change, per topology key: ``7 effective replicas (written for 4):
    kubernetes.io/hostname DoNotSchedule, maxSkew 2, minDomains 3 -> DoNotSchedule, maxSkew 3, ...``."""
    old = {c.get("topologyKey"): c for c in before if isinstance(c, dict)}
    new = {c.get("topologyKey"): c for c in after if isinstance(c, dict)}
    changes = []
    for key in sorted(k for k in set(old) | set(new) if isinstance(k, str)):
        o, n = old.get(key), new.get(key)
        if o != n:
            changes.append(f"{key} {describe_constraint(o) if o else 'none'} -> {describe_constraint(n) if n else 'none'}")
    written_for = f" (written for {recorded})" if recorded is not None else ""
    return f"{effective} effective replicas{written_for}: {'; '.join(changes) or 'placement rules differ'}"


@dataclass
class Held:
    """An UPDATE whose new count's constraints wait for the next rollout (rule S19)."""

    draft: Draft
    reasons: list[str]


def hold_for_next_rollout(obj: dict[str, Any], old: dict[str, Any], ctx: SpreadInputs) -> Held | None:
    """Rule S19: under ``hostTopologySpread.rewrite: OnNextRollout``, an UPDATE whose effective count
    changed but whose pod template the user left alone keeps the old placement (no rollout) and records
    the change it holds back in the ``policylib.io/spread-pending`` annotation. None (write as rule S11
    says) under ``OnCountChange``, when the user's update changes the pod template anyway (one rollout
    carries both), or when the new count's constraints equal the old ones (a metadata-only write)."""
    if ctx.config.host.rewrite != ON_NEXT_ROLLOUT or not recorded_keys(old):
        return None
    kept = Draft(obj)
    keep_old_placement(kept, old, ctx, Outcome())
    if template_of(kept.root) != template_of(old):
        return None   # the user rolls: the new constraints ride along
    probe = Draft(kept.root)
    write_spread(probe, ctx, Outcome(), previous=old)
    if template_of(probe.root) == template_of(old):
        return None
    note = pending_note(constraints_of(old), constraints_of(probe.root), recorded_replicas(old),
                        ctx.effective.replicas)
    if (kept.get(ANNOTATIONS) or {}).get(PENDING) != note:
        kept.dict_at(ANNOTATIONS)[PENDING] = note
    return Held(kept, [f"rewrite OnNextRollout: held until the pod template changes ({note})"])


def pending_rewrite(obj: dict[str, Any]) -> str | None:
    """Rule S19: the change a Deployment's ``policylib.io/spread-pending`` annotation holds, if any."""
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(PENDING)
    return str(value) if value else None
