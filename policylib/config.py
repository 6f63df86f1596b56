"""Settings: their YAML shape, their defaults, and clear errors (rules C1-C5).

``load_config(source)`` accepts the LRS topology spread document's YAML
(the LRS operator's settings): ``zoneTopologySpread`` and ``hostTopologySpread``
at the top level, or nested under ``lrs-operator: operator: config:`` so that an
existing Helm values file can be used as it is. Every missing key takes the
default of ``docs/specification.md``; ``None`` gives all defaults.
"""
from __future__ import annotations

import copy
import difflib
import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import MISSING, asdict, dataclass, field, fields
from functools import cached_property
from typing import Any, Callable, Mapping

from jsonschema import Draft202012Validator, FormatChecker, ValidationError

from .errors import INT32_MAX, ConfigError, ErrorType, FieldError, forbidden, not_supported
from .labels import dns1123_subdomain_errors, qualified_name_errors
from .validation import (
    NETWORK_TOPOLOGY_MODES,
    SCHEDULE_ANYWAY,
    VOLCANO_POLICY_EVENTS,
    WHEN_UNSATISFIABLE,
    partition_tier_name_enforced,
    validate_network_topology,
    validate_partition_topology_mode,
    validate_restart_partition_events,
)

ANTI_AFFINITY_REMOVAL = ("own", "all")
#: ``hostTopologySpread.rewrite`` (rule S19): when a count change alone may rewrite the pod template.
ON_COUNT_CHANGE, ON_NEXT_ROLLOUT = "OnCountChange", "OnNextRollout"
REWRITE_MODES = (ON_COUNT_CHANGE, ON_NEXT_ROLLOUT)


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
    #: Rule S19: ``OnCountChange`` writes a new count's constraints at once (a rollout when they change);
    #: ``OnNextRollout`` records them as pending until the pod template changes for another reason.
    rewrite: str = ON_COUNT_CHANGE
    #: Rule S18: a Deployment whose removed self anti-affinity was required gets a DoNotSchedule host spread.
    enforceForRequiredAntiAffinity: bool = True


FAILURE_MODES = ("open", "closed")


@dataclass(frozen=True)
class WebhookSettings:
    """``webhook``: how the admission webhook treats a policy failure and big bodies.

    ``failureMode: open`` (default) admits the object unchanged with a warning;
    ``closed`` denies it with the error.
    """

    failureMode: str = "open"
    maxRequestBytes: int = 6 * 1024 * 1024
    readHpasOnCreate: bool = True




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
    spreadAwareScaleDown: bool = True


GANG_METHODS = ("labels", "podgroup", "koordinator", "workload")
#: ``kube-scheduler``: the default scheduler, with Kubernetes' own gang scheduling (method workload, rule G16).
#: ``volcano`` (rule G21): method podgroup only; policylib's controller creates the Volcano PodGroup.
GANG_SCHEDULERS = ("ack", "koordinator", "scheduler-plugins", "kube-scheduler", "volcano")
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
        host.pop("rewrite")  # decides when to write, not what
        if host["enforceForRequiredAntiAffinity"]:
            # The default (true; rule S18) keeps the fingerprints of records written before the
            # setting existed: the spread of a Deployment without a required anti-affinity is the same.
            host.pop("enforceForRequiredAntiAffinity")
        data = {"zone": asdict(self.zone), "host": host, "removePodAntiAffinity": self.removePodAntiAffinity}
        blob = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()[:12]


HELM_NESTING = ("lrs-operator", "operator", "config")


