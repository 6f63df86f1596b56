"""Settings advice before an install: the specification's "choose settings" rules as checks on the
config, the cluster's Nodes and, when given, its workloads (docs/specification.md, "Choosing
settings").

Each finding names the setting (``key``), its severity and the nodes or workloads concerned:
``error`` where replicas would stay Pending or a rule would do nothing, ``warning`` where the
setting is risky on this cluster, ``info`` where it has no effect.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from .config import Config, HostSpread, load_config
from .constants import POD_TEMPLATE_HASH
from .errors import PolicyError
from .facts import ClusterFacts, namespace_of
from .gang import (
    KubeflowJob,
    is_kubeflow_job,
    job_minimum,
    operator_gang_reason,
    policylib_gangs_volcano,
    read_job,
    volcano_without_gang,
)
from .hypernodes import partition_bound, scheduler_hypernodes
from .kubescheduler.plugins import eligible_nodes
from .plan import plan, summarize
from .simulate import NodeState, PodShape, is_bound_pod, node_states, simulate, simulate_load
from .simulate.engine import Cluster
from .simulate.gangs import place_gang
from .spread import (
    HOST_WEAKENED_WARNING,
    effective_replicas,
    host_spread_enforced,
    is_deployment,
    mutate_deployment,
    replaced_required_before,
)
from .validation import DO_NOT_SCHEDULE
from .workload_api import WorkloadApi
from .workload_api import resolve as resolve_workload_api

#: Labels the common clouds and autoscalers put on a node to say which node group it belongs to.
NODE_GROUP_LABELS = ("eks.amazonaws.com/nodegroup", "cloud.google.com/gke-nodepool", "kubernetes.azure.com/agentpool",
                     "karpenter.sh/nodepool", "alibabacloud.com/nodepool-id", "node.kubernetes.io/nodegroup")
#: Signs on a Node that an autoscaler manages its group.
AUTOSCALER_MARKS = ("karpenter.sh/", "cluster-autoscaler.kubernetes.io/", "autoscaler")
#: matchLabelKeys in topology spread: the MatchLabelKeysInPodTopologySpread gate is on by default from 1.27.
MATCH_LABEL_KEYS_DEFAULT_ON = (1, 27)
SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Finding:
    severity: str
    key: str
    message: str

    def as_dict(self) -> dict[str, Any]:
        return {"severity": self.severity, "key": self.key, "message": self.message}


def _names(items: Iterable[str], limit: int = 5) -> str:
    items = list(items)
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def node_groups(nodes: list[dict[str, Any]], label: str | None = None) -> tuple[str | None, dict[str, list[str]]]:
    """The label that names node groups (``label``, else the first common one present) and the groups."""
    labels = [label] if label else list(NODE_GROUP_LABELS)
    for key in labels:
        groups: dict[str, list[str]] = {}
        for n in nodes:
            value = ((n.get("metadata") or {}).get("labels") or {}).get(key)
            if value is not None:
                groups.setdefault(value, []).append(n["metadata"]["name"])
        if groups:
            return key, {k: sorted(v) for k, v in sorted(groups.items())}
    return (label, {}) if label else (None, {})


def has_autoscaler(nodes: list[dict[str, Any]]) -> bool:
    for n in nodes:
        meta = n.get("metadata") or {}
        keys = list((meta.get("labels") or {})) + list((meta.get("annotations") or {}))
        if any(mark in k for k in keys for mark in AUTOSCALER_MARKS):
            return True
    return False


def parse_version(text: str | None) -> tuple[int, int] | None:
    match = re.search(r"v?(\d+)\.(\d+)", text or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def cluster_version(nodes: list[dict[str, Any]], server_version: str | None) -> tuple[tuple[int, int] | None, str]:
    """The server's version, else the oldest kubelet's (``status.nodeInfo.kubeletVersion``)."""
    if parse_version(server_version):
        return parse_version(server_version), f"the API server's {server_version}"
    kubelets = sorted(v for v in (parse_version(((n.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion"))
                                  for n in nodes) if v)
    if kubelets:
        return kubelets[0], f"kubelet v{kubelets[0][0]}.{kubelets[0][1]} (the oldest Node's)"
    return None, ""


def check_thresholds(config: Config) -> list[Finding]:
    host = config.host
    out = []
    if host.enabled and host.whenUnsatisfiable == DO_NOT_SCHEDULE and host.hardMinReplicas < host.minDomains:
        out.append(Finding("warning", "hostTopologySpread.hardMinReplicas",
                           f"hardMinReplicas {host.hardMinReplicas} is below minDomains {host.minDomains}: a Deployment "
                           f"of {host.hardMinReplicas} to {host.minDomains - 1} replicas is enforced across "
                           f"{host.minDomains} nodes it cannot fill, so with fewer eligible nodes than minDomains each "
                           f"node holds at most maxSkew of its replicas; set hardMinReplicas to at least minDomains"))
    return out


def check_topology_labels(config: Config, nodes: list[dict[str, Any]]) -> list[Finding]:
    out = []
    for key, spread, severity in (("zoneTopologySpread", config.zone, "warning"),
                                  ("hostTopologySpread", config.host, "error")):
        if not spread.enabled or not nodes:
            continue
        missing = [n["metadata"]["name"] for n in nodes if spread.topologyKey not in
                   ((n["metadata"].get("labels") or {}))]
        if len(missing) == len(nodes):
            hard = isinstance(spread, HostSpread) and spread.whenUnsatisfiable == DO_NOT_SCHEDULE
            out.append(Finding(severity if hard or key == "zoneTopologySpread" else "warning", f"{key}.topologyKey",
                               f"no Node has the label {spread.topologyKey}: "
                               + ("every enforced replica stays Pending (node(s) didn't match pod topology spread "
                                  "constraints (missing required label))" if hard else "the spread has no effect")))
        elif missing:
            out.append(Finding("warning", f"{key}.topologyKey",
                               f"{len(missing)} of {len(nodes)} Nodes lack the label {spread.topologyKey} "
                               f"({_names(missing)}): " + ("enforced replicas never land there"
                                                           if isinstance(spread, HostSpread) and
                                                           spread.whenUnsatisfiable == DO_NOT_SCHEDULE
                                                           else "the scheduler scores them 0 for the spread")))
    zones = {((n["metadata"].get("labels") or {}).get(config.zone.topologyKey)) for n in nodes} - {None}
    if config.zone.enabled and len(zones) == 1:
        out.append(Finding("info", "zoneTopologySpread.enabled",
                           f"every Node is in one zone ({next(iter(zones))}): the zone spread has no effect here "
                           "(it never blocks scheduling, so leaving it on is safe)"))
    return out


def check_match_label_keys(config: Config, nodes: list[dict[str, Any]], server_version: str | None) -> list[Finding]:
    uses = [k for k, s in (("zoneTopologySpread", config.zone), ("hostTopologySpread", config.host))
            if s.enabled and s.matchLabelKeys]
    version, source = cluster_version(nodes, server_version)
    if not uses or version is None or version >= MATCH_LABEL_KEYS_DEFAULT_ON:
        return []
    return [Finding("error", f"{k}.matchLabelKeys",
                    f"{source} is older than v1.27, where the MatchLabelKeysInPodTopologySpread feature gate is "
                    "on by default: unless it is on, the API server drops matchLabelKeys and old and new pods count "
                    "together during a rollout; set matchLabelKeys: none or turn the gate on") for k in uses]


def deployment_eligible_nodes(deployment: dict[str, Any], config: Config, facts: ClusterFacts,
                              states: list[NodeState]) -> list[NodeState]:
    """The Nodes a Deployment's pods (after policylib's mutation) could ever be placed on: the eligibility
    filters of the registry ``simulate`` runs (rule R3: cordoned nodes unless tolerated, taints, node affinity)."""
    ns = namespace_of(deployment)
    mutated = mutate_deployment(deployment, config, facts=facts, namespace=ns).object
    return eligible_nodes(PodShape.of_template(mutated["spec"]["template"], ns, ""), states)


def check_enforced_deployments(config: Config, nodes: list[dict[str, Any]], objects: list[dict[str, Any]],
                               group_label: str | None) -> list[Finding]:
    """minDomains against the eligible nodes of every enforced Deployment, and against node groups."""
    host = config.host
    if not host.enabled or host.whenUnsatisfiable != DO_NOT_SCHEDULE or not nodes:
        return []
    out = []
    facts = ClusterFacts.from_objects(objects)
    deployments = [o for o in objects if is_deployment(o)]
    states = node_states(nodes, [o for o in objects if is_bound_pod(o)])
    placements = {(p.namespace, p.name): p for p in simulate(objects, nodes, config) if p.kind == "Deployment"}
    short = []
    for d in deployments:
        ns = namespace_of(d)
        effective = effective_replicas(d, facts, ns).replicas
        if not host_spread_enforced(effective, host):
            continue
        eligible = deployment_eligible_nodes(d, config, facts, states)
        if len(eligible) < host.minDomains:
            p = placements.get((ns, d["metadata"]["name"]))
            pending = f"; {p.pending_range} of its {p.replicas} replicas would stay Pending" if p and p.pending_max else ""
            short.append(f"{ns}/{d['metadata']['name']} ({len(eligible)} eligible: "
                         f"{_names([n.name for n in eligible], 3) or 'none'}{pending})")
    if short:
        out.append(Finding("error", "hostTopologySpread.minDomains",
                           f"minDomains {host.minDomains} is more than the eligible nodes of {len(short)} enforced "
                           f"Deployment(s): {'; '.join(short)}. With fewer eligible nodes than minDomains each node "
                           "holds at most maxSkew replicas; add nodes, or lower minDomains to the smallest node group"))
    label, groups = node_groups(nodes, group_label)
    small = {g: members for g, members in groups.items() if len(members) < host.minDomains}
    if small:
        out.append(Finding("warning", "hostTopologySpread.minDomains",
                           f"node groups ({label}) smaller than minDomains {host.minDomains}: "
                           + "; ".join(f"{g}: {len(m)} node(s)" for g, m in small.items())
                           + ": Deployments pinned to one of them keep replicas Pending"))
    if groups and not has_autoscaler(nodes):
        smallest = min(groups.items(), key=lambda kv: len(kv[1]))
        if len(smallest[1]) < 2 * host.minDomains:
            out.append(Finding("warning", "hostTopologySpread.whenUnsatisfiable",
                               f"DoNotSchedule with small node groups (smallest: {smallest[0]}, {len(smallest[1])} "
                               "node(s)) and no autoscaler in sight (no karpenter.sh or cluster-autoscaler labels or "
                               "annotations on the Nodes): a replica that does not fit stays Pending until someone "
                               "adds a node; keep ScheduleAnyway unless the cluster can always provide minDomains "
                               "eligible nodes per group"))
    return out


def check_drift(config: Config, objects: list[dict[str, Any]]) -> list[Finding]:
    if not config.host.reconcileDrift:
        return []
    writes = [w for w in plan(objects, config) if w.kind == "Deployment" and not w.error]
    rolling = [w for w in writes if w.rollout]
    if not rolling:
        return []
    return [Finding("warning", "hostTopologySpread.reconcileDrift",
                    f"reconcileDrift is on and {summarize(writes)} ({_names(f'{w.namespace}/{w.name}' for w in rolling)})"
                    ": the controller rolls them when it starts; check with policylib plan")]


def check_partitions(config: Config, nodes: list[dict[str, Any]],
                     objects: Sequence[dict[str, Any]] = ()) -> list[Finding]:
    """Rules V25 and V26 on the settings: whether ``volcano.networkTopology`` is written at all (what ``preview``
    warns per Job), and whether the HyperNodes it allows (:func:`policylib.hypernodes.partition_bound`, the
    candidates ``preview`` and ``simulate`` use) hold a partition of ``partitionSize``."""
    from .volcano.topology import UNWRITTEN_TOPOLOGY, written_topology
    size = config.volcano.partitionSize
    if size is None or not config.volcano.enabled:
        return []
    facts = ClusterFacts.from_objects(objects)
    settings, unwritten = written_topology(config.volcano, facts)
    if unwritten:
        return [Finding("warning", "volcano.networkTopologyDiscovery", f"{UNWRITTEN_TOPOLOGY}: {unwritten}")]
    topology = settings.networkTopology
    if topology is None or not nodes:
        return []
    hypernodes, unknown = scheduler_hypernodes(config.volcano.networkTopologyDiscovery, nodes, facts.hypernodes)
    if unknown:
        return [Finding("info", "volcano.networkTopologyDiscovery", f"partitions not checked: {unknown}")]
    if not hypernodes:
        return [Finding("warning", "volcano.networkTopologyDiscovery",
                        "no Node carries any of the configured topology labels: no HyperNode would be discovered, "
                        "and the hard network topology bounds nothing until HyperNodes appear")]
    bound = partition_bound({"networkTopology": topology.as_spec()}, hypernodes, nodes)
    if not bound.bounded:
        return []
    largest = max((len(members) for _, _, members in bound.domains), default=0)
    if largest < size:
        return [Finding("error", "volcano.partitionSize",
                        f"partitionSize {size} needs {size} nodes inside one HyperNode of tier <= {bound.tier}; the "
                        f"largest has {largest} (counting one pod per node): every partitioned Job would stay Pending")]
    return []


def gang_capacity(job: KubeflowJob, specs: dict[str, Any], states: list[NodeState], minimum: int,
                  topology_key: str | None = None) -> int:
    """Rule G14: how many of the job's pods the Nodes hold at once, counted up to ``minimum``: the engine's
    filters (the registry ``simulate`` runs) place the pods of every replica type, in the job's order, on a copy
    of the Nodes (:func:`policylib.simulate.gangs.place_gang`): Coscheduling holds each member it has placed
    (assumed, waiting at Permit) until the gang's minimum is placed, so a PS and its Workers cannot both count
    the same free CPU. With a topology level (rule G25) the most any one domain of ``topology_key`` holds."""
    if topology_key is None:
        return place_gang(job, specs, Cluster([n.copy() for n in states]), minimum)[1]
    domains: dict[str, list[NodeState]] = {}
    for n in states:
        if topology_key in n.labels:
            domains.setdefault(str(n.labels[topology_key]), []).append(n.copy())
    return max((place_gang(job, specs, Cluster(members), minimum)[1] for members in domains.values()), default=0)


def _load_beside(job: dict[str, Any], config: Config, nodes: list[dict[str, Any]],
                 objects: list[dict[str, Any]]) -> list[NodeState]:
    """The Nodes with what every other workload of the input takes (as ``simulate`` places them; stored
    workloads count by their bound Pods) and the bound Pods, but the job's own (a running gang does not crowd out
    itself)."""
    others = [o for o in objects if o is not job and not _pod_of(o, job)
              and (not (o.get("metadata") or {}).get("uid") or is_bound_pod(o))]
    try:
        return simulate_load(others, nodes, config)
    except PolicyError:
        return node_states(nodes, [o for o in objects if is_bound_pod(o)])   # an unreadable object: preview names it


#: The label training-operator and the MPI Operator put on every pod of a job: the job's name.
JOB_NAME_LABEL = "training.kubeflow.org/job-name"


def _pod_of(obj: dict[str, Any], job: dict[str, Any]) -> bool:
    """A Pod of ``job``: owned by it, or labelled with its name by its operator, in its namespace."""
    if obj.get("kind") != "Pod" or namespace_of(obj) != namespace_of(job):
        return False
    meta, job_meta = obj.get("metadata") or {}, job.get("metadata") or {}
    uid = job_meta.get("uid")
    owned = uid and any(isinstance(r, dict) and r.get("uid") == uid for r in meta.get("ownerReferences") or [])
    return bool(owned) or (meta.get("labels") or {}).get(JOB_NAME_LABEL) == job_meta.get("name")


def check_gangs(config: Config, nodes: list[dict[str, Any]], objects: list[dict[str, Any]]) -> list[Finding]:
    from .gang.topology import gang_topology
    level = gang_topology(config) if config.gang.enabled else None
    out = []
    for obj in objects:
        if not is_kubeflow_job(obj):
            continue
        job = read_job(obj, namespace_of(obj))
        operator = operator_gang_reason(obj, config.gang)
        if operator:
            out.append(Finding("warning" if volcano_without_gang(obj, config.gang) else "info", "gang.operatorGang",
                               f"{job.kind} {job.namespace}/{job.name}: {operator}"))
        minimum = job_minimum(job)
        specs = (obj.get("spec") or {}).get(job.specs_key) or {}
        key = level.key if level is not None and not operator else None
        capacity = gang_capacity(job, specs, _load_beside(obj, config, nodes, objects), minimum, key)
        if capacity < minimum:
            # rule G21: a Volcano PodGroup has no timeout; its gang plugin keeps it Unschedulable
            outcome = gang_stuck_outcome(config, operator)
            where = f"one {key} domain can" if key else "Nodes can"
            out.append(Finding("error", "gang.topology" if key else "gang.method",
                               f"{job.kind} {job.namespace}/{job.name}: its gang needs {minimum} pods at once; the "
                               f"{where} hold {capacity} of them now: {outcome}"))
    return out


def gang_stuck_outcome(config: Config, operator: str | None) -> str:
    """What the scheduler does with a gang whose minimum the Nodes cannot hold: Volcano's PodGroup (rule G21)
    and Kubernetes' own (G18, whose Permit wait is fixed) have no timeout of ours; the others time out."""
    if policylib_gangs_volcano(config.gang) and not operator:
        return "Volcano would keep its PodGroup Unschedulable and start none of them"
    if config.gang.method == "workload":
        return "kube-scheduler would keep its PodGroup Unschedulable and bind none of them"
    return "it would wait for its scheduleTimeout and never start"


