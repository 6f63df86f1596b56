"""The enforced host spread against each Deployment's eligible Nodes and the node groups (minDomains), and the
Deployments whose required anti-affinity the spread replaces (rule S18)."""
from __future__ import annotations

from typing import Any

from ..config import Config
from ..constants import DO_NOT_SCHEDULE
from ..errors import PolicyError
from ..facts import ClusterFacts, namespace_of
from ..kubescheduler.model import NodeState, PodShape
from ..kubescheduler.plugins import eligible_nodes
from ..kubescheduler.snapshot import node_states
from ..simulate import is_bound_pod
from ..spread import (
    HOST_WEAKENED_WARNING,
    effective_replicas,
    host_spread_enforced,
    is_deployment,
    mutate_deployment,
    replaced_required_before,
)
from .finding import Finding, names
from .simulated import Simulations

#: Labels the common clouds and autoscalers put on a node to say which node group it belongs to.
NODE_GROUP_LABELS = ("eks.amazonaws.com/nodegroup", "cloud.google.com/gke-nodepool", "kubernetes.azure.com/agentpool",
                     "karpenter.sh/nodepool", "alibabacloud.com/nodepool-id", "node.kubernetes.io/nodegroup")


#: Signs on a Node that an autoscaler manages its group.
AUTOSCALER_MARKS = ("karpenter.sh/", "cluster-autoscaler.kubernetes.io/", "autoscaler")


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


def deployment_eligible_nodes(deployment: dict[str, Any], config: Config, facts: ClusterFacts,
                              states: list[NodeState]) -> list[NodeState]:
    """The Nodes a Deployment's pods (after policylib's mutation) could ever be placed on: the eligibility
    filters of the registry ``simulate`` runs (rule R3: cordoned nodes unless tolerated, taints, node affinity)."""
    ns = namespace_of(deployment)
    mutated = mutate_deployment(deployment, config, facts=facts, namespace=ns).object
    return eligible_nodes(PodShape.of_template(mutated["spec"]["template"], ns, ""), states)


def check_enforced_deployments(config: Config, nodes: list[dict[str, Any]], objects: list[dict[str, Any]],
                               group_label: str | None, simulations: Simulations) -> list[Finding]:
    """minDomains against the eligible nodes of every enforced Deployment (with its Pending count as the input
    simulates), and against node groups."""
    host = config.host
    if not host.enabled or host.whenUnsatisfiable != DO_NOT_SCHEDULE or not nodes:
        return []
    run = simulations.of(objects)
    if run.error is not None:
        raise run.error
    out = []
    facts = ClusterFacts.from_objects(objects)
    deployments = [o for o in objects if is_deployment(o)]
    states = node_states(nodes, [o for o in objects if is_bound_pod(o)])
    placements = {(p.namespace, p.name): p for p in run.placements if p.kind == "Deployment"}
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
                         f"{names([n.name for n in eligible], 3) or 'none'}{pending})")
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