# --- combinations refused, as data (rule C8): the checks below and the schema's if/then read them -----

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
          "scheduling.k8s.io/v1alpha2 PodGroups (supported: kube-scheduler)"),
    _gang("G16", {"scheduler": ("kube-scheduler",)}, "method", ("workload",), ("method", "scheduler"),
          "gang.method {method!r} is not supported on scheduler 'kube-scheduler': the default scheduler gangs only "
          "pods whose spec.schedulingGroup names a scheduling.k8s.io PodGroup (supported there: workload)"),
    _gang("G16", {"method": ("workload",)}, "matchPolicy", ("none",), ("matchPolicy", "method"),
          "gang.matchPolicy {matchPolicy!r} is not supported with gang.method workload: a scheduling.k8s.io/v1alpha2 "
          "gang policy has only minCount (supported: none)"),
    _gang("G16", {"method": ("workload",)}, "groupByRole", (False,), ("groupByRole", "method"),
          "gang.groupByRole true is not supported with gang.method workload: Kubernetes 1.36 gangs each PodGroup on "
          "its own (the GangScheduling plugin's Permit counts one PodGroup's pods); nothing binds several PodGroups "
          "together as a GangGroup (supported: false)"),
    _gang("G16", {"method": ("workload",)}, "operatorGang", ("none",), ("operatorGang", "method"),
          "gang.operatorGang {operatorGang!r} is not supported with gang.method workload: the operator's gang mode "
          "makes its own PodGroups for its own scheduler (supported: none)"),
    # Rule G21: on scheduler volcano, only method podgroup (Volcano gangs the pods of a Volcano PodGroup named by
    # their annotation scheduling.k8s.io/group-name), no match policy, no GangGroup.
    _gang("G21", {"scheduler": ("volcano",)}, "method", ("podgroup",), ("method", "scheduler"),
          "gang.method {method!r} is not supported on scheduler 'volcano': Volcano gangs only the pods of a Volcano "
          "PodGroup (scheduling.volcano.sh/v1beta1), named by their annotation scheduling.k8s.io/group-name "
          "(supported there: podgroup)"),
    _gang("G21", {"scheduler": ("volcano",)}, "matchPolicy", ("none",), ("matchPolicy", "scheduler"),
          "gang.matchPolicy {matchPolicy!r} is not supported on scheduler 'volcano': its gang plugin counts every "
          "pod of the PodGroup (supported: none)"),
    _gang("G21", {"scheduler": ("volcano",)}, "groupByRole", (False,), ("groupByRole", "scheduler"),
          "gang.groupByRole true is not supported on scheduler 'volcano': it has no GangGroup (supported: false)"),
)


# --- the schema: the one description of the configuration's shape (rule C6) --------------------
#
# Adding a setting is one change in two lines: its property in ``_SECTION_PROPERTIES`` below (type,
# default, description, rule) and the field of the same name, with the same default, in its section's
# dataclass above. The schema validates, the dataclass carries the value; a test checks they agree.

def _setting(type_: str | list[str], default: Any, description: str, rule: str | None, **more: Any) -> dict[str, Any]:
    return {"type": type_, "default": default, "description": description, "x-rule": rule, **more}


def _count(default: int | None, description: str, rule: str | None, nullable: bool = False) -> dict[str, Any]:
    """An int32 setting of at least 1 (rule C4)."""
    return _setting(["integer", "null"] if nullable else "integer", default, description, rule, minimum=1, maximum=INT32_MAX)


def _flag(default: bool, description: str, rule: str | None) -> dict[str, Any]:
    return _setting("boolean", default, description, rule)


def _choice(choices: tuple[str, ...], default: str, description: str, rule: str | None, **more: Any) -> dict[str, Any]:
    return _setting("string", default, description, rule, enum=list(choices), **more)


def _match_label_keys(rule: str) -> dict[str, Any]:
    return _setting(["string", "array", "null"], ["pod-template-hash"],
                    "Label keys whose values the scheduler adds to the constraint's selector per pod: "
                    "'pod-template-hash' (each ReplicaSet spreads on its own), a list of keys, or 'none'.",
                    rule, format="match-label-key", items={"type": "string", "format": "label-key"}, uniqueItems=True,
                    **{"x-invalid": "must be 'pod-template-hash', a list of label keys, or 'none'"})


_DISCOVERY_ENTRY: dict[str, Any] = {
    "type": "object",
    "description": "One source of Volcano's networkTopologyDiscovery, verbatim; the 'label' source maps each "
                   "topology name to its node label keys, top tier first, kubernetes.io/hostname last.",
    "required": ["source"],
    "properties": {
        "source": {"type": "string", "description": "label, ufm, roce, ..."},
        "enabled": {"type": "boolean", "default": True, "description": "Whether Volcano runs this source."},
        "config": {"type": "object", "description": "The source's own settings."},
    },
    "if": {"properties": {"source": {"const": "label"}}},
    "then": {"required": ["config"], "properties": {"config": {
        "required": ["networkTopologyTypes"],
        "properties": {"networkTopologyTypes": {
            "type": "object", "minProperties": 1,
            "propertyNames": {"minLength": 1, "maxLength": 20, "x-invalid": "a topology name has 1 to 20 characters"},
            "additionalProperties": {
                "type": "array", "minItems": 2,
                "x-invalid": "needs at least one tier label and the node level (kubernetes.io/hostname) last",
                "items": {"type": "object", "required": ["nodeLabel"],
                          "properties": {"nodeLabel": {"type": "string", "format": "label-key"}},
                          "x-invalid": "each tier is {nodeLabel: <label key>}"}},
            "x-invalid": "must map a topology name to its list of {nodeLabel: ...} entries"}}}}},
    "x-invalid": "each entry needs a 'source' (for example 'label')",
}

