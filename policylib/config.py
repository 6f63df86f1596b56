"""Settings: the seeds' YAML shape, their defaults, and clear errors.

``load_config(source)`` accepts the LRS topology spread document's YAML
(seed 000, "Default values"): ``zoneTopologySpread`` and ``hostTopologySpread``
at the top level, or nested under ``lrs-operator: operator: config:`` so that an
existing Helm values file can be used as it is. Every missing key takes the
seed's default; ``None`` gives all defaults.
"""
from __future__ import annotations

import difflib
import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from .errors import ConfigError
from .labels import qualified_name_errors

SCHEDULE_ANYWAY = "ScheduleAnyway"
DO_NOT_SCHEDULE = "DoNotSchedule"
WHEN_UNSATISFIABLE = (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY)
ANTI_AFFINITY_REMOVAL = ("own", "all")


@dataclass(frozen=True)
class ZoneSpread:
    """``zoneTopologySpread`` (seed 000 "Zone spread"): always ScheduleAnyway."""

    enabled: bool = True
    topologyKey: str = "topology.kubernetes.io/zone"
    maxSkew: int = 1
    matchLabelKeys: tuple[str, ...] = ("pod-template-hash",)


@dataclass(frozen=True)
class HostSpread:
    """``hostTopologySpread`` (seed 000 "Host spread" and "Preference or requirement")."""

    enabled: bool = True
    whenUnsatisfiable: str = SCHEDULE_ANYWAY
    topologyKey: str = "kubernetes.io/hostname"
    maxSkew: int = 1
    minDomains: int = 3
    hardMinReplicas: int = 3
    enableReplicaDerivedMaxSkewRule: bool = True
    matchLabelKeys: tuple[str, ...] = ("pod-template-hash",)
    reconcileDrift: bool = False


FAILURE_MODES = ("open", "closed")


@dataclass(frozen=True)
class WebhookSettings:
    """``webhook``: how the admission webhook treats a policy failure and big bodies.

    ``failureMode: open`` (default) admits the object unchanged with a warning;
    ``closed`` denies it with the error.
    """

    failureMode: str = "open"
    maxRequestBytes: int = 6 * 1024 * 1024


@dataclass(frozen=True)
class Config:
    """Everything policylib reads. Sections mirror the YAML keys."""

    zoneTopologySpread: ZoneSpread = field(default_factory=ZoneSpread)
    hostTopologySpread: HostSpread = field(default_factory=HostSpread)
    # Seed 000 says the operator "removes any pod anti-affinity"; by default we
    # remove only terms that select the Deployment's own pods (the legacy
    # ha_topology_key rule) and keep terms aimed at other workloads.
    removePodAntiAffinity: str = "own"
    webhook: WebhookSettings = field(default_factory=WebhookSettings)

    @property
    def zone(self) -> ZoneSpread:
        return self.zoneTopologySpread

    @property
    def host(self) -> HostSpread:
        return self.hostTopologySpread

    def spread_fingerprint(self) -> str:
        """A short stable hash of every setting that shapes the written spread.

        ``reconcileDrift`` is left out: it decides when to write, not what.
        """
        return self._spread_fingerprint

    @cached_property
    def _spread_fingerprint(self) -> str:
        data = {"zone": asdict(self.zone), "host": asdict(self.host),
                "removePodAntiAffinity": self.removePodAntiAffinity}
        data["host"].pop("reconcileDrift")
        blob = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()[:12]


HELM_NESTING = ("lrs-operator", "operator", "config")


# --- value parsers: each returns the parsed value or raises ConfigError -----

