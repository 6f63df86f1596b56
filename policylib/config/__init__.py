"""Settings: their YAML shape, their defaults, and clear errors (rules C1-C9).

One declaration per setting, and one module per question:

- :mod:`~policylib.config.declare`: how a setting is declared (a dataclass field whose metadata is its schema);
- :mod:`~policylib.config.settings`: every setting, declared once, in its section's dataclass;
- :mod:`~policylib.config.rules`: the checks across settings, as data (rule C8);
- :mod:`~policylib.config.schema`: ``config_schema()``, made from the two above (rule C6);
- :mod:`~policylib.config.validate`: schema errors as field errors, and the checks across settings run;
- :mod:`~policylib.config.load`: from parsed YAML (or Helm values, or chart values) to a checked ``Config``.

The names below are the package's; importing them from ``policylib.config`` stays the way to use them.
"""
from __future__ import annotations

from ..errors import ConfigError
from ..hypernodes import DiscoverySource
from .load import (
    CHART_CONTROLLER_KEYS,
    CHART_VALUES_KEYS,
    CHART_WEBHOOK_KEYS,
    chart_values_config,
    config_document,
    config_from_dict,
    load_config,
    raise_config_errors,
    section_value,
)
from .rules import (
    GANG_COMBINATIONS,
    NETWORK_TOPOLOGY_RULES,
    RESTART_EVENT_RULES,
    UNENFORCED_TIER_NAME_VERSION,
    VOLCANO_RULES,
    Combination,
    combination_schema,
)
from .schema import HELM_NESTING, config_keys, config_schema
from .settings import (
    ANTI_AFFINITY_REMOVAL,
    FAILURE_MODES,
    GANG_METHODS,
    GANG_SCHEDULERS,
    MATCH_POLICIES,
    ON_COUNT_CHANGE,
    ON_NEXT_ROLLOUT,
    ON_VIOLATION,
    OPERATOR_GANG_MODES,
    REWRITE_MODES,
    Config,
    ControllerSettings,
    GangSettings,
    HostSpread,
    NetworkTopology,
    VolcanoSettings,
    WebhookSettings,
    ZoneSpread,
    section_classes,
)
from .validate import (
    SettingError,
    check_volcano,
    discovery_errors,
    gang_combination_errors,
    schema_errors,
    spread_key_errors,
    volcano_errors,
)

__all__ = [
    "ANTI_AFFINITY_REMOVAL", "CHART_CONTROLLER_KEYS", "CHART_VALUES_KEYS", "CHART_WEBHOOK_KEYS", "FAILURE_MODES",
    "GANG_COMBINATIONS", "GANG_METHODS", "GANG_SCHEDULERS", "HELM_NESTING", "MATCH_POLICIES",
    "NETWORK_TOPOLOGY_RULES", "ON_COUNT_CHANGE", "ON_NEXT_ROLLOUT", "ON_VIOLATION", "OPERATOR_GANG_MODES",
    "RESTART_EVENT_RULES", "REWRITE_MODES", "UNENFORCED_TIER_NAME_VERSION", "VOLCANO_RULES",
    "Combination", "Config", "ConfigError", "ControllerSettings", "DiscoverySource", "GangSettings", "HostSpread",
    "NetworkTopology", "SettingError", "VolcanoSettings", "WebhookSettings", "ZoneSpread",
    "chart_values_config", "check_volcano", "combination_schema", "config_document", "config_from_dict",
    "config_keys", "config_schema", "discovery_errors", "gang_combination_errors", "load_config",
    "raise_config_errors", "schema_errors", "section_classes", "section_value", "spread_key_errors",
    "volcano_errors",
]