_SECTION_PROPERTIES: dict[str, tuple[str, str | None, dict[str, dict[str, Any]]]] = {
    "zoneTopologySpread": ("The zone spread: always a preference (ScheduleAnyway).", "S3", {
        "enabled": _flag(True, "Write the zone spread constraint.", "S8"),
        "topologyKey": _setting("string", "topology.kubernetes.io/zone", "The Node label that names a zone.", "S3",
                                format="label-key"),
        "maxSkew": _count(1, "The zone constraint's maxSkew.", "S3"),
        "matchLabelKeys": _match_label_keys("S7"),
        "whenUnsatisfiable": _choice((SCHEDULE_ANYWAY,), SCHEDULE_ANYWAY, "Accepted only as ScheduleAnyway: the zone "
                                     "spread is never enforced.", "S3", **{"x-invalid": "the zone spread is always "
                                     "ScheduleAnyway (docs/specification.md rule S3); remove the key or set "
                                     "ScheduleAnyway"}),
    }),
    "hostTopologySpread": ("The host (Node) spread: a preference, or enforced from hardMinReplicas.", "S4", {
        "enabled": _flag(True, "Write the host spread constraint.", "S8"),
        "whenUnsatisfiable": _choice(WHEN_UNSATISFIABLE, SCHEDULE_ANYWAY, "DoNotSchedule enforces the host spread "
                                     "once the effective replica count reaches hardMinReplicas.", "S4"),
        "topologyKey": _setting("string", "kubernetes.io/hostname", "The Node label that names a host.", "S4",
                                format="label-key"),
        "maxSkew": _count(1, "The host constraint's maxSkew (the least, with the replica-derived rule).", "S5"),
        "minDomains": _count(3, "minDomains of an enforced host constraint.", "S5, S6"),
        "hardMinReplicas": _count(3, "The effective replica count from which DoNotSchedule is enforced.", "S4"),
        "enableReplicaDerivedMaxSkewRule": _flag(True, "An enforced host spread's maxSkew is "
                                                 "max(maxSkew, ceil(replicas / minDomains)).", "S5"),
        "matchLabelKeys": _match_label_keys("S7"),
        "reconcileDrift": _flag(False, "The controller rewrites Deployments whose placement drifted from the "
                                "settings.", "S17"),
        "rewrite": _choice(REWRITE_MODES, ON_COUNT_CHANGE, "When a change of the effective count alone rewrites "
                           "the pod template: OnCountChange at once (one rollout when the constraints change); "
                           "OnNextRollout holds it in the policylib.io/spread-pending annotation until the template "
                           "changes for another reason (no rollout).", "S19",
                           **{"x-invalid": "must be one of OnCountChange, OnNextRollout"}),
        "enforceForRequiredAntiAffinity": _flag(True, "A Deployment whose replaced self anti-affinity was "
                                                "requiredDuringScheduling (a rule its author made hard) gets a "
                                                "DoNotSchedule host spread at any effective count; false: the host "
                                                "spread as configured (a preference by default), with a warning.",
                                                "S18"),
    }),
    "removePodAntiAffinity": ("", None, {}),  # a scalar, filled in below
    "webhook": ("How the admission webhook treats a policy failure and big bodies.", None, {
        "failureMode": _choice(FAILURE_MODES, "open", "open admits the object unchanged with a warning; closed "
                               "denies it with the error.", None, **{"x-invalid": "must be 'open' (admit unchanged "
                                                                    "with a warning) or 'closed' (deny)"}),
        "maxRequestBytes": _count(6 * 1024 * 1024, "The largest AdmissionReview body read.", None),
        "readHpasOnCreate": _flag(True, "A Deployment CREATE whose HPA the webhook's watch does not have reads the "
                                  "namespace's HPAs from the API server once, so an HPA applied just before its "
                                  "Deployment always counts (about 1-2 ms per such create); false: the watch only, "
                                  "and an HPA applied first may be missed (use the "
                                  "policylib.io/autoscaling-min-replicas annotation).", "W4"),
    }),
    "volcano": ("Volcano Jobs: RestartPartition events, partitions, network topology, HyperNode discovery.", "V3", {
        "enabled": _flag(True, "Apply the Volcano Job policies.", "P2"),
        "restartPartitionEvents": _setting(["array", "null"], ["PodEvicted", "PodFailed"], "Events of the "
                                           "RestartPartition lifecycle policy written on partitioned tasks; [] "
                                           "writes none.", "V3", items={"type": "string",
                                                                        "enum": list(VOLCANO_POLICY_EVENTS)},
                                           **{"x-invalid": "must be a list of Volcano events"}),
        "version": _setting("string", "v1.15.1", "The Volcano release whose admission rules preview and the "
                            "webhook's warnings follow (v1.14.0 or newer).", "V20", format="volcano-version"),
        "partitionSize": _count(None, "Pods per partition of a task's partitionPolicy; null writes none.", "V13",
                                nullable=True),
        "networkTopology": _setting(["object", "null"], {"mode": "hard", "highestTierAllowed": 1},
                                    "The networkTopology written on Jobs: mode and one tier bound; null writes "
                                    "none.", "V4, V5", additionalProperties=False, properties={
                                        "mode": {"type": "string", "enum": list(NETWORK_TOPOLOGY_MODES),
                                                 "default": "hard", "description": "hard or soft."},
                                        "highestTierAllowed": {"type": ["integer", "null"], "minimum": 1,
                                                               "maximum": INT32_MAX, "description": "The highest tier "
                                                               "a job may span."},
                                        "highestTierName": {"type": ["string", "null"], "minLength": 1, "description": "The "
                                                            "highest tier, by name (Volcano v1.15.0 and later).",
                                                            "x-invalid": "must be a non-empty tier name"}},
                                    **{"x-invalid": "must be a mapping like {mode: hard, highestTierAllowed: 1}"}),
        "networkTopologyDiscovery": _setting(["array", "null"], [], "Volcano's default_controller_conf "
                                             "networkTopologyDiscovery list, verbatim: what `policylib hypernodes` "
                                             "builds HyperNodes from.", "H1", items=_DISCOVERY_ENTRY,
                                             **{"x-invalid": "must be a list (Volcano's default_controller_conf "
                                                             "list)"}),
    }),
    "gang": ("Gang metadata for Kubeflow jobs.", "G1", {
        "enabled": _flag(True, "Apply the gang policies.", "P2"),
        "method": _choice(GANG_METHODS, "labels", "How a gang is declared: pod labels, a PodGroup, Koordinator "
                          "annotations, or Kubernetes' own Workload and PodGroup (scheduling.k8s.io/v1alpha2).",
                          "G4, G5, G16"),
        "scheduler": _choice(GANG_SCHEDULERS, "ack", "The scheduler that reads the gang.", "G4, G6, G16, G21"),
        "scheduleTimeoutSeconds": _count(10, "How long a gang may wait for its minimum.", "G5"),
        "matchPolicy": _choice(MATCH_POLICIES, "none", "Which pods count toward the minimum.", "G12"),
        "groupByRole": _flag(False, "One gang per replica type, bound together as a GangGroup.", "G1"),
        "onViolation": _choice(ON_VIOLATION, "warn", "A gang whose pods do not share one priority class: warn, "
                               "or deny the job.", "G9"),
        "trainingOperatorGang": _flag(False, "training-operator gangs every job itself; policylib leaves jobs "
                                      "alone.", "G13"),
        "operatorGang": _choice(OPERATOR_GANG_MODES, "none", "The gang mode the Kubeflow operators run with "
                                "(training-operator --gang-scheduler-name, MPI Operator --gang-scheduling): "
                                "when set, the operator owns the PodGroup and policylib writes no gang metadata.",
                                "G15"),
    }),
    "controller": ("How `python -m webhook controller` applies its plan.", None, {
        "maxConcurrentRollouts": _count(3, "How many Deployments the controller has rolling at once.", None),
        "resyncSeconds": _count(300, "How often the controller re-plans every object.", None),
        "dryRun": _flag(False, "Log the plan; write nothing.", None),
        "leaseName": _setting("string", "policylib-controller", "The Lease of the controller's leader election.",
                              None, format="dns-subdomain"),
        "leaseDurationSeconds": _count(15, "How long a leader's Lease lasts without renewal.", None),
        "spreadAwareScaleDown": _flag(True, "Keep a pod deletion cost on the pods of the Deployments policylib "
                                      "manages, so a scale-down removes pods of the fullest zone first.", "S23"),
    }),
}

