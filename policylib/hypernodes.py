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

:func:`partition_bound` decides, for ``preview``, ``simulate`` and ``check`` alike, which HyperNodes a partition's
network topology lets Volcano's scheduler place it in (rule V26).
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from .constants import HYPERNODE_API_VERSION
from .errors import FieldError, FieldPath, PolicyError, invalid, not_supported, object_ref, required
from .labels import selector_matches, tier_labels

SOURCE_LABEL = "volcano.sh/network-topology-source"
API_VERSION = HYPERNODE_API_VERSION
# k8s.io/apimachinery/pkg/util/rand alphabet (no vowels, no confusable digits).
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


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


def clean_topology_name(name: str) -> str:
    """label.go cleanString: lowercase letters, keep digits, '.' and '-', anything else becomes '-'."""
    return "".join(c.lower() if c.isalpha() else c if (c.isdigit() or c in ".-") else "-" for c in name)


def stable_suffix(*parts: str, length: int = 5) -> str:
    digest = hashlib.sha256("\x00".join(parts).encode()).digest()
    return "".join(_ALPHABET[b % len(_ALPHABET)] for b in digest[:length])


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
    """The ``exactMatch`` names of a HyperNode's members (what label discovery writes)."""
    return [m["selector"]["exactMatch"]["name"] for m in hypernode["spec"]["members"]
            if isinstance((m.get("selector") or {}).get("exactMatch"), dict)]


def _member_nodes(member: dict[str, Any], nodes: Sequence[dict[str, Any]]) -> list[str]:
    """The Node names one ``Node`` member selects, as Volcano's scheduler cache reads its selector
    (pkg/scheduler/api/hyper_node_info.go GetMembers): ``exactMatch`` by name, ``regexMatch`` a Go regexp
    searched in each Node's name, ``labelMatch`` a non-empty label selector on each Node's labels."""
    selector = member.get("selector") or {}
    if isinstance(selector.get("exactMatch"), dict):
        return [str(selector["exactMatch"].get("name") or "")]
    regex = selector.get("regexMatch")
    if isinstance(regex, dict) and regex.get("pattern"):
        try:
            pattern = re.compile(str(regex["pattern"]))
        except re.error:
            return []   # Volcano logs the pattern and selects nothing
        return [n["metadata"]["name"] for n in nodes if pattern.search(n["metadata"]["name"])]
    match = selector.get("labelMatch")
    if isinstance(match, dict) and (match.get("matchLabels") or match.get("matchExpressions")):
        return [n["metadata"]["name"] for n in nodes
                if selector_matches(match, (n.get("metadata") or {}).get("labels") or {})]
    return []


def leaf_nodes(hypernodes: list[dict[str, Any]], nodes: Sequence[dict[str, Any]] = ()) -> dict[str, list[str]]:
    """Every HyperNode's Node names, through nested HyperNodes (a ``HyperNode`` member by ``exactMatch``, as
    Volcano reads it; ``Node`` members also by ``regexMatch`` and ``labelMatch`` over ``nodes``)."""
    by_name = {h["metadata"]["name"]: h for h in hypernodes}
    cache: dict[str, list[str]] = {}

    def leaves(name: str, seen: frozenset[str]) -> list[str]:
        if name not in cache:
            out: list[str] = []
            for m in by_name[name]["spec"].get("members") or []:
                if m.get("type") == "HyperNode":
                    child = str(((m.get("selector") or {}).get("exactMatch") or {}).get("name"))
                    if child in by_name and child not in seen:   # Volcano refuses a cycle
                        out += leaves(child, seen | {child})
                else:
                    out += _member_nodes(m, nodes)
            cache[name] = sorted(set(out))
        return cache[name]

    return {name: leaves(name, frozenset([name])) for name in by_name}


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


# --- what a partition's network topology bounds (rule V26) ---------------------------------------------

#: The virtual HyperNode Volcano's scheduler adds above every HyperNode, holding every Node
#: (pkg/scheduler/framework/session.go ``addClusterTopHyperNode``).
CLUSTER_TOP_HYPERNODE = "<cluster-top-hypernode>"


def enabled_sources(discovery: Iterable[DiscoverySource]) -> list[str]:
    return [s.source for s in discovery if s.enabled]