def check_workload_api(config: Config, api: WorkloadApi | None, nodes: Sequence[dict[str, Any]] = (),
                       stored: Mapping[tuple[str, str], int] | None = None,
                       topology_kept: bool | None = None) -> list[Finding]:
    """Rules G20, G22-G25: with gang method workload and a known cluster (``api``: what ``--cluster`` read, or
    ``--kube-version``): which Workload API versions it serves and which policylib writes; an error when none it
    writes is served, naming the flags of its minor; what must be on that check cannot see (kube-scheduler's
    gates); for ``gang.topology``, the gates it needs (a warning when the API server is known to drop the
    constraint: ``topology_kept`` False) and the Nodes without the level's label; a warning before an upgrade
    whose next minor removes a version that ``stored`` objects are in (``stored``: (apiVersion, resource) ->
    count)."""
    from .gang.topology import gang_topology
    from .workload_api import enable_instructions, gate_flags, removed_by_upgrade
    if api is None or not config.gang.enabled or config.gang.method != "workload":
        return []
    api = resolve_workload_api(config.gang.workloadAPIVersion, api.served, api.minor)
    level = gang_topology(config)
    out: list[Finding] = []
    if api.version is None:
        out.append(Finding("error", "gang.workloadAPIVersion" if api.setting != "auto" else "gang.method",
                           f"{api.missing()}: no job's pods would be gang-scheduled (the webhook refuses them)"))
    else:
        out.append(Finding("info", "gang.workloadAPIVersion", f"{api.describe()}: policylib writes its Workloads and "
                                                              f"PodGroups in {api.api_version}"))
        minor = api.minor
        if minor is not None:
            flags = gate_flags(minor)
            seen = "served, so kube-apiserver runs with them" if api.served is not None else "needed"
            enable = enable_instructions(minor, api.version)
            out.append(Finding("info", "gang.method", f"Kubernetes 1.{minor}: {enable} ({seen}); check cannot see "
                                                      f"kube-scheduler's flags: without --feature-gates={flags} it "
                                                      "schedules the pods one by one"))
    if level is not None:
        gates = gate_flags(api.minor, True) if api.minor is not None else "TopologyAwareWorkloadScheduling=true"
        if topology_kept is False:
            out.append(Finding("warning", "gang.topology",
                               f"{level.why}: kube-apiserver drops PodGroup schedulingConstraints (its "
                               f"TopologyAwareWorkloadScheduling gate is off): start kube-apiserver and "
                               f"kube-scheduler with --feature-gates={gates}"))
        else:
            out.append(Finding("info", "gang.topology",
                               f"{level.why}: every gang's pods in one {level.key} domain; kube-apiserver and "
                               f"kube-scheduler need --feature-gates={gates} (alpha)"))
        unlabelled = sorted(str((n.get("metadata") or {}).get("name")) for n in nodes
                            if level.key not in ((n.get("metadata") or {}).get("labels") or {}))
        if unlabelled and nodes:
            out.append(Finding("warning", "gang.topology",
                               f"{len(unlabelled)} of {len(nodes)} Nodes have no {level.key} label, so no gang is "
                               f"placed there: {', '.join(unlabelled[:10])}{' ...' if len(unlabelled) > 10 else ''}"))
    upgrade = removed_by_upgrade(api.minor) if api.minor is not None else None
    if upgrade and stored:
        after, removed = upgrade
        found = {k: v for k, v in stored.items() if v and k[0].rpartition("/")[2] in removed}
        if found:
            listed = ", ".join(f"{count} {res} in {version}" for (version, res), count in sorted(found.items()))
            out.append(Finding("warning", "gang.workloadAPIVersion",
                               f"upgrading to Kubernetes 1.{after} removes {', '.join(removed)}: {listed} would be "
                               f"left in a version 1.{after}'s API server neither serves nor decodes; delete them "
                               "before the upgrade (policylib's controller makes its own again in the version 1."
                               f"{after} serves once it is enabled; bound pods keep running)"))
    return out