_SCALARS: dict[str, dict[str, Any]] = {
    "removePodAntiAffinity": _choice(ANTI_AFFINITY_REMOVAL, "own", "Which pod anti-affinity terms writing the spread "
                                     "removes: own (terms selecting the Deployment's own pods) or all.", "S9",
                                     **{"x-invalid": "must be 'own' (terms selecting the Deployment's own pods) or "
                                                     "'all'"}),
}


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
    properties = _SECTION_PROPERTIES[c.section][2]
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


def _spread_key_rule(mine: str, other: str) -> dict[str, Any]:
    """Both spreads on and ``other``'s topologyKey left at its default: ``mine`` may not take that default. (Two
    keys given with the same value cannot be said in JSON Schema: the Helm chart's templates refuse them.)"""
    default = _SECTION_PROPERTIES[other][2]["topologyKey"]["default"]
    return {"description": f"{mine}.topologyKey must differ from {other}.topologyKey (default {default}) while both "
                           "spreads are enabled.",
            "if": {"properties": {mine: {"properties": {"enabled": {"const": True}}},
                                  other: {"properties": {"enabled": {"const": True}, "topologyKey": False}}}},
            "then": {"properties": {mine: {"properties": {"topologyKey": {"not": {"const": default}}}}}}}


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
    properties: dict[str, Any] = {}
    for name, (description, rule, props) in _SECTION_PROPERTIES.items():
        if name in _SCALARS:
            properties[name] = copy.deepcopy(_SCALARS[name])
            continue
        properties[name] = {"type": ["object", "null"], "default": {}, "description": description, "x-rule": rule,
                            "additionalProperties": False, "properties": copy.deepcopy(props)}
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
        schema["allOf"] = [_spread_key_rule("hostTopologySpread", "zoneTopologySpread"),
                           _spread_key_rule("zoneTopologySpread", "hostTopologySpread")]
    return schema


