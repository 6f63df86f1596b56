"""Every setting, declared once: the dataclasses that carry the configuration (rules C1, C6).

Each field is one setting: its type, default, allowed values, rule and description are written here, in
the field's declaration (:mod:`policylib.config.declare`), and nowhere else; the config schema, the
defaults, docs/reference/config.md and the Helm chart's values.schema.json are made from these fields.
Adding a setting is adding one field to its section's dataclass (docs/architecture.md).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields
from functools import cached_property
from typing import Any

from ..constants import (
    CONTROLLER_NAME,
    HOSTNAME_LABEL,
    LEASE_DURATION_SECONDS,
    MAX_REVIEW_BYTES,
    NATIVE_GANG_GROUP,
    NATIVE_GANG_VERSIONS,
    POD_TEMPLATE_HASH,
    SCHEDULE_ANYWAY,
    VOLCANO_VERSION,
    WHEN_UNSATISFIABLE,
    ZONE_LABEL,
)
from ..errors import INT32_MAX
from ..hypernodes import DiscoverySource
from ..volcano_api.partitions import NETWORK_TOPOLOGY_MODES
from ..volcano_api.policies import VOLCANO_POLICY_EVENTS
from .declare import choice, choice_schema, count, flag, is_section, section, setting

ANTI_AFFINITY_REMOVAL = ("own", "all")
#: ``hostTopologySpread.rewrite`` (rule S19): when a count change alone may rewrite the pod template.
ON_COUNT_CHANGE, ON_NEXT_ROLLOUT = "OnCountChange", "OnNextRollout"
REWRITE_MODES = (ON_COUNT_CHANGE, ON_NEXT_ROLLOUT)
FAILURE_MODES = ("open", "closed")
GANG_METHODS = ("labels", "podgroup", "koordinator", "workload")
#: ``kube-scheduler``: the default scheduler, with Kubernetes' own gang scheduling (method workload, rule G16).
#: ``volcano`` (rule G21): method podgroup only; policylib's controller creates the Volcano PodGroup.
GANG_SCHEDULERS = ("ack", "koordinator", "scheduler-plugins", "kube-scheduler", "volcano")
MATCH_POLICIES = ("none", "only-waiting", "waiting-and-running", "waiting-running-succeed", "once-satisfied")
ON_VIOLATION = ("warn", "deny")
#: ``gang.operatorGang``: the gang mode the job operators run with (training-operator
#: ``--gang-scheduler-name``, the MPI Operator ``--gang-scheduling``); rule G15.
OPERATOR_GANG_MODES = ("none", "scheduler-plugins", "volcano")
#: ``gang.workloadAPIVersion`` (rule G22): ``auto`` writes the newest version the cluster serves.
WORKLOAD_API_VERSIONS = ("auto",) + NATIVE_GANG_VERSIONS
#: ``gang.topology`` (rule G25): no constraint, the zone key, or a tier of Volcano's label discovery.
NO_TOPOLOGY, ZONE_TOPOLOGY = "none", "zone"


def _match_label_keys_value(value: Any) -> tuple[str, ...]:
    """``pod-template-hash``, any single label key, a list of keys, or ``none``."""
    if value is None or value == "none":
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def _match_label_keys(rule: str) -> Any:
    return setting(["string", "array", "null"], (POD_TEMPLATE_HASH,),
                   f"Label keys whose values the scheduler adds to the constraint's selector per pod: "
                   f"'{POD_TEMPLATE_HASH}' (each ReplicaSet spreads on its own), a list of keys, or 'none'.",
                   rule, convert=_match_label_keys_value, format="match-label-key",
                   items={"type": "string", "format": "label-key"}, uniqueItems=True,
                   invalid=f"must be '{POD_TEMPLATE_HASH}', a list of label keys, or 'none'")


@dataclass(frozen=True)
class ZoneSpread:
    """``zoneTopologySpread`` (rule S3): always ScheduleAnyway."""

    enabled: bool = flag(True, "Write the zone spread constraint.", "S8")
    topologyKey: str = setting("string", ZONE_LABEL, "The Node label that names a zone.", "S3", format="label-key")
    maxSkew: int = count(1, "The zone constraint's maxSkew.", "S3")
    matchLabelKeys: tuple[str, ...] = _match_label_keys("S7")


@dataclass(frozen=True)
class HostSpread:
    """``hostTopologySpread`` (rules S4-S6)."""

    enabled: bool = flag(True, "Write the host spread constraint.", "S8")
    whenUnsatisfiable: str = choice(WHEN_UNSATISFIABLE, SCHEDULE_ANYWAY, "DoNotSchedule enforces the host spread "
                                    "once the effective replica count reaches hardMinReplicas.", "S4")
    topologyKey: str = setting("string", HOSTNAME_LABEL, "The Node label that names a host.", "S4",
                               format="label-key")
    maxSkew: int = count(1, "The host constraint's maxSkew (the least, with the replica-derived rule).", "S5")
    minDomains: int = count(3, "minDomains of an enforced host constraint.", "S5, S6")
    hardMinReplicas: int = count(3, "The effective replica count from which DoNotSchedule is enforced.", "S4")
    enableReplicaDerivedMaxSkewRule: bool = flag(True, "An enforced host spread's maxSkew is "
                                                 "max(maxSkew, ceil(replicas / minDomains)).", "S5")
    matchLabelKeys: tuple[str, ...] = _match_label_keys("S7")
    reconcileDrift: bool = flag(False, "The controller rewrites Deployments whose placement drifted from the "
                                "settings.", "S17")
    #: Rule S19: ``OnCountChange`` writes a new count's constraints at once (a rollout when they change);
    #: ``OnNextRollout`` records them as pending until the pod template changes for another reason.
    rewrite: str = choice(REWRITE_MODES, ON_COUNT_CHANGE, "When a change of the effective count alone rewrites "
                          "the pod template: OnCountChange at once (one rollout when the constraints change); "
                          "OnNextRollout holds it in the policylib.io/spread-pending annotation until the template "
                          "changes for another reason (no rollout).", "S19",
                          invalid="must be one of OnCountChange, OnNextRollout")
    #: Rule S18: a Deployment whose removed self anti-affinity was required gets a DoNotSchedule host spread.
    enforceForRequiredAntiAffinity: bool = flag(True, "A Deployment whose replaced self anti-affinity was "
                                                "requiredDuringScheduling (a rule its author made hard) gets a "
                                                "DoNotSchedule host spread at any effective count; false: the host "
                                                "spread as configured (a preference by default), with a warning.",
                                                "S18")


@dataclass(frozen=True)
class StatefulSetSettings:
    """``statefulSets`` (rules A1-A6): StatefulSets get the zone and host spread of Deployments."""

    enabled: bool = flag(True, "Apply the zone and host spread to StatefulSets (the zoneTopologySpread and "
                         "hostTopologySpread settings, as for Deployments).", "P2")


@dataclass(frozen=True)
class LeaderWorkerSetSettings:
    """``leaderWorkerSets`` (rules E1-E8): LeaderWorkerSets' leaders get the zone and host spread of Deployments,
    counting groups, and each group is kept within the gang placement's level."""

    enabled: bool = flag(True, "Apply the zone and host spread to the leaders of LeaderWorkerSets (counting groups) "
                         "and keep each group within topology.gangs.within.", "P2")