def check_gang_schedulers(config: Config, nodes: list[dict[str, Any]], objects: list[dict[str, Any]],
                          served_apis: Sequence[str] | None) -> list[Finding]:
    """Rule D5, on a live cluster only (``served_apis`` given): the gang schedulers it runs, and a warning
    when the configured gang method targets one that is absent."""
    from .schedulers import gang_scheduler_findings, running_gang_schedulers
    if served_apis is None or not config.gang.enabled:
        return []
    running = running_gang_schedulers(objects, nodes, served_apis)
    key = "gang.operatorGang" if config.gang.operatorGang != "none" else "gang.scheduler"
    return [Finding(severity, key, message) for severity, message in gang_scheduler_findings(config, running)]


def check(config: Config | dict[str, Any] | None, nodes: Iterable[dict[str, Any]], objects: Iterable[dict[str, Any]] = (), *,
          node_group_label: str | None = None, server_version: str | None = None,
          workload_api_served: bool | None = None, served_apis: Sequence[str] | None = None,
          workload_api: WorkloadApi | None = None, workload_stored: Mapping[tuple[str, str], int] | None = None,
          topology_kept: bool | None = None) -> list[Finding]:
    """Every finding for ``config`` on these Nodes (and workloads), errors first. Pure.
    ``workload_api``: what the cluster serves of Kubernetes' Workload API (``--cluster``'s discovery, or
    ``--kube-version``; rule G22); ``workload_api_served`` False says only that it serves none policylib writes
    (None: not known). ``workload_stored``: (apiVersion, resource) -> how many objects the cluster stores there,
    for the versions its next minor removes (rule G24). ``topology_kept``: whether kube-apiserver keeps a
    PodGroup's schedulingConstraints (None: not known; rule G25).
    ``served_apis``: the ``group/version`` of every API the live cluster serves (None: not a live cluster),
    for the gang schedulers it runs."""
    config = load_config(config)
    if workload_api is None and workload_api_served is False:
        workload_api = resolve_workload_api(config.gang.workloadAPIVersion, ())
    nodes = [n for n in nodes if isinstance(n, dict)]
    objects = [o for o in objects if isinstance(o, dict)]
    findings = (check_thresholds(config) + check_topology_labels(config, nodes)
                + check_match_label_keys(config, nodes, server_version)
                + check_enforced_deployments(config, nodes, objects, node_group_label)
                + check_drift(config, objects) + check_partitions(config, nodes, objects) + check_gangs(config, nodes, objects))
    findings += check_required_anti_affinity(config, objects)
    findings += check_workload_api(config, workload_api, nodes, workload_stored, topology_kept)
    findings += check_simulated(config, nodes, objects, findings, workload_api) + check_pending_pods(objects)
    findings += check_gang_schedulers(config, nodes, objects, served_apis)
    return sorted(findings, key=lambda f: SEVERITIES.index(f.severity))



