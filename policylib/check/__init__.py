"""Settings advice before an install: the specification's "choose settings" rules as checks on the
config, the cluster's Nodes and, when given, its workloads (docs/specification.md, "Choosing
settings").

Each finding names the setting (``key``), its severity and the nodes or workloads concerned:
``error`` where replicas would stay Pending or a rule would do nothing, ``warning`` where the
setting is risky on this cluster, ``info`` where it has no effect. One module per subject: the spread
settings (:mod:`.settings`), the enforced Deployments (:mod:`.deployments`), Volcano's partitions
(:mod:`.partitions`), Kubeflow gangs (:mod:`.gangs`), the Workload API (:mod:`.workload_api`) and what the
one simulation and the cluster's Pending Pods say (:mod:`.simulated`).
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from ..config import Config, load_config
from ..workload_api import WorkloadApi
from ..workload_api import resolve as resolve_workload_api
from .deployments import check_enforced_deployments, check_required_anti_affinity
from .finding import SEVERITIES, Finding
from .gangs import check_gang_schedulers, check_gangs
from .partitions import check_partitions
from .settings import check_drift, check_match_label_keys, check_thresholds, check_topology_labels
from .simulated import Simulations, check_pending_pods, check_simulated
from .topology import check_topology
from .volumes import check_volume_pins
from .workload_api import check_workload_api

__all__ = ["Finding", "check"]


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
    for the gang schedulers it runs (rule D5) and the readers of the topology words (rule N10)."""
    config = load_config(config)
    if workload_api is None and workload_api_served is False:
        workload_api = resolve_workload_api(config.gang.workloadAPIVersion, ())
    nodes = [n for n in nodes if isinstance(n, dict)]
    objects = [o for o in objects if isinstance(o, dict)]
    simulations = Simulations(config, nodes, workload_api)
    findings = (check_thresholds(config) + check_topology_labels(config, nodes)
                + check_match_label_keys(config, nodes, server_version)
                + check_enforced_deployments(config, nodes, objects, node_group_label, simulations)
                + check_drift(config, objects) + check_partitions(config, nodes, objects)
                + check_gangs(config, objects, simulations))
    findings += check_required_anti_affinity(config, objects)
    findings += check_workload_api(config, workload_api, nodes, workload_stored, topology_kept)
    findings += check_simulated(objects, simulations, findings) + check_pending_pods(objects)
    findings += check_gang_schedulers(config, nodes, objects, served_apis)
    findings += check_topology(config, nodes, objects, served_apis)
    findings += check_volume_pins(config, nodes, objects)
    return sorted(findings, key=lambda f: SEVERITIES.index(f.severity))