def hypernodes_given(discovery: Iterable[DiscoverySource], given: Sequence[dict[str, Any]]) -> str | None:
    """Rule V25: what gives Volcano's scheduler HyperNodes for a hard network topology, or None: HyperNode
    objects (the input's, or the cluster's), else an enabled source of ``volcano.networkTopologyDiscovery``."""
    if given:
        return f"{len(given)} HyperNode object(s)"
    sources = enabled_sources(discovery)
    if sources:
        return f"volcano.networkTopologyDiscovery (enabled source {', '.join(sources)})"
    return None


def cluster_hypernodes(discovery: Iterable[DiscoverySource], nodes: Sequence[dict[str, Any]],
                       given: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The HyperNodes the scheduler sees: the ``given`` objects, and those label discovery builds from
    ``nodes`` unless the given ones already include label discovery's (they carry its source label)."""
    discovery = list(discovery)
    found = list(given)
    if not any(((h.get("metadata") or {}).get("labels") or {}).get(SOURCE_LABEL) == "label" for h in found):
        found += discover_hypernodes(nodes, discovery)
    return sorted(found, key=lambda h: (int((h.get("spec") or {}).get("tier") or 0), h["metadata"]["name"]))


def tier_limit(policy: dict[str, Any], hypernodes: list[dict[str, Any]]) -> int | None:
    """The highest tier a partition may span: ``highestTierAllowed``, else the tier of the HyperNodes whose
    ``tierName`` is ``highestTierName`` (the scheduler's HyperNodeTierNameMap), else None."""
    topo = policy.get("networkTopology") or {}
    if topo.get("highestTierAllowed") is not None:
        return int(topo["highestTierAllowed"])
    name = topo.get("highestTierName")
    tiers = {h["spec"]["tier"] for h in hypernodes if h["spec"].get("tierName") == name}
    return max(tiers) if tiers else None


@dataclass
class PartitionBound:
    """Where Volcano's scheduler may place each partition of a task: ``bounded`` False means anywhere (and
    ``why`` says so); else inside one of ``domains`` ((HyperNode name, tier, Node names)) of tier <= ``tier``."""

    bounded: bool
    why: str
    tier: int | None = None
    domains: list[tuple[str, int, list[str]]] = field(default_factory=list)


def partition_bound(policy: dict[str, Any], hypernodes: list[dict[str, Any]],
                    nodes: Sequence[dict[str, Any]]) -> PartitionBound:
    """Rule V26, the one answer ``preview``, ``simulate`` and ``check`` give: the scheduler's candidates for a
    partition (a subJob; network-topology-aware ``hyperNodeGradientFn`` / ``isEligibleHyperNode``): every
    HyperNode of tier <= the allowed tier, and the virtual ``<cluster-top-hypernode>`` that holds every Node,
    whose tier is the highest real tier + 1, or 1 when there is no HyperNode (session.go
    ``addClusterTopHyperNode``): a hard tier-1 bound with no HyperNode places the partition anywhere. A soft or
    absent network topology, or a ``highestTierName`` no HyperNode has (``IsHardTopologyMode`` is false without
    a tier), bounds nothing."""
    topo = policy.get("networkTopology")
    if not isinstance(topo, dict) or topo.get("mode", "hard") != "hard":
        return PartitionBound(False, "no hard networkTopology")
    tier = tier_limit(policy, hypernodes)
    if tier is None:
        return PartitionBound(False, f"highestTierName {topo.get('highestTierName')!r} matches no HyperNode "
                                     "tierName, so the scheduler does not enforce it")
    leaves = leaf_nodes(hypernodes, nodes)
    domains = [(h["metadata"]["name"], int(h["spec"]["tier"]), leaves[h["metadata"]["name"]]) for h in hypernodes
               if int(h["spec"]["tier"]) <= tier]
    top = max((int(h["spec"]["tier"]) for h in hypernodes), default=0) + 1
    if top <= tier:
        every = sorted(n["metadata"]["name"] for n in nodes)
        if not hypernodes:
            return PartitionBound(False, f"no HyperNode exists: Volcano's {CLUSTER_TOP_HYPERNODE} (tier 1, every "
                                         f"Node) meets highestTierAllowed {tier}, so the partitions may land on any "
                                         "Node", tier, [(CLUSTER_TOP_HYPERNODE, top, every)])
        domains.append((CLUSTER_TOP_HYPERNODE, top, every))
    return PartitionBound(True, "", tier, domains)


def scheduler_hypernodes(discovery: Iterable[DiscoverySource], nodes: Sequence[dict[str, Any]],
                         given: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], str | None]:
    """Rule V26: the HyperNodes the scheduler would see (:func:`cluster_hypernodes`), or none and why they are
    not known: a source other than ``label`` is enabled (its HyperNodes come from the fabric, not the Nodes)
    and no HyperNode object is given."""
    discovery = list(discovery)
    found = cluster_hypernodes(discovery, nodes, given)
    others = [s for s in enabled_sources(discovery) if s != "label"]
    if not found and others:
        return [], (f"the HyperNodes of volcano.networkTopologyDiscovery source {', '.join(others)} are not known "
                    "(give them: kubectl get hypernodes -o yaml)")
    return found, None