@dataclass(frozen=True)
class WebhookSettings:
    """``webhook``: how the admission webhook treats a policy failure and big bodies.

    ``failureMode: open`` (default) admits the object unchanged with a warning;
    ``closed`` denies it with the error.
    """

    failureMode: str = choice(FAILURE_MODES, "open", "open admits the object unchanged with a warning; closed "
                              "denies it with the error.", None, invalid="must be 'open' (admit unchanged "
                              "with a warning) or 'closed' (deny)")
    maxRequestBytes: int = count(MAX_REVIEW_BYTES, "The largest AdmissionReview body read.", None)
    readHpasOnCreate: bool = flag(True, "A Deployment CREATE whose HPA the webhook's watch does not have reads the "
                                  "namespace's HPAs from the API server once, so an HPA applied just before its "
                                  "Deployment always counts (one API call per such create); false: the watch only, "
                                  "and an HPA applied first may be missed (use the "
                                  "policylib.io/autoscaling-min-replicas annotation).", "W4")


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


def _network_topology_value(value: Any) -> NetworkTopology | None:
    if value is None:
        return None
    return NetworkTopology(value.get("mode", NetworkTopology.mode), value.get("highestTierAllowed"),
                           value.get("highestTierName"))


def _discovery_value(value: Any) -> tuple[DiscoverySource, ...]:
    out = []
    for item in value or ():
        topologies: tuple[tuple[str, tuple[str, ...]], ...] = ()
        if item["source"] == "label":
            types = item["config"]["networkTopologyTypes"]
            topologies = tuple((name, tuple(t["nodeLabel"] for t in tiers)) for name, tiers in types.items())
        out.append(DiscoverySource(item["source"], item.get("enabled", DiscoverySource.enabled), topologies))
    return tuple(out)