# --- one verdict: what simulate and the cluster say ----------------------------------------------------

def _ref(obj: dict[str, Any]) -> str:
    return f"{namespace_of(obj)}/{(obj.get('metadata') or {}).get('name', '')}"


def check_required_anti_affinity(config: Config, objects: list[dict[str, Any]]) -> list[Finding]:
    """Rule S18's finding: the Deployments whose required self anti-affinity the spread replaces (or
    replaced: a stored object's record says so) with a host spread that is only a preference, every one
    named in one warning with the setting that keeps the rule hard (rule S10's)."""
    if config.host.enforceForRequiredAntiAffinity and config.host.enabled:
        return []
    facts = ClusterFacts.from_objects(objects)
    weakened = []
    for d in objects:
        if not is_deployment(d):
            continue
        try:
            r = mutate_deployment(d, config, facts=facts, namespace=namespace_of(d))
        except PolicyError:
            continue   # reported by the other checks and by preview
        constraints = ((r.object["spec"]["template"]["spec"]) or {}).get("topologySpreadConstraints") or []
        host = next((c for c in constraints if isinstance(c, dict) and c.get("topologyKey") == config.host.topologyKey),
                    None)
        hard = host is not None and host.get("whenUnsatisfiable") == DO_NOT_SCHEDULE
        if any(w.startswith(HOST_WEAKENED_WARNING) for w in r.warnings) or (replaced_required_before(d) and not hard):
            weakened.append(_ref(d))
    if not weakened:
        return []
    fix = ("set hostTopologySpread.enforceForRequiredAntiAffinity: true" if config.host.enabled
           else "enable hostTopologySpread")
    return [Finding("warning", "hostTopologySpread.enforceForRequiredAntiAffinity",
                    f"{len(weakened)} Deployment(s) lose a required pod anti-affinity to a host spread that is only a "
                    f"preference ({', '.join(weakened)}): their replicas may share a node; {fix} to keep the rule "
                    "hard (DoNotSchedule)")]


