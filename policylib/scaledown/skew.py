"""The zone and host skew a Deployment's pods have now (rule S28)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ..kubescheduler.model import HARD_EFFECTS, tolerates
from ..labels import selector_matches
from .pods import is_active, metadata_of, node_of


@dataclass(frozen=True)
class Violation:
    """A Deployment whose pods break one of its own spread constraints now."""

    namespace: str
    name: str
    topology_key: str
    when_unsatisfiable: str
    max_skew: int
    skew: int
    counts: dict[str, int] = field(default_factory=dict)
    group: str = ""

    @property
    def reference(self) -> str:
        return f"deployment {self.namespace}/{self.name}"

    def message(self) -> str:
        domains = ", ".join(f"{d}={n}" for d, n in sorted(self.counts.items()))
        of = f" ({self.group})" if self.group else ""
        return (f"{self.reference}{of}: {self.topology_key} skew {self.skew} > maxSkew {self.max_skew} "
                f"({self.when_unsatisfiable}); pods per domain: {domains}")

    def as_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "name": self.name, "topologyKey": self.topology_key,
                "whenUnsatisfiable": self.when_unsatisfiable, "maxSkew": self.max_skew, "skew": self.skew,
                "counts": dict(sorted(self.counts.items())), "group": self.group}


def skew_of(counts: Mapping[str, int], min_domains: int = 1) -> int:
    """The scheduler's skew of a placement: most pods in a domain less the fewest (0 when there are fewer
    eligible domains than ``minDomains``)."""
    if not counts:
        return 0
    least = 0 if len(counts) < min_domains else min(counts.values())
    return max(counts.values()) - least


def spread_violations(deployment: Mapping[str, Any], pods: Iterable[Mapping[str, Any]],
                      nodes: Iterable[Mapping[str, Any]]) -> list[Violation]:
    """Rule S28: for each topology spread constraint of the Deployment's pod template, the skew its active
    bound pods in the Deployment's namespace that match the constraint's selector have now, over every
    Node with the key (each domain counted, empty ones too), per value of its ``matchLabelKeys``; the
    constraints whose skew exceeds their maxSkew."""
    meta = metadata_of(deployment)
    ns, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
    spec = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    selector: Mapping[str, Any] = spec.get("nodeSelector") or {}
    tolerations = [t for t in spec.get("tolerations") or () if isinstance(t, dict)]
    nodes = list(nodes)
    mine = [p for p in pods if is_active(p) and node_of(p) and str(metadata_of(p).get("namespace") or "default") == ns]
    out: list[Violation] = []
    for c in spec.get("topologySpreadConstraints") or ():
        if not isinstance(c, dict) or not isinstance(c.get("topologyKey"), str):
            continue
        key = c["topologyKey"]
        node_labels = {str(metadata_of(n).get("name") or ""): (metadata_of(n).get("labels") or {}) for n in nodes
                       if (c.get("nodeAffinityPolicy") == "Ignore"
                           or all((metadata_of(n).get("labels") or {}).get(k) == v for k, v in selector.items()))
                       and (c.get("nodeTaintsPolicy") != "Honor" or _tolerated(n, tolerations))}
        domains = {labels[key] for labels in node_labels.values() if key in labels}
        keys = [k for k in c.get("matchLabelKeys") or () if isinstance(k, str)]
        groups: dict[tuple[str, ...], dict[str, int]] = {}
        for pod in mine:
            labels = metadata_of(pod).get("labels") or {}
            domain = node_labels.get(node_of(pod), {}).get(key)
            if domain is None or not selector_matches(c.get("labelSelector"), labels):
                continue
            counts = groups.setdefault(tuple(str(labels.get(k, "")) for k in keys), dict.fromkeys(domains, 0))
            counts[domain] += 1
        max_skew = int(c.get("maxSkew") or 1)
        for values, counts in sorted(groups.items()):
            skew = skew_of(counts, int(c.get("minDomains") or 1))
            if skew > max_skew:
                group = ", ".join(f"{k}={v}" for k, v in zip(keys, values, strict=True))
                out.append(Violation(ns, name, key, str(c.get("whenUnsatisfiable") or ""), max_skew, skew,
                                     counts, group))
    return out


def _tolerated(node: Mapping[str, Any], tolerations: list[dict[str, Any]]) -> bool:
    """Every NoSchedule and NoExecute taint of the Node is tolerated (nodeTaintsPolicy Honor), by the scheduler
    model's toleration matcher."""
    return all(tolerates(tolerations, taint) for taint in (node.get("spec") or {}).get("taints") or ()
               if isinstance(taint, dict) and taint.get("effect") in HARD_EFFECTS)
