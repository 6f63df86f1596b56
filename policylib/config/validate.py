"""Checking a configuration: schema errors as field errors, and the checks across settings (rules C3, C7, C8).

:func:`schema_errors` validates a document against :func:`~policylib.config.schema.config_schema` (without
its ``if``/``then`` rules) and turns each error into a :class:`SettingError` that names the key path and the
value; :func:`cross_errors` runs the checks across settings (:mod:`policylib.config.rules`), each returning
every error it finds.
"""
from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping

from jsonschema import Draft202012Validator, FormatChecker, ValidationError

from ..constants import HOSTNAME_LABEL
from ..errors import ErrorType, FieldError, not_supported
from ..labels import dns1123_subdomain_errors, qualified_name_errors, tier_labels
from ..topology.levels import TIER, Level, declared_levels, discovery_tiers, old_key_level
from ..volcano_api.partitions import (
    partition_tier_name_enforced,
    validate_network_topology,
    validate_partition_topology_mode,
)
from ..volcano_api.policies import validate_restart_partition_events
from .rules import GANG_COMBINATIONS
from .schema import config_schema
from .settings import GangSettings, HostSpread, VolcanoSettings, ZoneSpread


@dataclass(frozen=True)
class SettingError(FieldError):
    """A field error of the configuration: its detail names the bad value itself, so it prints as
    ``path: detail`` (the configuration is our own document, not an API object)."""

    @property
    def message(self) -> str:
        return self.detail or super().message


_FORMATS = FormatChecker(formats=())


def _label_key_problem(value: str) -> str | None:
    if not value:
        return f"must be a non-empty label key, got {value!r}"
    errs = qualified_name_errors(value)
    return f"{value!r} is not a valid label key: {errs[0]}" if errs else None


def _volcano_version_problem(value: str) -> str | None:
    match = re.fullmatch(r"v?(\d+)\.(\d+)\.(\d+)", value)
    if not match:
        return f"must be a Volcano release like v1.15.1, got {value!r}"
    if tuple(map(int, match.groups())) < (1, 14, 0):
        return f"must be v1.14.0 or newer (partitionPolicy and RestartPartition), got {value!r}"
    return None


#: A string format of the schema: what a value of the wrong type is told, and the check of a string.
_FORMAT_RULES: dict[str, tuple[Callable[[Any], str], Callable[[str], str | None]]] = {
    "label-key": (lambda v: f"must be a non-empty label key, got {v!r}", _label_key_problem),
    "match-label-key": (lambda v: f"must be a non-empty label key, got {v!r}",
                        lambda v: None if v == "none" else _label_key_problem(v)),
    "volcano-version": (lambda v: f"must be a Volcano release like v1.15.1, got {v!r}", _volcano_version_problem),
    "gang-topology": (lambda v: f"must be none, zone, tier-N or a tier's node label key, got {v!r}",
                      lambda v: None if v in ("none", "zone") or re.fullmatch(r"tier-[1-9][0-9]*", v)
                      else _label_key_problem(v)),
    "dns-subdomain": (lambda v: f"must be a lowercase DNS subdomain name, got {v!r}",
                      lambda v: f"must be a lowercase DNS subdomain name, got {v!r}" if dns1123_subdomain_errors(v)
                      else None),
}


def _format_check(check: Callable[[str], str | None]) -> Callable[[object], bool]:
    def run(value: object) -> bool:
        problem = check(value) if isinstance(value, str) else None
        if problem:
            raise ValueError(problem)
        return True
    return run


for _name, (_, _check) in _FORMAT_RULES.items():
    _FORMATS.checks(_name, raises=ValueError)(_format_check(_check))