# --- HyperNode objects read from files ---------------------------------------------------------------

MEMBER_TYPES = ("Node", "HyperNode")
SELECTORS = ("exactMatch", "regexMatch", "labelMatch")


def hypernode_errors(hypernode: dict[str, Any]) -> list[FieldError]:
    """Rule V26: the field errors of one HyperNode, as its CRD (topology.volcano.sh_hypernodes.yaml) has them for
    what the verdict reads: a name, ``spec.tier`` an integer >= 0, ``spec.members`` a list of members of type
    Node or HyperNode whose selector is exactly one of exactMatch (a name), regexMatch (a pattern), labelMatch."""
    meta, spec = hypernode.get("metadata"), hypernode.get("spec")
    errs: list[FieldError] = []
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta.get("name"):
        errs.append(required("metadata.name", "a HyperNode needs a name"))
    if not isinstance(spec, dict):
        return errs + [required("spec", "a HyperNode needs spec.tier and spec.members")]
    tier = spec.get("tier")
    if not isinstance(tier, int) or isinstance(tier, bool) or tier < 0:
        errs.append(invalid("spec.tier", tier, "must be an integer >= 0"))
    members = spec.get("members")
    if not isinstance(members, list):
        return errs + [invalid("spec.members", members, "must be a list of members")]
    for i, member in enumerate(members):
        path = FieldPath("spec", "members").index(i)
        if not isinstance(member, dict):
            errs.append(invalid(path, member, "must be an object"))
            continue
        if member.get("type") not in MEMBER_TYPES:
            errs.append(not_supported(path.child("type"), member.get("type"), MEMBER_TYPES))
        selector = member.get("selector")
        given = [k for k in SELECTORS if isinstance(selector, dict) and selector.get(k) is not None]
        if not isinstance(selector, dict) or len(given) != 1:
            errs.append(invalid(path.child("selector"), selector,
                                "Either ExactMatch or RegexMatch or LabelMatch must be specified, and only one"))
            continue
        errs += _selector_errors(given[0], selector[given[0]], path.child("selector").child(given[0]))
    return errs


def _selector_errors(kind: str, value: Any, path: FieldPath) -> list[FieldError]:
    if kind == "exactMatch" and not (isinstance(value, dict) and isinstance(value.get("name"), str)
                                     and value.get("name")):
        return [required(path.child("name"))]
    if kind == "regexMatch":
        pattern = value.get("pattern") if isinstance(value, dict) else None
        if not isinstance(pattern, str) or not pattern:
            return [required(path.child("pattern"))]
        try:
            re.compile(pattern)
        except re.error as e:
            return [invalid(path.child("pattern"), pattern, f"not a regular expression: {e}")]
    if kind == "labelMatch" and not isinstance(value, dict):
        return [invalid(path, value, "must be a label selector")]
    return []


def check_hypernodes(hypernodes: Iterable[dict[str, Any]]) -> None:
    """Raise one PolicyError for the first bad HyperNode, listing every field error of it."""
    for hypernode in hypernodes:
        errs = hypernode_errors(hypernode)
        if errs:
            raise PolicyError.from_errors(object_ref(hypernode), errs)
