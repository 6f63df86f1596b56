"""The scheduler's snapshot: node facts only (kube-scheduler's ``internal/cache`` Snapshot of NodeInfos).

Every node's allocatable and what is requested on it, its pod count, its labels' topology domains, and the pods
bound there as the filters read them (labels by namespace, required anti-affinity terms, host ports: NodeInfo's
``Pods``, ``PodsWithRequiredAntiAffinity`` and ``UsedPorts``), kept in arrays with one entry per node so that a
plugin decides for every node at once. A bind updates these facts and nothing else: what a plugin derives from
them it keeps itself (its per-snapshot state, :attr:`policylib.kubescheduler.framework.Plugin.init`, and its
per-cycle state, :attr:`~policylib.kubescheduler.framework.Plugin.prefilter`).
"""
from __future__ import annotations

from typing import Any, Iterable

from ..facts import namespace_of
from ..labels import selector_matches
from .arrays import np
from .model import BoundPod, NodeState, PodShape, PodTerm
from .resources import NON_MISSING


class Snapshot:
    """Every node's facts in arrays, kept equal to the :class:`NodeState` list it was built from."""

    def __init__(self, states: list[NodeState]):
        self.states = states
        n = len(states)
        self.index = {s.name: i for i, s in enumerate(states)}
        self.max_pods = np.array([s.allocatable.get("pods", 0) for s in states], dtype=np.int64)
        self.pods = np.array([s.pods for s in states], dtype=np.int64)
        names = {k for s in states for k in list(s.allocatable) + list(s.requested)} - {"pods"}
        self.alloc = {k: np.array([s.allocatable.get(k, 0) for s in states], dtype=np.int64) for k in names}
        self.req = {k: np.array([s.requested.get(k, 0) for s in states], dtype=np.int64) for k in names}
        self.nonzero = {k: np.array([s.nonzero.get(k, 0) for s in states], dtype=np.int64) for k in NON_MISSING}
        for k in NON_MISSING:
            self.alloc.setdefault(k, np.zeros(n, dtype=np.int64))
            self.req.setdefault(k, np.zeros(n, dtype=np.int64))
        # namespace -> label set -> (labels, pods per node); namespace -> (key, value) -> label sets
        self.groups: dict[str, dict[tuple[Any, ...], tuple[dict[str, Any], np.ndarray]]] = {}
        self.pairs: dict[str, dict[tuple[str, Any], set[tuple[Any, ...]]]] = {}
        self.anti: list[tuple[int, str, PodTerm]] = []
        self.ports: list[list[tuple[str, int, str]]] = [[] for _ in states]
        self._domains: dict[str, tuple[np.ndarray, list[str]]] = {}
        self._node_domains: dict[str, bool] = {}
        self.bind_log: list[int] = []     # the node of every bind, in order
        for i, s in enumerate(states):
            for p in s.pod_list:
                self._index_pod(i, p)

    def _index_pod(self, i: int, p: BoundPod) -> None:
        key = p.key
        groups = self.groups.setdefault(p.namespace, {})
        if key not in groups:
            groups[key] = (p.labels, np.zeros(len(self.states), dtype=np.int64))
            pairs = self.pairs.setdefault(p.namespace, {})
            for kv in p.labels.items():
                pairs.setdefault(kv, set()).add(key)
        groups[key][1][i] += 1
        for t in p.anti_terms:
            self.anti.append((i, p.namespace, t))
        self.ports[i].extend(p.ports)

    def domains(self, key: str) -> tuple[np.ndarray, list[str]]:
        """Each node's domain index for a topology key (-1 without the label), and the domains."""
        if key not in self._domains:
            values: dict[str, int] = {}
            idx = np.array([values.setdefault(s.labels[key], len(values)) if key in s.labels else -1
                            for s in self.states], dtype=np.int64)
            self._domains[key] = (idx, list(values))
        return self._domains[key]

    def node_domains(self, key: str) -> bool:
        """Whether node i is alone in domain i for ``key``, on every node."""
        if key not in self._node_domains:
            idx, values = self.domains(key)
            self._node_domains[key] = len(values) == len(idx) and bool((idx == np.arange(len(idx))).all())
        return self._node_domains[key]

    def single_node_domains(self, key: str) -> bool:
        """Whether every domain of ``key`` holds one node."""
        idx, values = self.domains(key)
        return len(values) == int((idx >= 0).sum())

    def matched(self, namespaces: frozenset[str] | None, selector: dict[str, Any] | None) -> np.ndarray:
        """Pods per node whose namespace is among ``namespaces`` (None: all) and whose labels ``selector`` matches."""
        out = np.zeros(len(self.states), dtype=np.int64)
        if not isinstance(selector, dict):
            return out
        first = next(iter((selector.get("matchLabels") or {}).items()), None)
        for ns in (self.groups if namespaces is None else namespaces):
            groups = self.groups.get(ns)
            if not groups:
                continue
            keys: Any = groups.keys() if first is None else self.pairs.get(ns, {}).get(first, ())
            for key in keys:
                labels, counts = groups[key]
                if selector_matches(selector, labels):
                    out += counts
        return out

    def bind(self, i: int, pod: PodShape) -> None:
        """The pod bound on node i: its requests, its pod count and the bound pod's facts there."""
        s = self.states[i]
        s.bind(pod)
        for k, v in pod.requests.items():
            if k not in self.req:
                self.req[k] = np.zeros(len(self.states), dtype=np.int64)
                self.alloc[k] = np.array([x.allocatable.get(k, 0) for x in self.states], dtype=np.int64)
            self.req[k][i] += v
        for k, v in pod.nonzero.items():
            self.nonzero[k][i] += v
        self.pods[i] += 1
        self._index_pod(i, s.pod_list[-1])
        self.bind_log.append(i)


def node_states(nodes: Iterable[dict[str, Any]], pods: Iterable[dict[str, Any]] = ()) -> list[NodeState]:
    """Nodes with the bound pods' requests and labels on them, sorted by name."""
    states = {n.name: n for n in (NodeState.of(node) for node in nodes) if n.name}
    return bind_pods([states[k] for k in sorted(states)], pods)


def bind_pods(states: list[NodeState], pods: Iterable[dict[str, Any]]) -> list[NodeState]:
    """``states`` with each bound pod (``spec.nodeName``) on its node; a pod of another node is left out."""
    index = {s.name: s for s in states}
    for pod in pods:
        state = index.get(pod["spec"]["nodeName"])
        if state is not None:
            state.bind(bound_pod_shape(pod))
    return states


def bound_pod_shape(pod: dict[str, Any]) -> PodShape:
    """A bound Pod as its node holds it (what :meth:`NodeState.unbind` takes off again)."""
    return PodShape.of_template({"metadata": pod.get("metadata") or {}, "spec": pod.get("spec") or {}},
                                namespace_of(pod), "")