def _field(path: Iterable[Any]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _type_words(types: Any) -> str:
    names = {"object": "a mapping", "array": "a list", "string": "a string", "integer": "an integer",
             "boolean": "true or false", "null": "null"}
    listed = [names[t] for t in (types if isinstance(types, list) else [types]) if t != "null"]
    return " or ".join(listed)


def _schema_detail(error: ValidationError) -> str:
    """The detail of one schema error, in the words the settings used before the schema: what is allowed
    and the value given."""
    schema, value, kind = error.schema, error.instance, error.validator
    assert isinstance(schema, dict)
    custom = schema.get("x-invalid")
    if kind == "format":
        return str(error.cause)
    if kind == "type" and isinstance(schema.get("format"), str) and schema["format"] in _FORMAT_RULES:
        return _FORMAT_RULES[schema["format"]][0](value)
    if kind == "type" and schema.get("type") == ["object", "null"] and "additionalProperties" in schema and not custom:
        return f"must be a mapping, got {type(value).__name__}"
    if kind == "uniqueItems":
        return f"lists a key twice: {value!r}"
    if custom:
        return f"{custom}; got {value!r}" if kind in ("enum", "const", "type") else custom
    if kind in ("type", "minimum") and "integer" in schema.get("type", ()):
        return f"must be an integer >= {schema.get('minimum', 1)}, got {value!r}"
    if kind == "maximum":
        return f"must be at most {schema['maximum']} (the API's int32 fields), got {value}"
    if kind == "type" and schema.get("type") == "boolean":
        return f"must be true or false, got {value!r}"
    if kind == "type":
        return f"must be {_type_words(schema.get('type'))}, got {value!r}"
    if kind == "enum":
        return f"must be one of {', '.join(schema['enum'])}; got {value!r}"
    return str(error.message)


def unknown_key(path: str, key: Any, known: Sequence[str]) -> SettingError:
    """Rule C3: an unknown key, with the closest known key when there is one."""
    close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(known)}"
    return SettingError(ErrorType.NOT_SUPPORTED, f"{path}.{key}" if path else str(key), key, f"unknown key{hint}")


def _setting_errors(error: ValidationError) -> list[FieldError]:
    """One :class:`jsonschema.ValidationError` as field errors (an unknown-keys error lists each key)."""
    path = _field(error.absolute_path)
    schema = error.schema
    assert isinstance(schema, dict)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = list(schema.get("properties", {}))
        return [unknown_key(path, key, known) for key in error.instance if key not in known]
    if "propertyNames" in error.relative_schema_path:
        return [SettingError(ErrorType.INVALID, f"{path}.{error.instance}", error.instance, _schema_detail(error))]
    if error.validator == "enum" and error.absolute_path and isinstance(error.absolute_path[-1], int):
        # A list of an API's values (Volcano's events): reported as the API reports them.
        return [not_supported(path, error.instance, schema["enum"])]
    kind = ErrorType.REQUIRED if error.validator == "required" else (
        ErrorType.DUPLICATE if error.validator == "uniqueItems" else ErrorType.INVALID)
    return [SettingError(kind, path, error.instance, _schema_detail(error))]


_VALIDATOR = Draft202012Validator(config_schema(combinations=False), format_checker=_FORMATS)


def schema_errors(body: Mapping[str, Any]) -> list[FieldError]:
    """Every error of ``body`` (the top-level form) against :func:`config_schema`, ordered by field."""
    # A wrong-typed value also fails its subschemas' keywords (format, items): keep one error per field,
    # the most general (the one found highest in the schema).
    found = sorted(_VALIDATOR.iter_errors(body), key=lambda e: len(e.relative_schema_path))
    by_field: dict[str, FieldError] = {}
    for error in found:
        for fe in _setting_errors(error):
            by_field.setdefault(fe.field, fe)
    return [by_field[f] for f in sorted(by_field)]


# --- checks across settings: each returns every error it finds ---------------------------------

def volcano_errors(v: Mapping[str, Any]) -> list[FieldError]:
    """Rules V3 and V4 on the raw ``volcano`` section, and rule H1 on its discovery list."""
    errs = validate_restart_partition_events(v.get("restartPartitionEvents"), "volcano.restartPartitionEvents")
    errs += validate_network_topology(v.get("networkTopology"), "volcano.networkTopology")
    errs += discovery_errors(v.get("networkTopologyDiscovery") or [])
    return errs