#: The schema of one entry of ``volcano.networkTopologyDiscovery`` (Volcano's own shape, kept verbatim).
DISCOVERY_ENTRY: dict[str, Any] = {
    "type": "object",
    "description": "One source of Volcano's networkTopologyDiscovery, verbatim; the 'label' source maps each "
                   f"topology name to its node label keys, top tier first, {HOSTNAME_LABEL} last.",
    "required": ["source"],
    "properties": {
        "source": {"type": "string", "description": "label, ufm, roce, ..."},
        "enabled": {"type": "boolean", "default": DiscoverySource.enabled, "description": "Whether Volcano runs this source."},
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
                "x-invalid": f"needs at least one tier label and the node level ({HOSTNAME_LABEL}) last",
                "items": {"type": "object", "required": ["nodeLabel"],
                          "properties": {"nodeLabel": {"type": "string", "format": "label-key"}},
                          "x-invalid": "each tier is {nodeLabel: <label key>}"}},
            "x-invalid": "must map a topology name to its list of {nodeLabel: ...} entries"}}}}},
    "x-invalid": "each entry needs a 'source' (for example 'label')",
}

_NETWORK_TOPOLOGY_PROPERTIES: dict[str, Any] = {
    "mode": {"type": "string", "enum": list(NETWORK_TOPOLOGY_MODES), "default": NetworkTopology.mode,
             "description": "hard or soft."},
    "highestTierAllowed": {"type": ["integer", "null"], "minimum": 1, "maximum": INT32_MAX,
                           "description": "The highest tier a job may span."},
    "highestTierName": {"type": ["string", "null"], "minLength": 1, "description": "The highest tier, by name "
                        "(Volcano v1.15.0 and later).", "x-invalid": "must be a non-empty tier name"}}


@dataclass(frozen=True)
class VolcanoSettings:
    """``volcano`` (rules V3, V5, V13-V18): RestartPartition events, partitions, network topology, discovery."""

    enabled: bool = flag(True, "Apply the Volcano Job policies.", "P2")
    restartPartitionEvents: tuple[str, ...] = setting(
        ["array", "null"], ("PodEvicted", "PodFailed"), "Events of the RestartPartition lifecycle policy written "
        "on partitioned tasks; [] writes none.", "V3", convert=lambda v: tuple(v or ()),
        items={"type": "string", "enum": list(VOLCANO_POLICY_EVENTS)},
        invalid="must be a list of Volcano events")
    #: The Volcano release whose admission rules preview and the webhook's warnings follow.
    version: str = setting("string", VOLCANO_VERSION, "The Volcano release whose admission rules preview and the "
                           "webhook's warnings follow (v1.14.0 or newer). The default is the newest release; the "
                           "end-to-end tests run Volcano v1.14.1 (v1.15 cannot be built from the Go module proxy, "
                           "docs/e2e.md) with this set to v1.14.1, and v1.15.1's rules are ported from its source and "
                           "unit-tested.", "V20", convert=lambda v: "v" + v.lstrip("v"), format="volcano-version")
    partitionSize: int | None = count(None, "Pods per partition of a task's partitionPolicy; null writes none.", "V13",
                                      nullable=True)
    networkTopology: NetworkTopology | None = setting(
        ["object", "null"], None, "The networkTopology written on the partitions of Jobs: mode and one tier bound; "
        "null writes none. A hard one is written only where something gives Volcano HyperNodes to meet it: an "
        "enabled source in networkTopologyDiscovery, or HyperNode objects in the input.",
        "V4, V5, V25", factory=NetworkTopology, convert=_network_topology_value, additionalProperties=False,
        properties=_NETWORK_TOPOLOGY_PROPERTIES,
        invalid="must be a mapping like {mode: hard, highestTierAllowed: 1}")
    networkTopologyDiscovery: tuple[DiscoverySource, ...] = setting(
        ["array", "null"], (), "Volcano's default_controller_conf networkTopologyDiscovery list, verbatim: what "
        "`policylib hypernodes` builds HyperNodes from; an enabled source lets a hard networkTopology be written.",
        "H1, V25", convert=_discovery_value, items=DISCOVERY_ENTRY,
        invalid="must be a list (Volcano's default_controller_conf list)")