def check_simulated(config: Config, nodes: list[dict[str, Any]], objects: list[dict[str, Any]],
                    found: list[Finding], workload_api: WorkloadApi | None = None) -> list[Finding]:
    """Every outcome ``policylib simulate`` reports for the same inputs: an error for each workload with
    replicas that would stay Pending, unless another error names it already. Stored objects (with a
    uid) are the cluster's: their Pods say what is Pending (:func:`check_pending_pods`)."""
    manifests = [o for o in objects if not (o.get("metadata") or {}).get("uid") or is_bound_pod(o)]
    if not nodes or not any(not is_bound_pod(o) for o in manifests):
        return []
    try:
        placements = simulate(manifests, nodes, config, workload_api=workload_api)
    except PolicyError:
        return []   # an unreadable object: preview and simulate name it
    named = " ".join(f.message for f in found if f.severity == "error")
    out = []
    for p in placements:
        if not p.pending_max or f"{p.namespace}/{p.name} " in named or f"{p.namespace}/{p.name}:" in named:
            continue
        why = f": {p.reasons[-1]}" if p.reasons else ""
        out.append(Finding("error", "simulate", f"{p.kind} {p.namespace}/{p.name}: {p.pending_range} of its "
                                                f"{p.replicas} replicas would stay Pending{why}"))
    return out


