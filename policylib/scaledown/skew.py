"""The zone and host skew a Deployment's pods have now (rule S28), as kube-scheduler's PodTopologySpread
counts it: the registry's plugin decides which domains are eligible and what the skew is
(:func:`policylib.kubescheduler.plugins.skews_now`); this module groups the pods and names the violations."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ..kubescheduler.framework import Static
from ..kubescheduler.model import PodShape
from ..kubescheduler.plugins import node_verdicts, skews_now
from ..kubescheduler.plugins.pod_topology_spread import skew_of
from ..kubescheduler.snapshot import Snapshot, bind_pods, node_states
from .pods import is_active, metadata_of, node_of

__all__ = ["SpreadNodes", "Violation", "skew_of", "spread_violations"]


@dataclass(frozen=True)
class Violation:
    """A Deployment or StatefulSet (``kind``, lower case) whose pods break one of its own spread constraints now."""

    namespace: str
    name: str
    topology_key: str
    when_unsatisfiable: str
    max_skew: int
    skew: int
    counts: dict[str, int] = field(default_factory=dict)
    group: str = ""
    kind: str = "deployment"

    @property
    def reference(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"

    def message(self) -> str:
        domains = ", ".join(f"{d}={n}" for d, n in sorted(self.counts.items()))
        of = f" ({self.group})" if self.group else ""
        return (f"{self.reference}{of}: {self.topology_key} skew {self.skew} > maxSkew {self.max_skew} "
                f"({self.when_unsatisfiable}); pods per domain: {domains}")

    def as_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "name": self.name, "topologyKey": self.topology_key,
                "whenUnsatisfiable": self.when_unsatisfiable, "maxSkew": self.max_skew, "skew": self.skew,
                "counts": dict(sorted(self.counts.items())), "group": self.group, "kind": self.kind}


class SpreadNodes:
    """The Nodes the skew is counted on, read once for any number of Deployments: the scheduler model's node
    states with no pod bound, and the registry's node verdicts per pod signature (they read the Nodes and the
    pod template only)."""

    def __init__(self, nodes: Iterable[Mapping[str, Any]]):
        self.states = node_states([dict(n) for n in nodes])
        self._verdicts: dict[str, Static] = {}

    def snapshot(self, pods: Iterable[Mapping[str, Any]]) -> Snapshot:
        """The Nodes with ``pods`` (bound) and no other pod on them (a node a pod binds to is copied first)."""
        bound = [dict(p) for p in pods]
        hosts = {node_of(p) for p in bound}
        return Snapshot(bind_pods([s.copy() if s.name in hosts else s for s in self.states], bound))

    def verdicts(self, pod: PodShape) -> Static:
        sig = pod.signature()
        if sig not in self._verdicts:
            self._verdicts[sig] = node_verdicts(pod, self.states)
        return self._verdicts[sig]


def spread_violations(deployment: Mapping[str, Any], pods: Iterable[Mapping[str, Any]],
                      nodes: Iterable[Mapping[str, Any]] | SpreadNodes) -> list[Violation]:
    """Rule S28: for each topology spread constraint of the Deployment's pod template, the skew its active
    bound pods in the Deployment's namespace have now as PodTopologySpread counts it for one more of its pods
    (per value of the constraint's ``matchLabelKeys`` among them: the pods of that value): every domain of a
    Node that carries every key of the template's constraints and that the constraint's inclusion policies
    admit, empty ones counted, minDomains applied; the constraints whose skew exceeds their maxSkew."""
    meta = metadata_of(deployment)
    ns, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
    template = (deployment.get("spec") or {}).get("template") or {}
    spec = template.get("spec") or {}
    constraints = [c for c in spec.get("topologySpreadConstraints") or () if isinstance(c, dict)]
    if not constraints:
        return []
    mine = [p for p in pods if is_active(p) and node_of(p) and str(metadata_of(p).get("namespace") or "default") == ns]
    on = nodes if isinstance(nodes, SpreadNodes) else SpreadNodes(nodes)
    snapshot = on.snapshot(mine)
    keys = sorted({str(k) for c in constraints for k in c.get("matchLabelKeys") or () if isinstance(k, str)})
    labels = dict((template.get("metadata") or {}).get("labels") or {})
    found: dict[tuple[int, tuple[str, ...]], Violation] = {}
    for values in sorted(_label_values(mine, keys)):
        pod = PodShape.of_template({"metadata": {"labels": {**labels, **dict(values)}}, "spec": spec}, ns, "")
        for now in skews_now(snapshot, pod, on.verdicts(pod)):
            c = now.constraint
            max_skew = int(c.get("maxSkew") or 1)
            group = dict(values)
            own = tuple(f"{k}={group[k]}" for k in c.get("matchLabelKeys") or () if k in group)
            if now.skew > max_skew:
                found.setdefault((constraints.index(c), own), Violation(
                    ns, name, str(c.get("topologyKey")), str(c.get("whenUnsatisfiable") or ""), max_skew, now.skew,
                    now.counts, ", ".join(own), str(deployment.get("kind") or "Deployment").lower()))
    return [found[k] for k in sorted(found)]


def _label_values(pods: Iterable[Mapping[str, Any]], keys: list[str]) -> set[tuple[tuple[str, str], ...]]:
    """The values the pods carry of the constraints' ``matchLabelKeys`` (a pod without a key adds nothing to
    the selector for it, as for an incoming pod); one empty group when no constraint has such keys."""
    out = {tuple((k, str(v)) for k in keys if (v := (metadata_of(p).get("labels") or {}).get(k)) is not None)
           for p in pods}
    return out or {()}