@dataclass(frozen=True)
class ControllerSettings:
    """``controller``: how ``python -m webhook controller`` applies its plan.

    ``maxConcurrentRollouts`` caps how many Deployments it has rolling at once,
    so turning on reconcileDrift does not roll a whole cluster in one second.
    """

    maxConcurrentRollouts: int = count(3, "How many Deployments the controller has rolling at once.", None)
    resyncSeconds: int = count(300, "How often the controller re-plans every object.", None)
    dryRun: bool = flag(False, "Log the plan; write nothing.", None)
    leaseName: str = setting("string", CONTROLLER_NAME, "The Lease of the controller's leader election.",
                             None, format="dns-subdomain")
    leaseDurationSeconds: int = count(LEASE_DURATION_SECONDS, "How long a leader's Lease lasts without renewal.", None)
    spreadAwareScaleDown: bool = flag(True, "Keep a pod deletion cost on the pods of the Deployments policylib "
                                      "manages, so a scale-down removes pods of the fullest zone first.", "S23")


@dataclass(frozen=True)
class GangSettings:
    """``gang`` (rules G1-G13): how gang metadata is written for Kubeflow jobs."""

    enabled: bool = flag(True, "Apply the gang policies.", "P2")
    method: str = choice(GANG_METHODS, "labels", "How a gang is declared: pod labels, a PodGroup, Koordinator "
                         f"annotations, or Kubernetes' own Workload and PodGroup ({NATIVE_GANG_GROUP}).",
                         "G4, G5, G16")
    scheduler: str = choice(GANG_SCHEDULERS, "ack", "The scheduler that reads the gang.", "G4, G6, G16, G21")
    scheduleTimeoutSeconds: int = count(10, "How long a gang may wait for its minimum.", "G5")
    matchPolicy: str = choice(MATCH_POLICIES, "none", "Which pods count toward the minimum.", "G12")
    groupByRole: bool = flag(False, "One gang per replica type, bound together as a GangGroup.", "G1")
    onViolation: str = choice(ON_VIOLATION, "warn", "A gang whose pods do not share one priority class: warn, "
                              "or deny the job.", "G9")
    trainingOperatorGang: bool = flag(False, "training-operator gangs every job itself; policylib leaves jobs "
                                      "alone.", "G13")
    operatorGang: str = choice(OPERATOR_GANG_MODES, "none", "The gang mode the Kubeflow operators run with "
                               "(training-operator --gang-scheduler-name, MPI Operator --gang-scheduling): "
                               "when set, the operator owns the PodGroup and policylib writes no gang metadata.",
                               "G15")
    workloadAPIVersion: str = choice(WORKLOAD_API_VERSIONS, "auto", "Method workload: the scheduling.k8s.io "
                                     "version of the Workload and PodGroup written. auto: the newest the API server "
                                     "serves (v1beta1 on Kubernetes 1.37, v1alpha2 on 1.36), read by the webhook and "
                                     "the controller from its discovery; preview, plan, simulate and check take "
                                     "--kube-version, else assume 1.37. A version the cluster does not serve makes "
                                     "no PodGroup, and the webhook refuses the gang's pods, naming what to enable.",
                                     "G22, G23")
    topology: str = setting("string", NO_TOPOLOGY, "Method workload: the topology level each gang must fit in "
                            "(PodGroup schedulingConstraints.topology, kube-scheduler's TopologyAwareWorkloadScheduling): "
                            "none; zone (zoneTopologySpread.topologyKey); tier-N (the Nth tier, 1 the lowest, of "
                            "volcano.networkTopologyDiscovery's label topologies, for example a rack); or a tier's "
                            "node label key listed there.", "G25", format="gang-topology",
                            invalid="must be none, zone, tier-N or a tier's node label key")
    jobSetExclusiveTopology: str = setting("string", NO_TOPOLOGY, "JobSets: the topology level each of a JobSet's "
                                           "Jobs gets a domain of to itself (JobSet's annotation "
                                           "alpha.jobset.sigs.k8s.io/exclusive-topology, enforced by JobSet's pod "
                                           "webhooks), written only where it cannot deadlock the gang (every Job "
                                           "one pod, or no gang): none, zone, tier-N or a tier's node label key, "
                                           "as gang.topology.", "J5", format="gang-topology",
                                           invalid="must be none, zone, tier-N or a tier's node label key")


