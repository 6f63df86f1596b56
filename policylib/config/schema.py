"""The configuration's JSON Schema, made from the declarations (rule C6).

:func:`config_schema` reads every setting's schema property from its dataclass field
(:mod:`policylib.config.settings`) and adds the checks across settings (:mod:`policylib.config.rules`); the
Helm chart's values schema (charts/generate.py) and docs/reference/config.md (tools/gen_reference.py) are
made from it.
"""
from __future__ import annotations

import copy
from dataclasses import fields
from typing import Any

from .declare import is_section, section_schema
from .rules import (
    GANG_COMBINATIONS,
    NETWORK_TOPOLOGY_RULES,
    RESTART_EVENT_RULES,
    VOLCANO_RULES,
    combination_schema,
    spread_key_rule,
)
from .settings import Config

#: Where the LRS operator's chart (``lrs-operator``, the operator that spreads DataRobot's Long Running
#: Services) keeps the spread settings in its values; a configuration may nest them so (rule C2).
HELM_NESTING = ("lrs-operator", "operator", "config")


def config_schema(combinations: bool = True) -> dict[str, Any]:
    """Rule C6: the JSON Schema (draft 2020-12) of the configuration as ``--config`` takes it (the
    top-level form). Every setting has its type, default, description and ``x-rule`` (the rule numbers
    of docs/specification.md it implements, or null); unknown keys are errors. Validation
    (:func:`config_errors`), the Helm chart's values schema and the settings reference all read it.

    Rule C8: with ``combinations`` (the default) it also carries the checks across settings as ``allOf``
    lists of ``if``/``then`` (:data:`GANG_COMBINATIONS`, :data:`VOLCANO_RULES`, :data:`NETWORK_TOPOLOGY_RULES`,
    :data:`RESTART_EVENT_RULES`, the spreads' topology keys), so a validator of this schema alone
    (``helm install`` with the chart's values schema) refuses what loading refuses. Loading validates
    without them and reports each with its own message (:func:`config_from_dict`)."""
    properties = {f.name: section_schema(f) for f in fields(Config)}
    schema: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://policylib.io/schemas/config.json",
        "title": "policylib configuration",
        "description": "The settings of policylib, its webhook and its controller (docs/specification.md, C "
                       "rules). Every missing key takes its default.",
        "type": "object", "additionalProperties": False, "properties": properties}
    if combinations:
        properties["gang"]["allOf"] = [combination_schema(c) for c in GANG_COMBINATIONS]
        properties["volcano"]["allOf"] = copy.deepcopy(list(VOLCANO_RULES))
        properties["volcano"]["properties"]["networkTopology"]["allOf"] = copy.deepcopy(list(NETWORK_TOPOLOGY_RULES))
        properties["volcano"]["properties"]["restartPartitionEvents"]["allOf"] = copy.deepcopy(list(RESTART_EVENT_RULES))
        schema["allOf"] = [spread_key_rule("hostTopologySpread", "zoneTopologySpread"),
                           spread_key_rule("zoneTopologySpread", "hostTopologySpread")]
    return schema


def section_keys() -> dict[str, list[str]]:
    """Each section's keys (its settings, then the keys it only accepts)."""
    return {f.name: list(section_schema(f)["properties"]) for f in fields(Config) if is_section(f)}


def scalar_keys() -> list[str]:
    """The top-level settings that are not sections."""
    return [f.name for f in fields(Config) if not is_section(f)]


def config_keys() -> frozenset[str]:
    """The top-level keys of a configuration (its sections, scalars, and the LRS operator's nesting)."""
    return frozenset(f.name for f in fields(Config)) | {HELM_NESTING[0]}
