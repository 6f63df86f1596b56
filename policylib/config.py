"""Settings: their YAML shape, their defaults, and clear errors (rules C1-C5).

``load_config(source)`` accepts the LRS topology spread document's YAML
(the LRS operator's settings): ``zoneTopologySpread`` and ``hostTopologySpread``
at the top level, or nested under ``lrs-operator: operator: config:`` so that an
existing Helm values file can be used as it is. Every missing key takes the
default of ``docs/specification.md``; ``None`` gives all defaults.
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

from .documents import yaml_problem
from .errors import ConfigError, FieldError, forbidden
from .labels import qualified_name_errors
from .validation import (
    partition_tier_name_enforced,
    validate_network_topology,
    validate_partition_topology_mode,
    validate_restart_partition_events,
)

SCHEDULE_ANYWAY = "ScheduleAnyway"
DO_NOT_SCHEDULE = "DoNotSchedule"
WHEN_UNSATISFIABLE = (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY)
ANTI_AFFINITY_REMOVAL = ("own", "all")


@dataclass(frozen=True)
class ZoneSpread:
    """``zoneTopologySpread`` (rule S3): always ScheduleAnyway."""

    enabled: bool = True
    topologyKey: str = "topology.kubernetes.io/zone"
    maxSkew: int = 1
    matchLabelKeys: tuple[str, ...] = ("pod-template-hash",)


@dataclass(frozen=True)
class HostSpread:
    """``hostTopologySpread`` (rules S4-S6)."""

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
class NetworkTopology:
    """A Volcano ``networkTopology`` spec: mode and exactly one tier bound for hard mode."""

    mode: str = "hard"
    highestTierAllowed: int | None = 1
    highestTierName: str | None = None

    def as_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"mode": self.mode}
        if self.highestTierAllowed is not None:
            spec["highestTierAllowed"] = self.highestTierAllowed
        if self.highestTierName is not None:
            spec["highestTierName"] = self.highestTierName
        return spec


@dataclass(frozen=True)
class DiscoverySource:
    """One entry of Volcano's ``networkTopologyDiscovery`` (its controller's default_controller_conf; rule H1).

    ``topologies`` maps a topology name to its node label keys, top tier first,
    the node level (``kubernetes.io/hostname``) last. Upstream Volcano reads
    several topologies (its docs configure two); CCE's add-on allows only one.
    """

    source: str
    enabled: bool = True
    topologies: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class VolcanoSettings:
    """``volcano`` (rules V3, V5, V13-V18): RestartPartition events, partitions, network topology, discovery."""

    enabled: bool = True
    restartPartitionEvents: tuple[str, ...] = ("PodEvicted", "PodFailed")
    #: The Volcano release whose admission rules preview and the webhook's warnings follow.
    version: str = "v1.15.1"
    partitionSize: int | None = None
    networkTopology: NetworkTopology | None = field(default_factory=NetworkTopology)
    networkTopologyDiscovery: tuple[DiscoverySource, ...] = ()


@dataclass(frozen=True)
class ControllerSettings:
    """``controller``: how ``python -m webhook controller`` applies its plan.

    ``maxConcurrentRollouts`` caps how many Deployments it has rolling at once,
    so turning on reconcileDrift does not roll a whole cluster in one second.
    """

    maxConcurrentRollouts: int = 3
    resyncSeconds: int = 300
    dryRun: bool = False
    leaseName: str = "policylib-controller"
    leaseDurationSeconds: int = 15


GANG_METHODS = ("labels", "podgroup", "koordinator")
GANG_SCHEDULERS = ("ack", "koordinator", "scheduler-plugins")
MATCH_POLICIES = ("none", "only-waiting", "waiting-and-running", "waiting-running-succeed", "once-satisfied")
ON_VIOLATION = ("warn", "deny")
#: ``gang.operatorGang``: the gang mode the job operators run with (training-operator
#: ``--gang-scheduler-name``, the MPI Operator ``--gang-scheduling``); rule G15.
OPERATOR_GANG_MODES = ("none", "scheduler-plugins", "volcano")


@dataclass(frozen=True)
class GangSettings:
    """``gang`` (rules G1-G13): how gang metadata is written for Kubeflow jobs."""

    enabled: bool = True
    method: str = "labels"
    scheduler: str = "ack"
    scheduleTimeoutSeconds: int = 10
    matchPolicy: str = "none"
    groupByRole: bool = False
    onViolation: str = "warn"
    trainingOperatorGang: bool = False
    operatorGang: str = "none"


@dataclass(frozen=True)
class Config:
    """Everything policylib reads. Sections mirror the YAML keys."""

    zoneTopologySpread: ZoneSpread = field(default_factory=ZoneSpread)
    hostTopologySpread: HostSpread = field(default_factory=HostSpread)
    # Rule S9: the literal reading is "removes any pod anti-affinity" (``all``); by default we
    # remove only terms that select the Deployment's own pods (the legacy
    # ha_topology_key rule) and keep terms aimed at other workloads.
    removePodAntiAffinity: str = "own"
    webhook: WebhookSettings = field(default_factory=WebhookSettings)
    volcano: VolcanoSettings = field(default_factory=VolcanoSettings)
    gang: GangSettings = field(default_factory=GangSettings)
    controller: ControllerSettings = field(default_factory=ControllerSettings)

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
        host = asdict(self.host)
        host.pop("reconcileDrift")
        data = {"zone": asdict(self.zone), "host": host, "removePodAntiAffinity": self.removePodAntiAffinity}
        blob = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()[:12]


HELM_NESTING = ("lrs-operator", "operator", "config")


# --- value parsers: each returns the parsed value or raises ConfigError -----

def _parse_bool(path: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise ConfigError(path, f"must be true or false, got {value!r}")


def _parse_positive_int(path: str, value: Any) -> int:
    """Rule C4."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(path, f"must be an integer >= 1, got {value!r}")
    if value < 1:
        raise ConfigError(path, f"must be an integer >= 1, got {value}")
    if value > 2**31 - 1:
        raise ConfigError(path, f"must be at most {2**31 - 1} (the API's int32 fields), got {value}")
    return value