#: ``topology.gangs.mode`` (rule N1): a gang must fit in one domain of the level, or should.
PLACEMENT_MODES = ("required", "preferred")
#: A level's name in ``topology.levels`` (rule N1).
LEVEL_NAME_PATTERN = "^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"


@dataclass(frozen=True)
class GangPlacement:
    """``topology.gangs`` (rule N1): the level every gang is kept within, and whether that is required."""

    within: str = NO_TOPOLOGY
    mode: str = "required"

    def as_spec(self) -> dict[str, Any]:
        return {"within": self.within, "mode": self.mode}


@dataclass(frozen=True)
class JobSetPlacement:
    """``topology.jobSets`` (rule N7): the level each Job of a JobSet gets a domain of to itself."""

    jobPerDomain: str = NO_TOPOLOGY

    def as_spec(self) -> dict[str, Any]:
        return {"jobPerDomain": self.jobPerDomain}


def _levels_value(value: Any) -> tuple[tuple[str, str], ...]:
    return tuple((item["name"], item["nodeLabel"]) for item in value or ())


def _gang_placement_value(value: Any) -> GangPlacement:
    value = value or {}
    return GangPlacement(value.get("within", GangPlacement.within), value.get("mode", GangPlacement.mode))


def _jobset_placement_value(value: Any) -> JobSetPlacement:
    return JobSetPlacement((value or {}).get("jobPerDomain", JobSetPlacement.jobPerDomain))


_LEVEL_REF = {"type": "string", "pattern": f"^none$|{LEVEL_NAME_PATTERN}",
              "x-invalid": "must be none or the name of a level of topology.levels"}


@dataclass(frozen=True)
class TopologySettings:
    """``topology`` (rules N1-N7): the cluster's topology levels, declared once, and the placement every writer
    turns into its scheduler's words. Without levels, the levels are derived from the older keys (rule N2)."""

    levels: tuple[tuple[str, str], ...] = setting(
        ["array", "null"], (), "The cluster's topology levels, widest first: {name, nodeLabel} each (names of "
        f"lowercase letters, digits and '-', unique; node label keys unique; {HOSTNAME_LABEL} only last). Empty: "
        "the levels are zoneTopologySpread.topologyKey (named zone), the tiers of volcano.networkTopologyDiscovery's "
        "label topologies (named tier-N) and hostTopologySpread.topologyKey (named host). A level's Volcano tier is "
        "its distance from the nodes (1: the level just above them), as Volcano's label discovery numbers them.",
        "N1, N2, N3", convert=_levels_value, maxItems=16,
        items={"type": "object", "required": ["name", "nodeLabel"], "additionalProperties": False,
               "properties": {"name": {"type": "string", "pattern": LEVEL_NAME_PATTERN,
                                       "x-invalid": "must be a level name of lowercase letters, digits and '-'"},
                              "nodeLabel": {"type": "string", "format": "label-key"}},
               "x-invalid": "each level is {name: <level name>, nodeLabel: <node label key>}"},
        invalid="must be a list of {name, nodeLabel}, widest level first")
    gangs: GangPlacement = setting(
        ["object", "null"], None, "The placement of every gang (Kubeflow jobs, JobSets, TrainJobs): within, a level "
        "name (all of a gang's pods in one domain of it) or none; mode, required or preferred. Written in each "
        "scheduler's words: kube-scheduler's PodGroup schedulingConstraints.topology (required only), Volcano's "
        "PodGroup networkTopology, Kueue's podset-required/preferred-topology annotations (Kueue-managed jobs only). "
        "gang.topology is the older key for a required level (method workload).", "N1, N4, N5, N6",
        factory=GangPlacement, convert=_gang_placement_value, additionalProperties=False,
        properties={"within": dict(_LEVEL_REF, default=NO_TOPOLOGY,
                                   description="A level name, or none."),
                    "mode": {"type": "string", "enum": list(PLACEMENT_MODES), "default": "required",
                             "description": "required or preferred."}},
        invalid="must be a mapping like {within: rack, mode: required}")
    jobSets: JobSetPlacement = setting(
        ["object", "null"], None, "JobSets: jobPerDomain, a level name each Job gets a domain of to itself (JobSet's "
        "alpha.jobset.sigs.k8s.io/exclusive-topology, written only where it cannot deadlock the gang), or none. "
        "gang.jobSetExclusiveTopology is the older key.", "N7, J5",
        factory=JobSetPlacement, convert=_jobset_placement_value, additionalProperties=False,
        properties={"jobPerDomain": dict(_LEVEL_REF, default=NO_TOPOLOGY, description="A level name, or none.")},
        invalid="must be a mapping like {jobPerDomain: rack}")


