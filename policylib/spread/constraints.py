"""The zone and host constraints the settings write (rules S3-S7)."""
from __future__ import annotations

import math
from typing import Any

from ..config import Config, HostSpread, ZoneSpread
from ..constants import DO_NOT_SCHEDULE, SCHEDULE_ANYWAY
from ..labels import without_keys


def spread_label_selector(deployment_selector: dict[str, Any], match_label_keys: tuple[str, ...]) -> dict[str, Any]:
    """Rule S7: the Deployment's own ``spec.selector`` without any key in matchLabelKeys.

    The API server rejects a key in both labelSelector and matchLabelKeys
    (validateMatchLabelKeysInTopologySpread).
    """
    labels = deployment_selector.get("matchLabels")
    if not deployment_selector.get("matchExpressions") and isinstance(labels, dict):
        # the common case: matchLabels only, copied without the keys of matchLabelKeys
        kept = {k: v for k, v in labels.items() if k not in match_label_keys} if match_label_keys else dict(labels)
        return {"matchLabels": kept} if kept else {}
    return without_keys(deployment_selector, match_label_keys)


def _constraint(max_skew: int, topology_key: str, when: str, selector: dict[str, Any],
                match_label_keys: tuple[str, ...], min_domains: int | None = None) -> dict[str, Any]:
    """A TopologySpreadConstraint with fields in the API's order; both spreads honor taints."""
    c: dict[str, Any] = {"maxSkew": max_skew, "topologyKey": topology_key, "whenUnsatisfiable": when,
               "labelSelector": spread_label_selector(selector, match_label_keys)}
    if min_domains is not None:
        c["minDomains"] = min_domains
    c["nodeTaintsPolicy"] = "Honor"
    if match_label_keys:
        c["matchLabelKeys"] = list(match_label_keys)
    return c


def zone_constraint(selector: dict[str, Any], zone: ZoneSpread) -> dict[str, Any]:
    """Rule S3: always a preference (ScheduleAnyway)."""
    return _constraint(zone.maxSkew, zone.topologyKey, SCHEDULE_ANYWAY, selector, zone.matchLabelKeys)


def host_spread_enforced(effective: int, host: HostSpread, replaced_required: bool = False) -> bool:
    """Rule S4: DoNotSchedule only for >= hardMinReplicas effective replicas; rule S18: at any count
    when the spread replaced a required anti-affinity and ``enforceForRequiredAntiAffinity`` is on."""
    if replaced_required and host.enforceForRequiredAntiAffinity:
        return True
    return host.whenUnsatisfiable == DO_NOT_SCHEDULE and effective >= host.hardMinReplicas


def derived_max_skew(effective: int, host: HostSpread) -> int:
    """Rule S5: max(maxSkew, ceil(effective / minDomains)) when enabled."""
    if not host.enableReplicaDerivedMaxSkewRule:
        return host.maxSkew
    return max(host.maxSkew, math.ceil(effective / host.minDomains))


def host_constraint(selector: dict[str, Any], effective: int, host: HostSpread,
                    replaced_required: bool = False) -> tuple[dict[str, Any], str]:
    """Rule S6: the host constraint and the reason for its shape.

    minDomains goes only on a DoNotSchedule constraint (the API server rejects
    it otherwise); the replica-derived maxSkew applies only when enforced.
    """
    if not host_spread_enforced(effective, host, replaced_required):
        if host.whenUnsatisfiable == DO_NOT_SCHEDULE:
            why = (f"host spread is a preference: {effective} effective replicas < "
                   f"hardMinReplicas {host.hardMinReplicas}")
        else:
            why = "host spread is a preference: whenUnsatisfiable ScheduleAnyway"
        return _constraint(host.maxSkew, host.topologyKey, SCHEDULE_ANYWAY, selector, host.matchLabelKeys), why
    skew = derived_max_skew(effective, host)
    why = f"host spread enforced: {effective} effective replicas >= hardMinReplicas {host.hardMinReplicas}"
    if not host_spread_enforced(effective, host):
        why = ("host spread enforced: it replaces a required anti-affinity "
               "(hostTopologySpread.enforceForRequiredAntiAffinity)")
    if host.enableReplicaDerivedMaxSkewRule and skew > host.maxSkew:
        why += f"; maxSkew {skew} = ceil({effective}/{host.minDomains})"
    else:
        why += f"; maxSkew {skew}"
    return _constraint(skew, host.topologyKey, DO_NOT_SCHEDULE, selector, host.matchLabelKeys,
                       min_domains=host.minDomains), why


def desired_constraints(selector: dict[str, Any], effective: int, config: Config,
                        replaced_required: bool = False) -> tuple[list[dict[str, Any]], list[str]]:
    """The constraints the current settings write, zone first; ``enabled: false`` writes none."""
    out, reasons = [], []
    if config.zone.enabled:
        out.append(zone_constraint(selector, config.zone))
        reasons.append(f"zone spread on {config.zone.topologyKey}: maxSkew {config.zone.maxSkew}, ScheduleAnyway")
    if config.host.enabled:
        c, why = host_constraint(selector, effective, config.host, replaced_required)
        out.append(c)
        reasons.append(why)
    return out, reasons