def _parse_label_key(path: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(path, f"must be a non-empty label key, got {value!r}")
    errs = qualified_name_errors(value)
    if errs:
        raise ConfigError(path, f"{value!r} is not a valid label key: {errs[0]}")
    return str(value)


def _parse_when_unsatisfiable(path: str, value: Any) -> str:
    if value not in WHEN_UNSATISFIABLE:
        raise ConfigError(path, f"must be one of DoNotSchedule, ScheduleAnyway; got {value!r}")
    return str(value)


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
    return str(value)


def _zone_no_when(path: str, value: Any) -> str:
    if value != SCHEDULE_ANYWAY:
        raise ConfigError(path, "the zone spread is always ScheduleAnyway (docs/specification.md rule S3); "
                                f"got {value!r}. Remove the key or set ScheduleAnyway")
    return str(value)


def _parse_failure_mode(path: str, value: Any) -> str:
    if value not in FAILURE_MODES:
        raise ConfigError(path, f"must be 'open' (admit unchanged with a warning) or 'closed' (deny); got {value!r}")
    return str(value)


def _one_of(choices: tuple[str, ...]) -> Callable[[str, Any], str]:
    def parse(path: str, value: Any) -> str:
        if value not in choices:
            raise ConfigError(path, f"must be one of {', '.join(choices)}; got {value!r}")
        return str(value)
    return parse


def _parse_events(path: str, value: Any) -> tuple[str, ...]:
    """Volcano policy events (rule V3); ``[]`` disables."""
    _raise_all(validate_restart_partition_events(value, path))
    return tuple(value or ())


def _raise_all(errors: list[FieldError]) -> None:
    if errors:
        raise ConfigError.from_errors(errors)


def _parse_optional_positive_int(path: str, value: Any) -> int | None:
    return None if value is None else _parse_positive_int(path, value)


def _parse_network_topology(path: str, value: Any) -> NetworkTopology | None:
    """``{mode: hard|soft, highestTierAllowed: N}`` or ``highestTierName``, never both."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ConfigError(path, f"must be a mapping like {{mode: hard, highestTierAllowed: 1}}, got {value!r}")
    for key in value:
        if key not in ("mode", "highestTierAllowed", "highestTierName"):
            raise _unknown_key(f"{path}.", key, ["mode", "highestTierAllowed", "highestTierName"])
    _raise_all(validate_network_topology(dict(value), path))
    tier = _parse_optional_positive_int(f"{path}.highestTierAllowed", value.get("highestTierAllowed"))
    mode, name = value.get("mode", "hard"), value.get("highestTierName")
    return NetworkTopology(mode, tier, name)


def _parse_discovery(path: str, value: Any) -> tuple[DiscoverySource, ...]:
    """Volcano's ``default_controller_conf.networkTopologyDiscovery``, verbatim (rule H1)."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ConfigError(path, f"must be a list (Volcano's default_controller_conf list), got {value!r}")
    out = []
    for i, item in enumerate(value):
        p = f"{path}[{i}]"
        if not isinstance(item, Mapping) or not isinstance(item.get("source"), str):
            raise ConfigError(p, "each entry needs a 'source' (for example 'label')")
        enabled = _parse_bool(f"{p}.enabled", item.get("enabled", True))
        topologies: tuple[Any, ...] = ()
        if item["source"] == "label":
            types = ((item.get("config") or {}).get("networkTopologyTypes")) if isinstance(item.get("config"), Mapping) else None
            if not isinstance(types, Mapping) or not types:
                raise ConfigError(f"{p}.config.networkTopologyTypes", "must map a topology name to its list of "
                                                                       "{nodeLabel: ...} entries")
            parsed = []
            for name, tiers in types.items():
                tp = f"{p}.config.networkTopologyTypes.{name}"
                if not isinstance(name, str) or not 0 < len(name) <= 20:
                    raise ConfigError(tp, "a topology name has 1 to 20 characters")
                if not isinstance(tiers, list) or len(tiers) < 2:
                    raise ConfigError(tp, "needs at least one tier label and the node level (kubernetes.io/hostname) last")
                labels = []
                for j, tier in enumerate(tiers):
                    if not isinstance(tier, Mapping) or "nodeLabel" not in tier:
                        raise ConfigError(f"{tp}[{j}]", "each tier is {nodeLabel: <label key>}")
                    labels.append(_parse_label_key(f"{tp}[{j}].nodeLabel", tier["nodeLabel"]))
                if labels[-1] != "kubernetes.io/hostname":
                    raise ConfigError(f"{tp}[{len(labels) - 1}].nodeLabel", "the last entry is the node level and must "
                                      f"be kubernetes.io/hostname (rule H1); got {labels[-1]!r}")
                if len(set(labels)) != len(labels):
                    raise ConfigError(tp, f"lists a label twice: {labels}")
                parsed.append((name, tuple(labels)))
            topologies = tuple(parsed)
        out.append(DiscoverySource(item["source"], enabled, topologies))
    return tuple(out)


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
def _parse_volcano_version(path: str, value: Any) -> str:
    """``vMAJOR.MINOR.PATCH`` (the ``v`` optional), v1.14.0 or newer: partitionPolicy came in v1.14."""
    import re
    match = re.fullmatch(r"v?(\d+)\.(\d+)\.(\d+)", value) if isinstance(value, str) else None
    if not match:
        raise ConfigError(path, f"must be a Volcano release like v1.15.1, got {value!r}")
    if tuple(map(int, match.groups())) < (1, 14, 0):
        raise ConfigError(path, f"must be v1.14.0 or newer (partitionPolicy and RestartPartition), got {value!r}")
    return "v" + ".".join(match.groups())


