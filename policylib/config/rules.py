"""The checks across settings, as data (rule C8).

:data:`GANG_COMBINATIONS` and the Volcano rules are what loading checks (:mod:`policylib.config.validate`)
and what the config schema carries as ``if``/``then`` (:mod:`policylib.config.schema`), so a validator of the
schema alone (``helm install`` with the chart's values schema) refuses what loading refuses. A new check across
settings is an entry here; its schema form and its error follow.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..constants import NATIVE_GANG_GROUP, VOLCANO_PODGROUP_API_VERSION
from ..errors import FieldError, forbidden
from .declare import setting_properties
from .settings import GANG_SCHEDULERS, section_classes


@dataclass(frozen=True)
class Combination:
    """Rule C8: a combination of one section's settings the configuration refuses, as data: when each
    ``when`` setting has one of its values, ``key`` must have one of ``allowed`` (a setting left out has
    its default). :func:`combination_errors` checks it and :func:`combination_schema` writes it as a JSON
    Schema ``if``/``then``, so ``config_schema()`` (and the Helm chart's values schema made from it) refuses
    what loading refuses. ``message`` names the values (``str.format`` over the section's settings)."""

    rule: str
    section: str
    when: tuple[tuple[str, tuple[Any, ...]], ...]
    key: str
    allowed: tuple[Any, ...]
    #: The settings the error names, in the order it names them.
    names: tuple[str, ...]
    message: str

    def refuses(self, values: Mapping[str, Any]) -> bool:
        return all(values[k] in vs for k, vs in self.when) and values[self.key] not in self.allowed

    def error(self, values: Mapping[str, Any]) -> FieldError:
        return forbidden(" and ".join(f"{self.section}.{k}" for k in self.names), self.message.format(**values))


def _others(choices: tuple[str, ...], *left_out: str) -> tuple[str, ...]:
    return tuple(c for c in choices if c not in left_out)


def _gang(rule: str, when: dict[str, tuple[Any, ...]], key: str, allowed: tuple[Any, ...], names: tuple[str, ...],
          message: str) -> Combination:
    return Combination(rule, "gang", tuple(when.items()), key, allowed, names, message)


#: Rules G6, G16 and G21: the gang combinations a scheduler does not support, in the order they are reported.
GANG_COMBINATIONS: tuple[Combination, ...] = (
    _gang("G6", {"method": ("labels",)}, "scheduler", _others(GANG_SCHEDULERS, "scheduler-plugins"),
          ("method", "scheduler"),
          "gang.method 'labels' is not supported on scheduler 'scheduler-plugins': the lightweight "
          "pod-group.scheduling.sigs.k8s.io/name labels work on ACK and Koordinator only (supported there: podgroup)"),
    _gang("G6", {"method": ("koordinator",)}, "scheduler", _others(GANG_SCHEDULERS, "scheduler-plugins"),
          ("method", "scheduler"),
          "gang.method 'koordinator' is not supported on scheduler 'scheduler-plugins': it does not read "
          "gang.scheduling.koordinator.sh annotations (supported there: podgroup)"),
    _gang("G6", {"scheduler": ("scheduler-plugins",)}, "matchPolicy", ("none",), ("matchPolicy", "scheduler"),
          "gang.matchPolicy {matchPolicy!r} is not supported on scheduler 'scheduler-plugins': its coscheduling has "
          "no match policy (supported: none)"),
    _gang("G6", {"matchPolicy": ("waiting-running-succeed",)}, "scheduler", ("ack", "volcano"),
          ("matchPolicy", "scheduler"),
          "gang.matchPolicy 'waiting-running-succeed' is not supported on scheduler {scheduler!r}: it is an ACK-only "
          "match policy (supported: none, only-waiting, waiting-and-running, once-satisfied)"),
    _gang("G6", {"method": ("koordinator",), "scheduler": ("ack",)}, "matchPolicy", ("none", "once-satisfied"),
          ("matchPolicy", "method"),
          "gang.matchPolicy {matchPolicy!r} is not supported with gang.method koordinator on scheduler ack "
          "(supported: once-satisfied)"),
    _gang("G6", {"scheduler": ("scheduler-plugins",)}, "groupByRole", (False,), ("groupByRole", "scheduler"),
          "gang.groupByRole true is not supported on scheduler 'scheduler-plugins': it has no GangGroup "
          "(supported: false)"),
    # Rule G16: method workload is Kubernetes' own gang scheduling, which only the default kube-scheduler does,
    # and kube-scheduler reads no other method; what the 1.36 API cannot express is refused.
    _gang("G16", {"method": ("workload",)}, "scheduler", ("kube-scheduler", "volcano"),   # volcano: G21 says it
          ("method", "scheduler"),
          "gang.method 'workload' is not supported on scheduler {scheduler!r}: only the default kube-scheduler reads "
          f"{NATIVE_GANG_GROUP} PodGroups (supported: kube-scheduler)"),
    _gang("G16", {"scheduler": ("kube-scheduler",)}, "method", ("workload",), ("method", "scheduler"),
          "gang.method {method!r} is not supported on scheduler 'kube-scheduler': the default scheduler gangs only "
          "pods whose spec.schedulingGroup names a scheduling.k8s.io PodGroup (supported there: workload)"),
    _gang("G16", {"method": ("workload",)}, "matchPolicy", ("none",), ("matchPolicy", "method"),
          "gang.matchPolicy {matchPolicy!r} is not supported with gang.method workload: a "
          + NATIVE_GANG_GROUP + " gang policy has only minCount (supported: none)"),
    _gang("G16", {"method": ("workload",)}, "groupByRole", (False,), ("groupByRole", "method"),
          "gang.groupByRole true is not supported with gang.method workload: Kubernetes gangs each PodGroup on "
          "its own in the versions policylib writes (the GangScheduling plugin's Permit counts one PodGroup's pods; "
          "the CompositePodGroup that binds several is 1.37 alpha, v1alpha3 only) (supported: false)"),
    _gang("G16", {"method": ("workload",)}, "operatorGang", ("none",), ("operatorGang", "method"),
          "gang.operatorGang {operatorGang!r} is not supported with gang.method workload: the operator's gang mode "
          "makes its own PodGroups for its own scheduler (supported: none)"),
    # Rule G25: a topology level is written on the PodGroup of method workload only (Volcano PodGroups take
    # volcano.networkTopology; the other schedulers have none).
    _gang("G25", {"method": ("labels", "podgroup", "koordinator")}, "topology", ("none",), ("topology", "method"),
          "gang.topology {topology!r} is not supported with gang.method {method!r}: the level is written as the "
          "schedulingConstraints of a scheduling.k8s.io PodGroup, method workload only (supported: none)"),
    # Rule G21: on scheduler volcano, only method podgroup (Volcano gangs the pods of a Volcano PodGroup named by
    # their annotation scheduling.k8s.io/group-name), no match policy, no GangGroup.
    _gang("G21", {"scheduler": ("volcano",)}, "method", ("podgroup",), ("method", "scheduler"),
          "gang.method {method!r} is not supported on scheduler 'volcano': Volcano gangs only the pods of a Volcano "
          f"PodGroup ({VOLCANO_PODGROUP_API_VERSION}), named by their annotation scheduling.k8s.io/group-name "
          "(supported there: podgroup)"),
    _gang("G21", {"scheduler": ("volcano",)}, "matchPolicy", ("none",), ("matchPolicy", "scheduler"),
          "gang.matchPolicy {matchPolicy!r} is not supported on scheduler 'volcano': its gang plugin counts every "
          "pod of the PodGroup (supported: none)"),
    _gang("G21", {"scheduler": ("volcano",)}, "groupByRole", (False,), ("groupByRole", "scheduler"),
          "gang.groupByRole true is not supported on scheduler 'volcano': it has no GangGroup (supported: false)"),
)


def _shown(value: Any) -> str:
    return json.dumps(value) if isinstance(value, bool) else str(value)


def _has_one_of(pairs: Iterable[tuple[str, tuple[Any, ...]]], properties: Mapping[str, Any]) -> dict[str, Any]:
    """A schema that holds when each setting has one of its values; a setting left out has its default, so it
    is required only when its default is not one of them."""
    pairs = list(pairs)
    schema: dict[str, Any] = {"properties": {k: {"enum": list(vs)} for k, vs in pairs}}
    required = [k for k, vs in pairs if properties[k]["default"] not in vs]
    if required:
        schema["required"] = required
    return schema


def combination_schema(c: Combination) -> dict[str, Any]:
    """Rule C8: a :class:`Combination` as a JSON Schema ``if``/``then`` on its section."""
    properties = setting_properties(section_classes()[c.section])
    when = " and ".join(f"{c.section}.{k} is {' or '.join(_shown(v) for v in vs)}" for k, vs in c.when)
    return {"description": f"Rule {c.rule}: when {when}, {c.section}.{c.key} is "
                           f"{' or '.join(_shown(v) for v in c.allowed)}.",
            "if": _has_one_of(c.when, properties), "then": _has_one_of(((c.key, c.allowed),), properties)}


#: Volcano releases whose scheduler ignores a partition's highestTierName (rule V20): the supported ones
#: before v1.15.0, that is v1.14.x (``volcano.version`` is v1.14.0 or newer; leading zeros read as numbers).
UNENFORCED_TIER_NAME_VERSION = r"^v?0*1\.0*14\.[0-9]+$"

_SOFT = {"type": "object", "required": ["mode"], "properties": {"mode": {"const": "soft"}}}
_TIER_NAME = {"type": "object", "required": ["highestTierName"],
              "properties": {"highestTierName": {"type": "string", "minLength": 1}}}

#: Rule V4 on ``volcano.networkTopology``, as validate_network_topology checks it.
NETWORK_TOPOLOGY_RULES: tuple[dict[str, Any], ...] = (
    {"description": "Rule V4: highestTierAllowed and highestTierName are exclusive: set one.",
     "if": {"required": ["highestTierAllowed"], "properties": {"highestTierAllowed": {"type": "integer"}}},
     "then": {"properties": {"highestTierName": {"type": "null"}}}},
    {"description": "Rule V4: hard mode (the default) needs highestTierAllowed or highestTierName; without one the "
                    "Volcano scheduler does not enforce it.",
     "if": {"properties": {"mode": {"const": "hard"}}},
     "then": {"anyOf": [{"required": ["highestTierAllowed"], "properties": {"highestTierAllowed": {"type": "integer"}}},
                        {"required": ["highestTierName"], "properties": {"highestTierName": {"type": "string"}}}]}},
)

#: Rule V3 on ``volcano.restartPartitionEvents``, as validate_restart_partition_events checks it.
RESTART_EVENT_RULES: tuple[dict[str, Any], ...] = (
    {"description": "Rule V3: each event at most once.", "uniqueItems": True},
    {"description": "Rule V3: '*' covers every event and stands alone.",
     "if": {"type": "array", "contains": {"const": "*"}}, "then": {"maxItems": 1}},
)

#: Rules V5 and V20 on the ``volcano`` section, as check_volcano checks them.
VOLCANO_RULES: tuple[dict[str, Any], ...] = (
    {"description": "Rules V5, C5: with partitionSize set, the network topology may not be soft.",
     "if": {"required": ["partitionSize"], "properties": {"partitionSize": {"type": "integer"}}},
     "then": {"properties": {"networkTopology": {"not": _SOFT}}}},
    {"description": "Rule V20: with partitionSize set, a Volcano version before v1.15.0 ignores the network "
                    "topology's highestTierName: use highestTierAllowed.",
     "if": {"required": ["partitionSize", "version"],
            "properties": {"partitionSize": {"type": "integer"},
                           "version": {"type": "string", "pattern": UNENFORCED_TIER_NAME_VERSION}}},
     "then": {"properties": {"networkTopology": {"not": _TIER_NAME}}}},
)


def spread_key_rule(mine: str, other: str) -> dict[str, Any]:
    """Both spreads on and ``other``'s topologyKey left at its default: ``mine`` may not take that default. (Two
    keys given with the same value cannot be said in JSON Schema: the Helm chart's templates refuse them.)"""
    default = setting_properties(section_classes()[other])["topologyKey"]["default"]
    return {"description": f"{mine}.topologyKey must differ from {other}.topologyKey (default {default}) while both "
                           "spreads are enabled.",
            "if": {"properties": {mine: {"properties": {"enabled": {"const": True}}},
                                  other: {"properties": {"enabled": {"const": True}, "topologyKey": False}}}},
            "then": {"properties": {mine: {"properties": {"topologyKey": {"not": {"const": default}}}}}}}


