"""Drift under ``reconcileDrift`` (rule S17)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config import Config
from ..facts import ClusterFacts
from ..patch import Draft
from ..request import admission
from ..result import Outcome
from .model import (
    AFFINITY,
    constraints_of,
    describe_constraint,
    managed_keys,
    split_managed,
)
from .shape import spread_inputs
from .workload import is_spread_workload
from .write import write_spread


@dataclass(frozen=True)
class Drift:
    """Whether an existing Deployment or StatefulSet needs a rewrite under reconcileDrift, and why."""

    needs_rewrite: bool
    effective: int
    reasons: tuple[str, ...]
    #: The Deployment has pod anti-affinity the spread replaces (the legacy ha_topology_key rule): a
    #: fact for counting and deciding, where ``reasons`` are words for people.
    replaces_anti_affinity: bool = False


def spread_drift(deployment: dict[str, Any], config: Config | None = None, facts: ClusterFacts | None = None,
                 namespace: str | None = None) -> Drift:
    """Rule S17: rewrite a Deployment that has >= hardMinReplicas
    effective replicas and still has pod anti-affinity, or constraints that differ from
    the current settings.

    "Differ" is measured against what :func:`write_spread` would write, so a
    Deployment this policy would leave unchanged never counts as drift; the
    reasons name each difference.
    """
    req, skipped = admission(deployment, config, None, facts, namespace)
    if not is_spread_workload(deployment) or skipped:
        return Drift(False, 0, ("not a managed Deployment or StatefulSet",))
    ctx = spread_inputs(req)
    config, effective = ctx.config, ctx.effective
    if effective.replicas < config.host.hardMinReplicas:
        return Drift(False, effective.replicas, (f"{effective.replicas} effective replicas < hardMinReplicas "
                                                 f"{config.host.hardMinReplicas}: kept until the count changes",))
    draft = Draft(deployment)
    write_spread(draft, ctx, Outcome())
    reasons = []
    before_aff, after_aff = draft.original["spec"]["template"]["spec"].get("affinity"), draft.get(AFFINITY)
    replaces_anti_affinity = before_aff != after_aff
    if replaces_anti_affinity:
        reasons.append("has pod anti-affinity that the spread replaces")
    before, after = constraints_of(deployment), constraints_of(draft.root)
    if before != after:
        keys = managed_keys(config, deployment)
        _, old_ours = split_managed(before, keys)
        _, new_ours = split_managed(after, keys)
        old_by_key = {c.get("topologyKey"): c for c in old_ours}
        new_by_key = {c.get("topologyKey"): c for c in new_ours}
        for key in sorted(set(old_by_key) | set(new_by_key)):
            o, n = old_by_key.get(key), new_by_key.get(key)
            if o is None and n is not None:
                reasons.append(f"missing spread on {key} ({describe_constraint(n)})")
            elif n is None:
                reasons.append(f"has a spread on {key} that the current settings do not write")
            elif o is not None and o != n:
                was, now = describe_constraint(o), describe_constraint(n)
                reasons.append(f"spread on {key} differs: {was} -> {now}"
                               if was != now else f"spread on {key} differs in selector or policies")
        if not reasons:
            reasons.append("topology spread constraints differ from the current settings")
    return Drift(bool(reasons), effective.replicas, tuple(reasons), replaces_anti_affinity)