def discovery_errors(sources: list[Any]) -> list[FieldError]:
    """Rule H1: the node level is each label topology's last tier, and no label is listed twice."""
    errs: list[FieldError] = []
    for i, item in enumerate(sources):
        if item.get("source") != "label":
            continue
        for name, tiers in item["config"]["networkTopologyTypes"].items():
            tp = f"volcano.networkTopologyDiscovery[{i}].config.networkTopologyTypes.{name}"
            labels = [tier["nodeLabel"] for tier in tiers]
            if labels[-1] != HOSTNAME_LABEL:
                errs.append(SettingError(ErrorType.INVALID, f"{tp}[{len(labels) - 1}].nodeLabel", labels[-1],
                                         f"the last entry is the node level and must be {HOSTNAME_LABEL} "
                                         f"(rule H1); got {labels[-1]!r}"))
            if len(set(labels)) != len(labels):
                errs.append(SettingError(ErrorType.DUPLICATE, tp, labels, f"lists a label twice: {labels}"))
    return errs


def check_volcano(v: VolcanoSettings) -> list[FieldError]:
    """Rules C5 and V5: with a partition policy (volcano.partitionSize), soft network topology is not supported;
    rule V20: before v1.15.0 Volcano's scheduler ignores a partition's highestTierName."""
    if v.partitionSize is None or v.networkTopology is None:
        return []
    errs = validate_partition_topology_mode(v.networkTopology.as_spec(), "volcano.networkTopology")
    if v.networkTopology.highestTierName and not partition_tier_name_enforced(v.version):
        errs.append(SettingError(ErrorType.FORBIDDEN, "volcano.networkTopology.highestTierName",
                                 v.networkTopology.highestTierName,
                                 f"Volcano {v.version}'s scheduler ignores a partition's highestTierName (enforced "
                                 "from v1.15.0, volcano issue 5189): use highestTierAllowed"))
    return errs


def gang_combination_errors(g: GangSettings) -> list[FieldError]:
    """Rules G6, G16 and G21: combinations a scheduler does not support (:data:`GANG_COMBINATIONS`); each error
    names the values and what is supported there."""
    values = asdict(g)
    return [c.error(values) for c in GANG_COMBINATIONS if c.refuses(values)]


def spread_key_errors(zone: ZoneSpread, host: HostSpread) -> list[FieldError]:
    """The two spreads, both on, need two topology keys."""
    if zone.enabled and host.enabled and zone.topologyKey == host.topologyKey:
        return [SettingError(ErrorType.INVALID, "hostTopologySpread.topologyKey", host.topologyKey,
                             f"must differ from zoneTopologySpread.topologyKey (both are {zone.topologyKey!r})")]
    return []


#: Checks of one raw section that passed the schema, before it becomes a dataclass.
RAW_CHECKS: dict[str, Callable[[Mapping[str, Any]], list[FieldError]]] = {"volcano": volcano_errors}


def cross_errors(sections: Mapping[str, Any], given: frozenset[str] = frozenset()) -> list[FieldError]:
    """Every error across settings; ``given``: the ``section.key`` settings the document gives (an older key
    given beside ``topology`` must agree with it, rule N2)."""
    errs: list[FieldError] = []
    declared = "topology" in sections and bool(sections["topology"].levels)
    if "volcano" in sections:
        errs += check_volcano(sections["volcano"])
    if "gang" in sections:
        errs += gang_combination_errors(sections["gang"])
    if "gang" in sections and "volcano" in sections and not declared:
        errs += topology_errors(sections["gang"], sections["volcano"])
    declaration = declaration_errors(sections["topology"]) if "topology" in sections else []
    errs += declaration
    if declared and not declaration:   # the older keys are read against well-formed levels only
        errs += agreement_errors(sections, given)
    if "zoneTopologySpread" in sections and "hostTopologySpread" in sections:
        errs += spread_key_errors(sections["zoneTopologySpread"], sections["hostTopologySpread"])
    return errs


