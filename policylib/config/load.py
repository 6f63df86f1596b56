"""Loading a configuration: from parsed YAML to a checked :class:`Config` (rules C1, C2, C7, C9).

``load_config(source)`` accepts the settings of the LRS operator (the operator that places DataRobot's
Long Running Services, the Deployments behind model deployments and custom applications, with the same
zone and host spreads; its Helm chart is ``lrs-operator``): ``zoneTopologySpread`` and
``hostTopologySpread`` at the top level, or nested under ``lrs-operator: operator: config:`` so that that
chart's values file can be used as it is (rule C2). Every missing key takes the
default of ``docs/specification.md``; ``None`` gives all defaults.
"""
from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import fields, replace
from typing import Any, Mapping

from ..errors import ConfigError, FieldError
from .declare import converter
from .schema import HELM_NESTING, config_keys, scalar_keys, section_keys
from .settings import Config, section_classes
from .validate import RAW_CHECKS, cross_errors, declaration_errors, schema_errors


def section_value(cls: type, raw: Mapping[str, Any] | None) -> Any:
    """A section's dataclass from its validated mapping: given keys converted, the rest defaults."""
    stored = {f.name: f for f in fields(cls)}
    values = {}
    for key, value in (raw or {}).items():
        if key in stored:
            values[key] = converter(stored[key])(value)
    return cls(**values)


def _unwrap_helm_values(data: Mapping[str, Any], known: Sequence[str]) -> tuple[Mapping[str, Any], bool]:
    """The ``lrs-operator.operator.config`` mapping when the data is Helm values."""
    if HELM_NESTING[0] not in data:
        return data, False
    beside = [k for k in data if k in known]
    if beside:
        raise ConfigError(beside[0], "is beside lrs-operator: put every setting under lrs-operator.operator.config, "
                                     "or use the top-level form without lrs-operator")
    node: Any = data
    for i, key in enumerate(HELM_NESTING):
        if not isinstance(node, Mapping) or key not in node:
            raise ConfigError(".".join(HELM_NESTING[:i + 1]), "missing: Helm values must nest the settings "
                              "under lrs-operator.operator.config")
        node = node[key]
    if node is None:
        return {}, True
    if not isinstance(node, Mapping):
        raise ConfigError(".".join(HELM_NESTING), f"must be a mapping, got {type(node).__name__}")
    return node, True


def config_document(data: Mapping[str, Any] | None) -> tuple[dict[str, Any], list[FieldError], str]:
    """Rule C7: the configuration's top-level form, every error found in it, and the prefix its paths
    take (``lrs-operator.operator.config.`` for Helm values).

    In Helm values, keys under ``lrs-operator.operator.config`` that policylib does not read belong to the
    operator and are left out, unless one is a near miss of a key we read (likely a typo), an error.
    """
    if data is None:
        return {}, [], ""
    if not isinstance(data, Mapping):
        raise ConfigError("", f"the configuration must be a mapping, got {type(data).__name__}")
    known = [f.name for f in fields(Config)]
    body, nested = _unwrap_helm_values(data, known)
    if nested:
        body = {k: v for k, v in body.items()
                if k in known or difflib.get_close_matches(str(k), known, n=1, cutoff=0.8)}
    body = dict(body)
    errors = schema_errors(body)
    bad_sections = {e.field.split(".")[0].split("[")[0] for e in errors}
    for name, check in RAW_CHECKS.items():
        if name not in bad_sections and isinstance(body.get(name), Mapping):
            errors += check(body[name])
    return body, errors, ".".join(HELM_NESTING) + "." if nested else ""


#: The top-level keys of the Helm chart's values (charts/policylib/values.yaml), and the keys of its
#: ``controller:`` and ``webhook:`` sections (the Deployments', not the config's sections of those names).
CHART_VALUES_KEYS = frozenset({"config", "image", "commonLabels", "webhook", "controller", "certificates",
                               "networkPolicy", "serviceMonitor", "prometheusRule", "grafanaDashboard"})
CHART_CONTROLLER_KEYS = frozenset({"enabled", "replicas", "podDisruptionBudget", "resources", "priorityClassName",
                                   "nodeSelector", "tolerations", "affinity", "topologySpreadConstraints",
                                   "podAnnotations", "podLabels", "rbac"})
CHART_WEBHOOK_KEYS = frozenset({"affinity", "excludeNamespaces", "failurePolicy", "families",
                                "firstRequestTimeoutSeconds", "gangPodsFailurePolicy", "matchConditions",
                                "maxConnections", "namespaceMode", "namespaceSelector", "nodeSelector",
                                "objectSelector", "podAnnotations", "podDisruptionBudget", "podLabels",
                                "priorityClassName", "replicas", "resources", "timeoutSeconds", "tls", "tolerations",
                                "topologySpreadConstraints", "workers"})