#: The scheduler's words (its plugins' messages) and the rule that holds a Pod for each.
HOLDING_RULES = (("pod topology spread constraints", "a DoNotSchedule topology spread (hostTopologySpread)"),
                 ("didn't match Pod's node affinity", "the pod's node affinity/selector"),
                 ("untolerated taint", "a taint the pod does not tolerate"),
                 ("Insufficient", "resources (requests exceed what the nodes have free)"),
                 ("anti-affinity", "a pod anti-affinity"),
                 ("network topology", "Volcano network topology (volcano.networkTopology)"),
                 ("gang", "the gang minimum"))


def _controller_name(pod: dict[str, Any]) -> tuple[str, str] | None:
    """(kind, name) of what runs the Pod: a ReplicaSet's Deployment, else its controller owner."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller") and isinstance(ref.get("name"), str):
            labels = (pod.get("metadata") or {}).get("labels") or {}
            suffix = labels.get(POD_TEMPLATE_HASH)
            if ref.get("kind") == "ReplicaSet" and suffix and ref["name"].endswith("-" + str(suffix)):
                return "Deployment", ref["name"][: -len(str(suffix)) - 1]
            return str(ref.get("kind")), ref["name"]
    return None


def check_pending_pods(objects: list[dict[str, Any]]) -> list[Finding]:
    """``check --cluster``: the Pods Pending now because the scheduler found no node, by the workload
    that owns them, with the scheduler's message and the rule that holds them."""
    held: dict[tuple[str, str, str], list[str]] = {}
    for pod in objects:
        if pod.get("kind") != "Pod" or (pod.get("status") or {}).get("phase") != "Pending":
            continue
        cond = next((c for c in (pod.get("status") or {}).get("conditions") or [] if isinstance(c, dict)
                     and c.get("type") == "PodScheduled" and c.get("status") == "False"), None)
        owner = _controller_name(pod)
        if cond is None or owner is None or cond.get("reason") != "Unschedulable":
            continue
        held.setdefault((owner[0], namespace_of(pod), owner[1]), []).append(str(cond.get("message") or ""))
    out = []
    for (kind, ns, name), messages in sorted(held.items()):
        message = messages[0]
        rules = [rule for words, rule in HOLDING_RULES if words in message] or ["the scheduler's filters"]
        out.append(Finding("error", "pending", f"{kind} {ns}/{name}: {len(messages)} Pod(s) Pending now, held by "
                                               f"{', '.join(rules)}: {message}"))
    return out