def topology_errors(gang: Any, volcano: Any) -> list[FieldError]:
    """Rules G25 and J5: a ``gang.topology`` or ``gang.jobSetExclusiveTopology`` the configuration does not
    declare: a tier that no enabled label topology of ``volcano.networkTopologyDiscovery`` has, a tier number
    whose topologies name different keys, a label key listed as no tier."""
    return (level_errors("gang.topology", gang.topology, volcano)
            + level_errors("gang.jobSetExclusiveTopology", gang.jobSetExclusiveTopology, volcano))


def level_errors(key: str, value: str, volcano: Any) -> list[FieldError]:
    """Rules G25 and J5: the errors of one setting that names a topology level (``key``, its ``value``)."""
    if value in ("none", "zone"):
        return []
    tiers = discovery_tiers(volcano)
    if not tiers:
        return [FieldError(ErrorType.INVALID, key, value,
                           "names a tier, but volcano.networkTopologyDiscovery declares no enabled label topology: "
                           f"list the node labels of the tiers there (top tier first, {HOSTNAME_LABEL} last), "
                           "or use zone")]
    match = TIER.fullmatch(value)
    if match:
        n = int(match.group(1))
        keys = sorted({keys[n - 1] for _, keys in tiers if n <= len(keys)})
        if not keys:
            deepest = max(len(keys) for _, keys in tiers)
            return [FieldError(ErrorType.INVALID, key, value,
                               f"volcano.networkTopologyDiscovery's label topologies have at most {deepest} tier(s)")]
        if len(keys) > 1:
            return [FieldError(ErrorType.INVALID, key, value,
                               f"tier {n} is a different node label in each label topology ({', '.join(keys)}): "
                               "name the tier by its label key")]
        return []
    listed = sorted({k for _, keys in tiers for k in keys})
    if value not in listed:
        return [FieldError(ErrorType.INVALID, key, value,
                           f"is not a tier of volcano.networkTopologyDiscovery (its tiers' node labels: "
                           f"{', '.join(listed)}); use none, zone, tier-N or one of those")]
    return []


# --- the one topology declaration (rules N1, N2) -------------------------------------------------

def declaration_errors(t: Any) -> list[FieldError]:
    """Rule N1: level names unique, node labels unique, ``kubernetes.io/hostname`` only last (Kueue's Topology
    rule, and Volcano's label discovery's node level), and the placement naming declared levels."""
    errs: list[FieldError] = []
    names: set[str] = set()
    labels: set[str] = set()
    for i, (name, label) in enumerate(t.levels):
        if name in names:
            errs.append(SettingError(ErrorType.DUPLICATE, f"topology.levels[{i}].name", name,
                                     f"names a level twice: {name!r}"))
        if label in labels:
            errs.append(SettingError(ErrorType.DUPLICATE, f"topology.levels[{i}].nodeLabel", label,
                                     f"lists a node label twice: {label!r}"))
        if label == HOSTNAME_LABEL and i != len(t.levels) - 1:
            errs.append(SettingError(ErrorType.INVALID, f"topology.levels[{i}].nodeLabel", label,
                                     f"{HOSTNAME_LABEL} is the node level and may only be the last level"))
        names.add(name)
        labels.add(label)
    for key, value in (("topology.gangs.within", t.gangs.within), ("topology.jobSets.jobPerDomain",
                                                                   t.jobSets.jobPerDomain)):
        if value != "none" and value not in names:
            listed = ", ".join(name for name, _ in t.levels) or "none declared"
            errs.append(SettingError(ErrorType.INVALID, key, value,
                                     f"must be none or a level of topology.levels ({listed}); got {value!r}"))
    return errs


def _disagree(key: str, value: Any, other: str, other_value: Any, why: str) -> FieldError:
    return SettingError(ErrorType.INVALID, key, value,
                        f"{value!r} disagrees with {other} {other_value!r}: {why} (give only {other}, or make them "
                        "agree)")


