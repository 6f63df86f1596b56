"""Which zone a StatefulSet's bound PersistentVolumes pin each ordinal to (rules A7, A8).

A claim of a StatefulSet's pod is named ``<volumeClaimTemplate>-<set>-<ordinal>``. Once bound, kube-scheduler's
VolumeBinding filter lets the pod run only on Nodes its PersistentVolume's ``spec.nodeAffinity`` matches, and
VolumeZone only in the zone of the PV's ``topology.kubernetes.io/zone`` label: every later incarnation of that
ordinal returns to that zone. An unbound claim pins nothing (under WaitForFirstConsumer it is bound where the pod
is first placed).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from ..constants import ZONE_LABEL
from ..facts import namespace_of
from ..kubescheduler.model import NodeState, node_selector_term_matches

#: The zone labels VolumeZone reads on a PersistentVolume, the GA key first.
PV_ZONE_LABELS = (ZONE_LABEL, "failure-domain.beta.kubernetes.io/zone")
#: Every topology label VolumeZone matches against a Node (zone and region, GA and beta keys).
PV_TOPOLOGY_LABELS = PV_ZONE_LABELS + ("topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/region")


def is_claim(obj: object) -> bool:
    """A ``v1`` PersistentVolumeClaim."""
    return isinstance(obj, dict) and obj.get("kind") == "PersistentVolumeClaim" and obj.get("apiVersion") == "v1"


def is_volume(obj: object) -> bool:
    """A ``v1`` PersistentVolume."""
    return isinstance(obj, dict) and obj.get("kind") == "PersistentVolume" and obj.get("apiVersion") == "v1"


@dataclass(frozen=True)
class VolumePins:
    """The zones the bound volumes of one StatefulSet's ordinals allow (ordinals with no bound claim absent)."""

    namespace: str
    name: str
    pins: dict[int, frozenset[str]]


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    return _field(obj, "metadata")


def _field(obj: Any, key: str) -> dict[str, Any]:
    """``obj[key]`` where both are mappings, else empty: a malformed object pins nothing (never a crash)."""
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, dict) else {}


def _required_terms(pv: dict[str, Any]) -> Any:
    """A PersistentVolume's ``spec.nodeAffinity.required.nodeSelectorTerms`` (None where any level is missing)."""
    return _field(_field(_field(pv, "spec"), "nodeAffinity"), "required").get("nodeSelectorTerms")


def _labels(obj: dict[str, Any]) -> dict[str, Any]:
    return _field(_meta(obj), "labels")


def pv_nodes(pv: dict[str, Any], nodes: Iterable[dict[str, Any] | NodeState]) -> list[str]:
    """Rule A8: the Nodes a pod whose claim is bound to ``pv`` may run on: those its ``spec.nodeAffinity``
    (``required.nodeSelectorTerms``, one term must match: VolumeBinding) matches, whose zone and region labels
    are among the PV's own (VolumeZone: a PV label the Node lacks or does not match rules the Node out)."""
    terms = _required_terms(pv)
    labels = _labels(pv)
    out = []
    for node in nodes:
        state = node if isinstance(node, NodeState) else NodeState.of(node)
        if isinstance(terms, list) and terms and \
                not any(isinstance(t, dict) and node_selector_term_matches(t, state) for t in terms):
            continue
        if any(key in labels and str(state.labels.get(key)) not in str(labels[key]).split("__")
               for key in PV_TOPOLOGY_LABELS):
            continue
        out.append(state.name)
    return out


def pv_zones(pv: dict[str, Any], nodes: Iterable[dict[str, Any]], zone_key: str) -> frozenset[str]:
    """Rule A7: the zones a PersistentVolume lets its pod run in: those of the Nodes its ``spec.nodeAffinity``
    (``required.nodeSelectorTerms``) matches, narrowed by its zone label (VolumeZone); every zone when it states
    neither."""
    states = [NodeState.of(n) for n in nodes]
    zones = {str(s.labels[zone_key]) for s in states if zone_key in s.labels}
    terms = _required_terms(pv)
    if isinstance(terms, list) and terms:
        # one term must match (VolumeBinding's CheckNodeAffinity, as a pod's required node affinity)
        zones = {str(s.labels[zone_key]) for s in states if zone_key in s.labels
                 and any(isinstance(t, dict) and node_selector_term_matches(t, s) for t in terms)}
    labels = _labels(pv)
    for key in PV_ZONE_LABELS:
        if key in labels:
            allowed = set(str(labels[key]).split("__"))   # VolumeZone: several zones joined by "__"
            zones = zones & allowed if zones else allowed
            break
    return frozenset(zones)