VOLCANO_KEYS: dict[str, Parser] = {
    "enabled": _parse_bool,
    "restartPartitionEvents": _parse_events,
    "version": _parse_volcano_version,
    "partitionSize": _parse_optional_positive_int,
    "networkTopology": _parse_network_topology,
    "networkTopologyDiscovery": _parse_discovery,
}
GANG_KEYS: dict[str, Parser] = {
    "enabled": _parse_bool,
    "method": _one_of(GANG_METHODS),
    "scheduler": _one_of(GANG_SCHEDULERS),
    "scheduleTimeoutSeconds": _parse_positive_int,
    "matchPolicy": _one_of(MATCH_POLICIES),
    "groupByRole": _parse_bool,
    "onViolation": _one_of(ON_VIOLATION),
    "trainingOperatorGang": _parse_bool,
    "operatorGang": _one_of(OPERATOR_GANG_MODES),
}


def _parse_name(path: str, value: Any) -> str:
    from .labels import dns1123_subdomain_errors
    if not isinstance(value, str) or dns1123_subdomain_errors(value):
        raise ConfigError(path, f"must be a lowercase DNS subdomain name, got {value!r}")
    return value


CONTROLLER_KEYS: dict[str, Parser] = {
    "maxConcurrentRollouts": _parse_positive_int,
    "resyncSeconds": _parse_positive_int,
    "dryRun": _parse_bool,
    "leaseName": _parse_name,
    "leaseDurationSeconds": _parse_positive_int,
}


def check_volcano(v: VolcanoSettings) -> None:
    """Rules C5 and V5: with a partition policy (volcano.partitionSize), soft network topology is not supported;
    rule V20: before v1.15.0 Volcano's scheduler ignores a partition's highestTierName."""
    if v.partitionSize is not None and v.networkTopology is not None:
        _raise_all(validate_partition_topology_mode(v.networkTopology.as_spec(), "volcano.networkTopology"))
        if v.networkTopology.highestTierName and not partition_tier_name_enforced(v.version):
            raise ConfigError("volcano.networkTopology.highestTierName",
                              f"Volcano {v.version}'s scheduler ignores a partition's highestTierName (enforced from "
                              "v1.15.0, volcano issue 5189): use highestTierAllowed")