def _parse_bool(path: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise ConfigError(path, f"must be true or false, got {value!r}")


def _parse_positive_int(path: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(path, f"must be an integer >= 1, got {value!r}")
    if value < 1:
        raise ConfigError(path, f"must be an integer >= 1, got {value}")
    return value


def _parse_label_key(path: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(path, f"must be a non-empty label key, got {value!r}")
    errs = qualified_name_errors(value)
    if errs:
        raise ConfigError(path, f"{value!r} is not a valid label key: {errs[0]}")
    return value


def _parse_when_unsatisfiable(path: str, value: Any) -> str:
    if value not in WHEN_UNSATISFIABLE:
        raise ConfigError(path, f"must be one of DoNotSchedule, ScheduleAnyway; got {value!r}")
    return value


def _parse_match_label_keys(path: str, value: Any) -> tuple[str, ...]:
    """``pod-template-hash``, any single label key, a list of keys, or ``none``."""
    if value is None or value == "none" or value == []:
        return ()
    if isinstance(value, str):
        return (_parse_label_key(path, value),)
    if isinstance(value, list):
        keys = tuple(_parse_label_key(f"{path}[{i}]", k) for i, k in enumerate(value))
        if len(set(keys)) != len(keys):
            raise ConfigError(path, f"lists a key twice: {list(keys)}")
        return keys
    raise ConfigError(path, f"must be 'pod-template-hash', a list of label keys, or 'none'; got {value!r}")


def _parse_removal(path: str, value: Any) -> str:
    if value not in ANTI_AFFINITY_REMOVAL:
        raise ConfigError(path, f"must be 'own' (terms selecting the Deployment's own pods) or 'all'; got {value!r}")
    return value


def _zone_no_when(path: str, value: Any) -> str:
    if value != SCHEDULE_ANYWAY:
        raise ConfigError(path, "the zone spread is always ScheduleAnyway (seed: 'Zone spread'); "
                                f"got {value!r}. Remove the key or set ScheduleAnyway")
    return value


def _parse_failure_mode(path: str, value: Any) -> str:
    if value not in FAILURE_MODES:
        raise ConfigError(path, f"must be 'open' (admit unchanged with a warning) or 'closed' (deny); got {value!r}")
    return value


Parser = Callable[[str, Any], Any]

ZONE_KEYS: dict[str, Parser] = {
    "enabled": _parse_bool,
    "topologyKey": _parse_label_key,
    "maxSkew": _parse_positive_int,
    "matchLabelKeys": _parse_match_label_keys,
    "whenUnsatisfiable": _zone_no_when,   # accepted only as ScheduleAnyway, not stored
}
HOST_KEYS: dict[str, Parser] = {
    "enabled": _parse_bool,
    "whenUnsatisfiable": _parse_when_unsatisfiable,
    "topologyKey": _parse_label_key,
    "maxSkew": _parse_positive_int,
    "minDomains": _parse_positive_int,
    "hardMinReplicas": _parse_positive_int,
    "enableReplicaDerivedMaxSkewRule": _parse_bool,
    "matchLabelKeys": _parse_match_label_keys,
    "reconcileDrift": _parse_bool,
}
WEBHOOK_KEYS: dict[str, Parser] = {
    "failureMode": _parse_failure_mode,
    "maxRequestBytes": _parse_positive_int,
}
TOP_LEVEL_SCALARS: dict[str, Parser] = {
    "removePodAntiAffinity": _parse_removal,
}
SECTIONS = ("zoneTopologySpread", "hostTopologySpread", "webhook")
TOP_LEVEL_KEYS = SECTIONS + tuple(TOP_LEVEL_SCALARS)


def _unknown_key(path: str, key: Any, known: tuple[str, ...] | list[str]) -> ConfigError:
    close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(known)}"
    return ConfigError(f"{path}{key}", f"unknown key{hint}")


def _parse_section(name: str, raw: Any, parsers: dict[str, Parser], cls: type) -> Any:
    if raw is None:
        return cls()
    if not isinstance(raw, Mapping):
        raise ConfigError(name, f"must be a mapping, got {type(raw).__name__}")
    values = {}
    cls_fields = {f.name for f in fields(cls)}
    for key, value in raw.items():
        if key not in parsers:
            raise _unknown_key(f"{name}.", key, list(parsers))
        parsed = parsers[key](f"{name}.{key}", value)
        if key in cls_fields:
            values[key] = parsed
    return cls(**values)


def _unwrap_helm_values(data: Mapping) -> tuple[Mapping, bool]:
    """The ``lrs-operator.operator.config`` mapping when the data is Helm values."""
    if HELM_NESTING[0] not in data:
        return data, False
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


def config_from_dict(data: Mapping | None) -> Config:
    """Build and check a :class:`Config` from parsed YAML (see :func:`load_config`).

    In Helm values, keys under ``lrs-operator.operator.config`` that policylib
    does not read belong to the operator and are ignored, unless one is a near
    miss of a key we read (likely a typo), which is an error.
    """
    if data is None:
        return Config()
    if not isinstance(data, Mapping):
        raise ConfigError("", f"the configuration must be a mapping, got {type(data).__name__}")
    body, nested = _unwrap_helm_values(data)
    prefix = ".".join(HELM_NESTING) + "." if nested else ""
    for key in body:
        if key in TOP_LEVEL_KEYS:
            continue
        if nested and not difflib.get_close_matches(str(key), TOP_LEVEL_KEYS, n=1, cutoff=0.8):
            continue
        raise _unknown_key(prefix, key, TOP_LEVEL_KEYS)
    try:
        zone = _parse_section("zoneTopologySpread", body.get("zoneTopologySpread"), ZONE_KEYS, ZoneSpread)
        host = _parse_section("hostTopologySpread", body.get("hostTopologySpread"), HOST_KEYS, HostSpread)
        webhook = _parse_section("webhook", body.get("webhook"), WEBHOOK_KEYS, WebhookSettings)
        scalars = {k: p(k, body[k]) for k, p in TOP_LEVEL_SCALARS.items() if k in body}
    except ConfigError as e:
        if not prefix:
            raise
        raise ConfigError(prefix + e.path, e.message) from None
    if zone.enabled and host.enabled and zone.topologyKey == host.topologyKey:
        raise ConfigError(f"{prefix}hostTopologySpread.topologyKey",
                          f"must differ from zoneTopologySpread.topologyKey (both are {zone.topologyKey!r})")
    return Config(zoneTopologySpread=zone, hostTopologySpread=host, webhook=webhook, **scalars)


def load_config(source: str | Path | Mapping | Config | None = None) -> Config:
    """Load settings from a YAML/JSON file path, a dict, or ``None`` (seed defaults).

    Raises :class:`ConfigError` naming the key path and what is allowed.
    """
    if source is None or isinstance(source, Config):
        return source or Config()
    if isinstance(source, Mapping):
        return config_from_dict(source)
    path = Path(source)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError("", f"cannot read config file: {e.strerror or e}", source=str(path)) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError("", f"invalid YAML: {_yaml_problem(e)}", source=str(path)) from None
    try:
        return config_from_dict(data)
    except ConfigError as e:
        raise ConfigError(e.path, e.message, source=str(path)) from None


def _yaml_problem(e: yaml.YAMLError) -> str:
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or str(e)
    return f"line {mark.line + 1} column {mark.column + 1}: {problem}" if mark else problem
