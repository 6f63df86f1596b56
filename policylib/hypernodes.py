"""HyperNodes that Volcano's label discovery builds from Node labels.

A port of volcano-sh/volcano ``pkg/controllers/hypernode/discovery/label/label.go``:

- ``networkTopologyTypes`` lists node label keys from the top tier down; the
  last entry is the node level and is dropped without being read (nodes join
  by name); the entry above it is tier 1, then tier 2, and so on.
- Walking up from a node stops at the first missing label, so a node without
  the tier-1 label joins nothing.
- HyperNodes are grouped by (label key, value); ``spec.tierName`` is the label
  key; members use ``exactMatch``, type ``Node`` at tier 1 and ``HyperNode``
  above; labels are ``volcano.sh/network-topology-source: label`` and
  ``<label key>: <value>``.

Volcano names a HyperNode ``hypernode-<topology>-tier<N>-<5 random>``; ours
replaces the random part with a hash of (topology, key, value), so names are
stable from run to run.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Iterable

from .config import DiscoverySource
from .constants import HYPERNODE_API_VERSION

SOURCE_LABEL = "volcano.sh/network-topology-source"
API_VERSION = HYPERNODE_API_VERSION
# k8s.io/apimachinery/pkg/util/rand alphabet (no vowels, no confusable digits).
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def clean_topology_name(name: str) -> str:
    """label.go cleanString: lowercase letters, keep digits, '.' and '-', anything else becomes '-'."""
    return "".join(c.lower() if c.isalpha() else c if (c.isdigit() or c in ".-") else "-" for c in name)


def stable_suffix(*parts: str, length: int = 5) -> str:
    digest = hashlib.sha256("\x00".join(parts).encode()).digest()
    return "".join(_ALPHABET[b % len(_ALPHABET)] for b in digest[:length])


def tier_labels(topology_labels: tuple[str, ...]) -> list[str]:
    """Tier 1 first: the list reversed, without its last (node-level) entry."""
    return list(reversed(topology_labels[:-1]))


@dataclass
class _Info:
    tier: int
    tier_name: str
    value: str
    members: list[str]


def discover_hypernodes(nodes: Iterable[dict[str, Any]], discovery: Iterable[DiscoverySource]) -> list[dict[str, Any]]:
    """Rule H1: the HyperNode objects label discovery would build, sorted by tier then name."""
    infos: dict[str, _Info] = {}
    names: dict[tuple[str, str], str] = {}  # (label key, value) -> HyperNode name, shared across topologies
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        labels = node.get("metadata", {}).get("labels") or {}
        for source in discovery:
            if source.source != "label" or not source.enabled:
                continue
            for topology, keys in source.topologies:
                member = node["metadata"]["name"]
                for tier, key in enumerate(tier_labels(keys), start=1):
                    if key not in labels:
                        break
                    value = labels[key]
                    name = names.get((key, value))
                    if name is None:
                        name = _unique_name(topology, tier, key, value, infos)
                        names[(key, value)] = name
                        infos[name] = _Info(tier, key, value, [])
                    if member not in infos[name].members:
                        infos[name].members.append(member)
                    member = name
    return sorted((_build(name, info) for name, info in infos.items()),
                  key=lambda h: (h["spec"]["tier"], h["metadata"]["name"]))


def _unique_name(topology: str, tier: int, key: str, value: str, taken: dict[str, Any]) -> str:
    base = f"hypernode-{clean_topology_name(topology)}-tier{tier}-"
    for length in (5, 8, 12, 16):
        name = base + stable_suffix(topology, key, value, length=length)
        if name not in taken:
            return name
    raise ValueError(f"cannot name a HyperNode for {key}={value}")  # 16 hash characters never collide in practice


def _build(name: str, info: _Info) -> dict[str, Any]:
    member_type = "Node" if info.tier == 1 else "HyperNode"
    return {
        "apiVersion": API_VERSION,
        "kind": "HyperNode",
        "metadata": {"name": name, "labels": {SOURCE_LABEL: "label", info.tier_name: info.value}},
        "spec": {
            "tier": info.tier,
            "tierName": info.tier_name,
            "members": [{"type": member_type, "selector": {"exactMatch": {"name": m}}} for m in sorted(info.members)],
        },
    }


def hypernode_members(hypernode: dict[str, Any]) -> list[str]:
    return [m["selector"]["exactMatch"]["name"] for m in hypernode["spec"]["members"]]


def leaf_nodes(hypernodes: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Every HyperNode's Node names, through nested HyperNodes."""
    by_name = {h["metadata"]["name"]: h for h in hypernodes}
    cache: dict[str, list[str]] = {}

    def leaves(name: str) -> list[str]:
        if name not in cache:
            h = by_name[name]
            out: list[str] = []
            for m in h["spec"]["members"]:
                child = m["selector"]["exactMatch"]["name"]
                out += [child] if m["type"] == "Node" else leaves(child)
            cache[name] = sorted(set(out))
        return cache[name]

    return {name: leaves(name) for name in by_name}


def render_tree(hypernodes: list[dict[str, Any]]) -> str:
    """The hierarchy for people: roots are HyperNodes that no other HyperNode contains."""
    by_name = {h["metadata"]["name"]: h for h in hypernodes}
    children = {m for h in hypernodes if h["spec"]["tier"] > 1 for m in hypernode_members(h)}
    roots = sorted((h for h in hypernodes if h["metadata"]["name"] not in children),
                   key=lambda h: (-h["spec"]["tier"], h["metadata"]["name"]))
    lines: list[str] = []

    def label(h: dict[str, Any]) -> str:
        key = h["spec"]["tierName"]
        return f"{h['metadata']['name']}  (tier {h['spec']['tier']}, {key}={h['metadata']['labels'].get(key, '')})"

    def walk(h: dict[str, Any], prefix: str) -> None:
        members = hypernode_members(h)
        for i, m in enumerate(members):
            last = i == len(members) - 1
            branch, extend = ("└── ", "    ") if last else ("├── ", "│   ")
            child = by_name.get(m) if h["spec"]["tier"] > 1 else None
            lines.append(prefix + branch + (label(child) if child else m))
            if child:
                walk(child, prefix + extend)

    for root in roots:
        lines.append(label(root))
        walk(root, "")
    return "\n".join(lines) + ("\n" if lines else "")