def bound_volumes(statefulset: dict[str, Any], objects: Iterable[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """Rules A7, A8: for each ordinal of ``statefulset``, the PersistentVolumes (among ``objects``) bound to its
    claims ``<volumeClaimTemplate>-<set>-<ordinal>`` of its namespace (a claim names its volume in
    ``spec.volumeName``)."""
    objects = list(objects)
    ns, name = namespace_of(statefulset), str(_meta(statefulset).get("name", ""))
    templates = [str(_meta(t).get("name", "")) for t in (statefulset.get("spec") or {}).get("volumeClaimTemplates") or []
                 if isinstance(t, dict)]
    if not templates:
        return {}
    by_name = {str(_meta(v).get("name", "")): v for v in objects if is_volume(v)}
    out: dict[int, list[dict[str, Any]]] = {}
    for claim in objects:
        if not is_claim(claim) or namespace_of(claim) != ns:
            continue
        ordinal = _ordinal(str(_meta(claim).get("name", "")), templates, name)
        volume = by_name.get(str((claim.get("spec") or {}).get("volumeName") or ""))
        if ordinal is not None and volume is not None:
            out.setdefault(ordinal, []).append(volume)
    return dict(sorted(out.items()))


def volume_pins(statefulset: dict[str, Any], claims: Iterable[dict[str, Any]], volumes: Iterable[dict[str, Any]],
                nodes: Iterable[dict[str, Any]], zone_key: str) -> VolumePins:
    """Rules A7, A8: for each ordinal of ``statefulset`` (its current ones and any above, which a scale-up brings
    back on their retained claims), the zones its bound claims' PersistentVolumes allow; an ordinal with several
    bound claims may run only where all of them allow."""
    nodes = list(nodes)
    pins: dict[int, frozenset[str]] = {}
    for ordinal, bound in bound_volumes(statefulset, list(claims) + list(volumes)).items():
        for volume in bound:
            zones = pv_zones(volume, nodes, zone_key)
            pins[ordinal] = pins[ordinal] & zones if ordinal in pins else zones
    return VolumePins(namespace_of(statefulset), str(_meta(statefulset).get("name", "")), pins)


def _ordinal(claim_name: str, templates: list[str], set_name: str) -> int | None:
    for template in templates:
        prefix = f"{template}-{set_name}-"
        rest = claim_name[len(prefix):]
        if claim_name.startswith(prefix) and rest.isdigit() and (rest == "0" or not rest.startswith("0")):
            return int(rest)
    return None


def ordinal_range(statefulset: dict[str, Any]) -> range:
    """The ordinals of the StatefulSet's pods: ``[ordinals.start, ordinals.start + replicas)``."""
    spec = _field(statefulset, "spec")
    start = _field(spec, "ordinals").get("start") or 0
    start = start if isinstance(start, int) else 0
    replicas = spec.get("replicas")
    replicas = replicas if isinstance(replicas, int) else 1
    return range(start, start + replicas)


def least_skew(pinned: dict[str, int], zones: Iterable[str], free: int) -> int:
    """Rule A7: the smallest zone skew the pinned counts allow when ``free`` more pods (unpinned ordinals) go
    where they help most (each to a zone with the fewest)."""
    counts = {z: pinned.get(z, 0) for z in zones} | pinned
    if not counts:
        return 0
    for _ in range(free):
        low = min(counts, key=lambda z: (counts[z], z))
        counts[low] += 1
    return max(counts.values()) - min(counts.values())


def pinned_zones(pins: VolumePins, start: int, replicas: int) -> dict[str, int]:
    """Rule A7: how many of the ordinals ``[start, start+replicas)`` their volumes pin to each zone (an ordinal
    whose volumes allow exactly one zone)."""
    counts: dict[str, int] = {}
    for ordinal in range(start, start + replicas):
        zones = pins.pins.get(ordinal)
        if zones is not None and len(zones) == 1:
            zone = next(iter(zones))
            counts[zone] = counts.get(zone, 0) + 1
    return dict(sorted(counts.items()))