def gang_combination_errors(g: GangSettings) -> list[FieldError]:
    """Rules G1-G6: combinations a scheduler does not support; each error names the values and what is
    supported there."""
    def both(message: str, *keys: str) -> FieldError:
        return forbidden(" and ".join(f"gang.{k}" for k in keys), message)
    errs = []
    if g.method == "labels" and g.scheduler == "scheduler-plugins":
        errs.append(both("gang.method 'labels' is not supported on scheduler 'scheduler-plugins': the lightweight "
                         "pod-group.scheduling.sigs.k8s.io/name labels work on ACK and Koordinator only (supported "
                         "there: podgroup)", "method", "scheduler"))
    if g.method == "koordinator" and g.scheduler == "scheduler-plugins":
        errs.append(both("gang.method 'koordinator' is not supported on scheduler 'scheduler-plugins': it does not "
                         "read gang.scheduling.koordinator.sh annotations (supported there: podgroup)",
                         "method", "scheduler"))
    if g.matchPolicy != "none" and g.scheduler == "scheduler-plugins":
        errs.append(both(f"gang.matchPolicy {g.matchPolicy!r} is not supported on scheduler 'scheduler-plugins': "
                         "its coscheduling has no match policy (supported: none)", "matchPolicy", "scheduler"))
    if g.matchPolicy == "waiting-running-succeed" and g.scheduler != "ack":
        errs.append(both(f"gang.matchPolicy 'waiting-running-succeed' is not supported on scheduler "
                         f"{g.scheduler!r}: it is an ACK-only match policy (supported: none, only-waiting, "
                         "waiting-and-running, once-satisfied)", "matchPolicy", "scheduler"))
    if g.method == "koordinator" and g.scheduler == "ack" and g.matchPolicy not in ("none", "once-satisfied"):
        errs.append(both(f"gang.matchPolicy {g.matchPolicy!r} is not supported with gang.method koordinator on "
                         "scheduler ack (supported: once-satisfied)", "matchPolicy", "method"))
    if g.groupByRole and g.scheduler == "scheduler-plugins":
        errs.append(both("gang.groupByRole true is not supported on scheduler 'scheduler-plugins': it has no "
                         "GangGroup (supported: false)", "groupByRole", "scheduler"))
    return errs


def check_gang(g: GangSettings) -> None:
    """Raise one ConfigError listing every unsupported combination (:func:`gang_combination_errors`)."""
    _raise_all(gang_combination_errors(g))


TOP_LEVEL_SCALARS: dict[str, Parser] = {
    "removePodAntiAffinity": _parse_removal,
}
SECTIONS: dict[str, tuple[dict[str, Parser], type, Callable[[Any], None] | None]] = {
    "zoneTopologySpread": (ZONE_KEYS, ZoneSpread, None),
    "hostTopologySpread": (HOST_KEYS, HostSpread, None),
    "webhook": (WEBHOOK_KEYS, WebhookSettings, None),
    "volcano": (VOLCANO_KEYS, VolcanoSettings, check_volcano),
    "gang": (GANG_KEYS, GangSettings, check_gang),
    "controller": (CONTROLLER_KEYS, ControllerSettings, None),
}
TOP_LEVEL_KEYS = tuple(SECTIONS) + tuple(TOP_LEVEL_SCALARS)


def _unknown_key(path: str, key: Any, known: tuple[str, ...] | list[str]) -> ConfigError:
    """Rule C3."""
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


def _unwrap_helm_values(data: Mapping[str, Any]) -> tuple[Mapping[str, Any], bool]:
    """The ``lrs-operator.operator.config`` mapping when the data is Helm values."""
    if HELM_NESTING[0] not in data:
        return data, False
    beside = [k for k in data if k in TOP_LEVEL_KEYS]
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


def config_from_dict(data: Mapping[str, Any] | None) -> Config:
    """Rule C2: build and check a :class:`Config` from parsed YAML (see :func:`load_config`).

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
        sections = {}
        for name, (parsers, cls, check) in SECTIONS.items():
            sections[name] = _parse_section(name, body.get(name), parsers, cls)
            if check:
                check(sections[name])
        scalars = {k: p(k, body[k]) for k, p in TOP_LEVEL_SCALARS.items() if k in body}
    except ConfigError as e:
        if not prefix:
            raise
        raise ConfigError(prefix + e.path, e.message) from None
    zone, host = sections["zoneTopologySpread"], sections["hostTopologySpread"]
    if zone.enabled and host.enabled and zone.topologyKey == host.topologyKey:
        raise ConfigError(f"{prefix}hostTopologySpread.topologyKey",
                          f"must differ from zoneTopologySpread.topologyKey (both are {zone.topologyKey!r})")
    return Config(**sections, **scalars)


def load_config(source: str | Path | Mapping[str, Any] | Config | None = None) -> Config:
    """Rule C1: load settings from a YAML/JSON file path, a dict, or ``None`` (the defaults).

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
        raise ConfigError("", f"invalid YAML: {yaml_problem(e)}", source=str(path)) from None
    try:
        return config_from_dict(data)
    except ConfigError as e:
        raise ConfigError(e.path, e.message, source=str(path)) from None