def _old_level_errors(key: str, value: str, levels: tuple[Level, ...], zone_key: str, placed: Level | None,
                      new_key: str, mode: str | None) -> list[FieldError]:
    """Rule N2: an older level key (``gang.topology``, ``gang.jobSetExclusiveTopology``) given beside the
    declaration must name the level the declaration places at (and, for a gang, a required placement)."""
    if value == "none":
        return []
    level = old_key_level(levels, value, zone_key)
    shown = placed.name if placed else "none"
    if level is None:
        return [_disagree(key, value, new_key, shown, "it names no level of topology.levels (levels: "
                          + ", ".join(f"{lv.name} {lv.node_label}" for lv in levels) + ")")]
    if placed is None or level.node_label != placed.node_label:
        return [_disagree(key, value, new_key, shown, f"{value!r} is level {level.name} ({level.node_label})")]
    if mode is not None and mode != "required":
        return [_disagree(key, value, "topology.gangs.mode", mode, f"{key} is a required placement")]
    return []


def agreement_errors(sections: Mapping[str, Any], given: frozenset[str]) -> list[FieldError]:
    """Rule N2: with ``topology.levels`` declared, every older key given must agree with it: ``gang.topology`` and
    ``gang.jobSetExclusiveTopology`` name the placed level, the spreads' topology keys the node labels of the
    levels named ``zone`` and ``host``, Volcano's label discovery's tiers the declared levels' tiers (rule N3),
    ``volcano.networkTopology.highestTierAllowed`` a declared tier. Every disagreement is reported."""
    t = sections["topology"]
    levels = declared_levels(t.levels)
    by_name = {lv.name: lv for lv in levels}
    by_label = {lv.node_label: lv for lv in levels}
    errs: list[FieldError] = []
    zone_key = by_name["zone"].node_label if "zone" in by_name and "zoneTopologySpread.topologyKey" not in given \
        else sections["zoneTopologySpread"].topologyKey
    gang = sections.get("gang")
    if gang is not None:
        errs += _old_level_errors("gang.topology", gang.topology, levels, zone_key, by_name.get(t.gangs.within),
                                  "topology.gangs.within", t.gangs.mode)
        errs += _old_level_errors("gang.jobSetExclusiveTopology", gang.jobSetExclusiveTopology, levels, zone_key,
                                  by_name.get(t.jobSets.jobPerDomain), "topology.jobSets.jobPerDomain", None)
    for section, level in (("zoneTopologySpread", "zone"), ("hostTopologySpread", "host")):
        key = f"{section}.topologyKey"
        if key in given and level in by_name and sections[section].topologyKey != by_name[level].node_label:
            errs.append(_disagree(key, sections[section].topologyKey, f"{by_name[level].source}.nodeLabel",
                                  by_name[level].node_label, f"the level named {level} is the {level} spread's key"))
    volcano = sections.get("volcano")
    if volcano is None:
        return errs
    for i, source in enumerate(volcano.networkTopologyDiscovery):
        if source.source != "label" or not source.enabled:
            continue
        for name, keys in source.topologies:
            for n, key in enumerate(tier_labels(keys), 1):
                j = len(keys) - 1 - n
                path = f"volcano.networkTopologyDiscovery[{i}].config.networkTopologyTypes.{name}[{j}].nodeLabel"
                found = by_label.get(key)
                if found is None:
                    errs.append(_disagree(path, key, "topology.levels", [lv.node_label for lv in levels],
                                          f"Volcano tier {n} is a node label no declared level has"))
                elif found.tier != n:
                    errs.append(_disagree(path, key, f"{found.source}.nodeLabel", key,
                                          f"it is Volcano tier {n} here and tier {found.tier} in topology.levels"))
    nt = volcano.networkTopology
    tiers = [lv.tier for lv in levels if lv.tier is not None]
    if nt is not None and nt.highestTierAllowed is not None and nt.highestTierAllowed > max(tiers, default=0):
        errs.append(_disagree("volcano.networkTopology.highestTierAllowed", nt.highestTierAllowed, "topology.levels",
                              [lv.name for lv in levels], f"the declared levels have tiers 1 to {max(tiers, default=0)}"))
    return errs