def section_classes() -> dict[str, type]:
    """The dataclass that carries each section of :func:`config_schema` (Config's fields)."""
    return {f.name: f.default_factory for f in fields(Config)  # type: ignore[misc]
            if f.default_factory is not MISSING}


# --- schema errors as field errors ------------------------------------------------------------

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


def _unknown_key(path: str, key: Any, known: Sequence[str]) -> SettingError:
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
        return [_unknown_key(path, key, known) for key in error.instance if key not in known]
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
            if labels[-1] != "kubernetes.io/hostname":
                errs.append(SettingError(ErrorType.INVALID, f"{tp}[{len(labels) - 1}].nodeLabel", labels[-1],
                                         "the last entry is the node level and must be kubernetes.io/hostname "
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
_RAW_CHECKS: dict[str, Callable[[Mapping[str, Any]], list[FieldError]]] = {"volcano": volcano_errors}


def _cross_errors(sections: Mapping[str, Any]) -> list[FieldError]:
    errs: list[FieldError] = []
    if "volcano" in sections:
        errs += check_volcano(sections["volcano"])
    if "gang" in sections:
        errs += gang_combination_errors(sections["gang"])
    if "zoneTopologySpread" in sections and "hostTopologySpread" in sections:
        errs += spread_key_errors(sections["zoneTopologySpread"], sections["hostTopologySpread"])
    return errs


# --- from the validated document to the dataclasses ----------------------------------------------

def _match_label_keys_value(value: Any) -> tuple[str, ...]:
    """``pod-template-hash``, any single label key, a list of keys, or ``none``."""
    if value is None or value == "none":
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def _network_topology_value(value: Any) -> NetworkTopology | None:
    if value is None:
        return None
    return NetworkTopology(value.get("mode", "hard"), value.get("highestTierAllowed"), value.get("highestTierName"))


def _discovery_value(value: Any) -> tuple[DiscoverySource, ...]:
    out = []
    for item in value or ():
        topologies: tuple[tuple[str, tuple[str, ...]], ...] = ()
        if item["source"] == "label":
            types = item["config"]["networkTopologyTypes"]
            topologies = tuple((name, tuple(t["nodeLabel"] for t in tiers)) for name, tiers in types.items())
        out.append(DiscoverySource(item["source"], item.get("enabled", True), topologies))
    return tuple(out)


#: Settings whose YAML form is not the dataclass value as it is (lists become tuples without one).
_CONVERT: dict[str, Callable[[Any], Any]] = {
    "matchLabelKeys": _match_label_keys_value,
    "networkTopology": _network_topology_value,
    "networkTopologyDiscovery": _discovery_value,
    "restartPartitionEvents": lambda v: tuple(v or ()),
    "version": lambda v: "v" + v.lstrip("v"),
}


def _as_value(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def section_value(cls: type, raw: Mapping[str, Any] | None) -> Any:
    """A section's dataclass from its validated mapping: given keys converted, the rest defaults."""
    stored = {f.name for f in fields(cls)}
    values = {}
    for key, value in (raw or {}).items():
        if key in stored:
            values[key] = _CONVERT.get(key, _as_value)(value)
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
    known = list(_SECTION_PROPERTIES)
    body, nested = _unwrap_helm_values(data, known)
    if nested:
        body = {k: v for k, v in body.items()
                if k in known or difflib.get_close_matches(str(k), known, n=1, cutoff=0.8)}
    body = dict(body)
    errors = schema_errors(body)
    bad_sections = {e.field.split(".")[0].split("[")[0] for e in errors}
    for name, check in _RAW_CHECKS.items():
        if name not in bad_sections and isinstance(body.get(name), Mapping):
            errors += check(body[name])
    return body, errors, ".".join(HELM_NESTING) + "." if nested else ""


#: The top-level keys of the Helm chart's values (charts/policylib/values.yaml), and the keys of its
#: ``controller:`` and ``webhook:`` sections (the Deployments', not the config's sections of those names).
CHART_VALUES_KEYS = frozenset({"config", "image", "commonLabels", "webhook", "controller", "certificates",
                               "networkPolicy", "serviceMonitor", "prometheusRule", "grafanaDashboard"})
CHART_CONTROLLER_KEYS = frozenset({"enabled", "replicas", "podDisruptionBudget", "resources", "priorityClassName",
                                   "nodeSelector", "tolerations", "affinity", "topologySpreadConstraints",
                                   "podAnnotations", "podLabels"})
CHART_WEBHOOK_KEYS = frozenset({"affinity", "excludeNamespaces", "failurePolicy", "families", "gangPodsFailurePolicy",
                                "matchConditions", "namespaceMode", "namespaceSelector", "nodeSelector",
                                "objectSelector", "podAnnotations", "podDisruptionBudget", "podLabels",
                                "priorityClassName", "replicas", "resources", "timeoutSeconds", "tolerations",
                                "topologySpreadConstraints", "workers"})
_CHART_SECTIONS = {"controller": CHART_CONTROLLER_KEYS, "webhook": CHART_WEBHOOK_KEYS}


def config_keys() -> frozenset[str]:
    """The top-level keys of a configuration (its sections, scalars, and the LRS operator's nesting)."""
    return frozenset(_SECTION_PROPERTIES) | frozenset(_SCALARS) | {HELM_NESTING[0]}


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
        sub, ours = {str(k) for k in data[name]}, set(_SECTION_PROPERTIES[name][2])
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
    errors += _cross_errors(sections)
    raise_config_errors(errors, prefix)
    scalars = {k: body[k] for k in _SCALARS if k in body}
    return Config(**sections, **scalars)


def load_config(source: Mapping[str, Any] | Config | None = None) -> Config:
    """Rule C1: settings from parsed YAML (a mapping), a :class:`Config` as it is, or ``None`` (the
    defaults). A file is read by :func:`policylib.shell.files.load_config` (``policylib.load_config``).

    Raises :class:`ConfigError` naming each key path and what is allowed.
    """
    if source is None or isinstance(source, Config):
        return source or Config()
    return config_from_dict(source)