_CHART_SECTIONS = {"controller": CHART_CONTROLLER_KEYS, "webhook": CHART_WEBHOOK_KEYS}


def chart_values_config(data: Any) -> tuple[Any, bool]:
    """Rule C9: a ``--config`` document told apart: the policylib chart's values file (its ``config:``
    section is the configuration) or a configuration. Returns (the configuration, whether it came from
    chart values). A chart values file has ``config:`` or keys only the chart has (``image``,
    ``certificates``, ...); a configuration has only configuration keys; ``controller`` and ``webhook``,
    which both have, are told by the keys under them. A document with both kinds of key is refused,
    naming them."""
    if not isinstance(data, Mapping):
        return data, False
    keys = {str(k) for k in data}
    config_only = sorted(keys & (config_keys() - CHART_VALUES_KEYS))
    chart_only = sorted(keys & (CHART_VALUES_KEYS - config_keys()))
    for name, chart in _CHART_SECTIONS.items():
        if not isinstance(data.get(name), Mapping):
            continue
        sub, ours = {str(k) for k in data[name]}, set(section_keys()[name])
        if sub & chart and sub & ours:
            raise ConfigError(name, f"mixes the chart's {name} keys ({', '.join(sorted(sub & chart))}) with the "
                              f"configuration's ({', '.join(sorted(sub & ours))}): in a chart values file the "
                              f"configuration's go under config.{name}")
        if sub & chart:
            chart_only.append(name)
        elif sub & ours:
            config_only.append(name)
    if chart_only and config_only:
        raise ConfigError(config_only[0], f"is a configuration key beside the chart values key(s) {', '.join(chart_only)}:"
                          " in a chart values file the settings go under config:, in a configuration file "
                          "there is no " + chart_only[0] + ":")
    if not chart_only:
        return data, False
    body = data.get("config")
    if body is not None and not isinstance(body, Mapping):
        raise ConfigError("config", f"must be a mapping (the chart's config: section), got {type(body).__name__}")
    return body or {}, True


def given_keys(body: Mapping[str, Any]) -> frozenset[str]:
    """The ``section.key`` settings a document gives (rule N2 checks an older key only where it is given)."""
    return frozenset(f"{name}.{key}" for name, section in body.items() if isinstance(section, Mapping)
                     for key in section)


def spread_keys_from_levels(sections: dict[str, Any], given: frozenset[str]) -> dict[str, Any]:
    """Rule N2: with ``topology.levels`` declared, a spread whose ``topologyKey`` is not given takes the node label
    of the level named ``zone`` (the zone spread) or ``host`` (the host spread)."""
    topology = sections.get("topology")
    if topology is None or not topology.levels or declaration_errors(topology):
        return sections
    labels = dict(topology.levels)
    for section, level in (("zoneTopologySpread", "zone"), ("hostTopologySpread", "host")):
        if section in sections and level in labels and f"{section}.topologyKey" not in given:
            sections[section] = replace(sections[section], topologyKey=labels[level])
    return sections


def raise_config_errors(errors: Sequence[FieldError], prefix: str = "") -> None:
    """One :class:`ConfigError` listing every error, when there is one."""
    if errors:
        raise ConfigError.from_errors(errors, prefix)


def config_from_dict(data: Mapping[str, Any] | None) -> Config:
    """Rule C2: build and check a :class:`Config` from parsed YAML (the top-level form or Helm values),
    raising one :class:`ConfigError` that lists every error (rule C7)."""
    body, errors, prefix = config_document(data)
    bad = {e.field.split(".")[0].split("[")[0] for e in errors}
    sections = {name: section_value(cls, body.get(name)) for name, cls in section_classes().items() if name not in bad}
    given = given_keys(body)
    sections = spread_keys_from_levels(sections, given)
    errors += cross_errors(sections, given)
    raise_config_errors(errors, prefix)
    scalars = {k: body[k] for k in scalar_keys() if k in body}
    return Config(**sections, **scalars)


def load_config(source: Mapping[str, Any] | Config | None = None) -> Config:
    """Rule C1: settings from parsed YAML (a mapping), a :class:`Config` as it is, or ``None`` (the
    defaults). A file is read by :func:`policylib.shell.files.load_config` (``policylib.load_config``).

    Raises :class:`ConfigError` naming each key path and what is allowed.
    """
    if source is None or isinstance(source, Config):
        return source or Config()
    return config_from_dict(source)
