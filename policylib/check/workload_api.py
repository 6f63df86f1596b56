"""Kubernetes' Workload API on the cluster, for gang method workload (rules G20, G22-G25)."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..config import Config
from ..gang.topology import TopologyLevel, gang_topology
from ..workload_api import WorkloadApi, enable_instructions, gate_flags, removed_by_upgrade
from ..workload_api import resolve as resolve_workload_api
from .finding import Finding


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
    if api is None or not config.gang.enabled or config.gang.method != "workload":
        return []
    api = resolve_workload_api(config.gang.workloadAPIVersion, api.served, api.minor)
    level = gang_topology(config)
    out = served_versions(api)
    if level is not None:
        out += topology_gates(api, level, nodes, topology_kept)
    return out + upgrade_removals(api, stored)


def served_versions(api: WorkloadApi) -> list[Finding]:
    """Rules G20, G22: the version policylib writes in (an error when the cluster serves none it writes), and the
    gates of the cluster's minor that check cannot see on kube-scheduler."""
    if api.version is None:
        return [Finding("error", "gang.workloadAPIVersion" if api.setting != "auto" else "gang.method",
                        f"{api.missing()}: no job's pods would be gang-scheduled (the webhook refuses them)")]
    out = [Finding("info", "gang.workloadAPIVersion", f"{api.describe()}: policylib writes its Workloads and "
                                                      f"PodGroups in {api.api_version}")]
    minor = api.minor
    if minor is not None:
        flags = gate_flags(minor)
        seen = "served, so kube-apiserver runs with them" if api.served is not None else "needed"
        enable = enable_instructions(minor, api.version)
        out.append(Finding("info", "gang.method", f"Kubernetes 1.{minor}: {enable} ({seen}); check cannot see "
                                                  f"kube-scheduler's flags: without --feature-gates={flags} it "
                                                  "schedules the pods one by one"))
    return out


def topology_gates(api: WorkloadApi, level: TopologyLevel, nodes: Sequence[dict[str, Any]],
                   topology_kept: bool | None) -> list[Finding]:
    """Rule G25: the gates ``gang.topology`` needs (a warning where the API server is known to drop the
    constraint), and the Nodes without the level's label."""
    gates = gate_flags(api.minor, True) if api.minor is not None else "TopologyAwareWorkloadScheduling=true"
    if topology_kept is False:
        out = [Finding("warning", "gang.topology",
                       f"{level.why}: kube-apiserver drops PodGroup schedulingConstraints (its "
                       f"TopologyAwareWorkloadScheduling gate is off): start kube-apiserver and "
                       f"kube-scheduler with --feature-gates={gates}")]
    else:
        out = [Finding("info", "gang.topology",
                       f"{level.why}: every gang's pods in one {level.key} domain; kube-apiserver and "
                       f"kube-scheduler need --feature-gates={gates} (alpha)")]
    unlabelled = sorted(str((n.get("metadata") or {}).get("name")) for n in nodes
                        if level.key not in ((n.get("metadata") or {}).get("labels") or {}))
    if unlabelled and nodes:
        out.append(Finding("warning", "gang.topology",
                           f"{len(unlabelled)} of {len(nodes)} Nodes have no {level.key} label, so no gang is "
                           f"placed there: {', '.join(unlabelled[:10])}{' ...' if len(unlabelled) > 10 else ''}"))
    return out


def upgrade_removals(api: WorkloadApi, stored: Mapping[tuple[str, str], int] | None) -> list[Finding]:
    """Rule G24: a warning before an upgrade whose next minor removes a version ``stored`` objects are in."""
    upgrade = removed_by_upgrade(api.minor) if api.minor is not None else None
    if not upgrade or not stored:
        return []
    after, removed = upgrade
    found = {k: v for k, v in stored.items() if v and k[0].rpartition("/")[2] in removed}
    if not found:
        return []
    listed = ", ".join(f"{count} {res} in {version}" for (version, res), count in sorted(found.items()))
    return [Finding("warning", "gang.workloadAPIVersion",
                    f"upgrading to Kubernetes 1.{after} removes {', '.join(removed)}: {listed} would be "
                    f"left in a version 1.{after}'s API server neither serves nor decodes; delete them "
                    "before the upgrade (policylib's controller makes its own again in the version 1."
                    f"{after} serves once it is enabled; bound pods keep running)")]
