"""Volcano's words for the gang placement (rule N5): ``spec.networkTopology`` of the Volcano PodGroup policylib's
controller makes for a gang (method podgroup on scheduler volcano, rule G21).

``{mode: hard, highestTierAllowed: tier(L)}`` keeps every pod of the gang within one HyperNode of the level's tier
(rule N3), ``mode: soft`` makes it a preference (Volcano v1.14.1 ``scheduling.volcano.sh/v1beta1``
``NetworkTopologySpec``). Volcano's own PodGroup controller reads the pod-level
``volcano.sh/network-topology-*`` annotations only for pods it groups itself, never for the pods of a PodGroup
policylib makes, so the PodGroup is the one place these words are read.
"""
from __future__ import annotations

from typing import Any

from .levels import REQUIRED, Placement


def network_topology(p: Placement) -> tuple[dict[str, Any] | None, str]:
    """Rule N5 (the TrainJob case: :func:`trainer_podgroup_words`): the PodGroup's ``spec.networkTopology`` for the
    placement (None: nothing to write) and the reason; the node level has no HyperNode tier, so a gang kept within
    one host gets none (a reason)."""
    if p.within is None:
        return None, ""
    head = f"{p.describe_within()}: Volcano"
    if p.within.tier is None:
        return None, (f"{head}: networkTopology not written: {p.within.name} is the node level, which no HyperNode "
                      "tier is")
    mode = "hard" if p.mode == REQUIRED else "soft"
    spec = {"mode": mode, "highestTierAllowed": p.within.tier}
    return spec, (f"{head}: PodGroup spec.networkTopology {{mode: {mode}, highestTierAllowed: {p.within.tier}}} "
                  f"({p.within.name} is tier {p.within.tier})")


def trainer_podgroup_words(p: Placement, runtime: dict[str, Any]) -> tuple[str, str] | None:
    """Rule N5 for a TrainJob whose runtime has ``podGroupPolicy.volcano``: Trainer makes the Volcano PodGroup and
    copies its ``networkTopology`` from the runtime (a field a TrainJob's runtime patch cannot set), so policylib
    writes none: ``("reason", ...)`` when the runtime already says the declared placement, else ``("warning",
    ...)`` naming what to set there. None without a placement or a Volcano podGroupPolicy."""
    policy = ((runtime.get("spec") or {}).get("podGroupPolicy") or {}).get("volcano") \
        if isinstance(runtime.get("spec"), dict) else None
    want, _ = network_topology(p)
    if p.within is None or not isinstance(policy, dict):
        return None
    have = policy.get("networkTopology")
    head = f"{p.describe_within()}: Volcano"
    if want is None:
        return "reason", f"{head}: networkTopology not written: {p.within.name} is the node level, which no HyperNode tier is"
    if isinstance(have, dict) and {"mode": have.get("mode", "hard"), "highestTierAllowed": have.get(
            "highestTierAllowed", 1)} == want:
        return "reason", (f"{head}: the runtime's podGroupPolicy.volcano.networkTopology says {{mode: {want['mode']}, "
                          f"highestTierAllowed: {want['highestTierAllowed']}}} already (Trainer copies it to its "
                          "PodGroup)")
    return "warning", (f"{head}: networkTopology not written: Trainer's PodGroup takes it from the runtime's "
                       "podGroupPolicy.volcano.networkTopology, which a TrainJob cannot patch: set "
                       f"{{mode: {want['mode']}, highestTierAllowed: {want['highestTierAllowed']}}} there"
                       + (f" (it has {have})" if have is not None else ""))