@dataclass(frozen=True)
class Config:
    """Everything policylib reads. Sections mirror the YAML keys."""

    zoneTopologySpread: ZoneSpread = section(
        ZoneSpread, "The zone spread: always a preference (ScheduleAnyway). Its keys and defaults are the LRS "
        "operator's (the operator that spreads DataRobot's Long Running Services; docs/configuration.md).", "S3",
        accepted={"whenUnsatisfiable": choice_schema(
            (SCHEDULE_ANYWAY,), SCHEDULE_ANYWAY, "Accepted only as ScheduleAnyway: the zone spread is never "
            "enforced.", "S3", invalid="the zone spread is always ScheduleAnyway (docs/specification.md "
            "rule S3); remove the key or set ScheduleAnyway")})
    hostTopologySpread: HostSpread = section(HostSpread, "The host (Node) spread: a preference, or enforced from "
                                             "hardMinReplicas. Its keys and defaults are the LRS operator's, and "
                                             "rewrite and enforceForRequiredAntiAffinity policylib's own "
                                             "(docs/configuration.md).", "S4")
    # Rule S9: the literal reading is "removes any pod anti-affinity" (``all``); by default we
    # remove only terms that select the Deployment's own pods (what the LRS operator's
    # ha_topology_key setting writes) and keep terms aimed at other workloads.
    removePodAntiAffinity: str = choice(ANTI_AFFINITY_REMOVAL, "own", "Which pod anti-affinity terms writing the "
                                        "spread removes: own (terms selecting the Deployment's own pods) or all.", "S9",
                                        invalid="must be 'own' (terms selecting the Deployment's own pods) "
                                        "or 'all'")
    webhook: WebhookSettings = section(WebhookSettings, "How the admission webhook treats a policy failure and big "
                                       "bodies.", None)
    volcano: VolcanoSettings = section(VolcanoSettings, "Volcano Jobs: RestartPartition events, partitions, network "
                                       "topology, HyperNode discovery.", "V3")
    gang: GangSettings = section(GangSettings, "Gang metadata for Kubeflow jobs.", "G1")
    topology: TopologySettings = section(TopologySettings, "The cluster's topology levels and the placement of "
                                         "gangs, declared once and written in each scheduler's own words "
                                         "(docs/topology.md).", "N1")
    controller: ControllerSettings = section(ControllerSettings, "How `python -m webhook controller` applies its "
                                             "plan.", None)
    statefulSets: StatefulSetSettings = section(StatefulSetSettings, "StatefulSets: the zone and host spread of "
                                                "Deployments.", "A4")
    leaderWorkerSets: LeaderWorkerSetSettings = section(LeaderWorkerSetSettings, "LeaderWorkerSets: the "
                                                        "Deployments' spread on their leaders, each group packed.",
                                                        "E2")

    @property
    def zone(self) -> ZoneSpread:
        return self.zoneTopologySpread

    @property
    def host(self) -> HostSpread:
        return self.hostTopologySpread

    @cached_property
    def placement(self) -> Any:
        """Rules N1 and N2: the one topology declaration resolved (a
        :class:`policylib.topology.Placement`), once per configuration: every writer reads it."""
        from ..topology.levels import resolve_placement
        return resolve_placement(self)

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


def section_classes() -> dict[str, type]:
    """The dataclass that carries each section of the configuration (Config's section fields)."""
    return {f.name: f.default_factory for f in fields(Config) if is_section(f)}  # type: ignore[misc]
