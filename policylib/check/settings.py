"""The spread settings against the Nodes: thresholds, topology labels, matchLabelKeys against the cluster's
version, and the drift the controller would roll out (docs/specification.md, "Choosing settings")."""
from __future__ import annotations

import re
from typing import Any

from ..config import Config, HostSpread
from ..constants import DO_NOT_SCHEDULE
from ..plan import plan, summarize
from .finding import Finding, names

#: matchLabelKeys in topology spread: the MatchLabelKeysInPodTopologySpread gate is on by default from 1.27.
MATCH_LABEL_KEYS_DEFAULT_ON = (1, 27)


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
                               f"({names(missing)}): " + ("enforced replicas never land there"
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


def check_drift(config: Config, objects: list[dict[str, Any]]) -> list[Finding]:
    if not config.host.reconcileDrift:
        return []
    writes = [w for w in plan(objects, config) if w.kind == "Deployment" and not w.error]
    rolling = [w for w in writes if w.rollout]
    if not rolling:
        return []
    return [Finding("warning", "hostTopologySpread.reconcileDrift",
                    f"reconcileDrift is on and {summarize(writes)} ({names(f'{w.namespace}/{w.name}' for w in rolling)})"
                    ": the controller rolls them when it starts; check with policylib plan")]
