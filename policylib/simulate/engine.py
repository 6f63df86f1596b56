"""One placement engine: kube-scheduler 1.36's default profile, run plugin by plugin from one registry.

Each replica goes through the filters of :data:`policylib.simulate.plugins.PLUGINS` in the order the framework
runs them (the first that fails names the node's reason) and the feasible nodes are scored by the weighted score
plugins of the same list (weights of ``pkg/scheduler/apis/config/v1/default_plugins.go``), each normalised as its
plugin normalises. Every node's state lives in arrays (one entry per node), so a filter or a score is computed for
all nodes at once; after a bind only the bound node's entries change and are recomputed (``incremental``). With
``incremental=False`` everything is recomputed from the pods for every replica: the same model, slower; the
property test in tests/test_simulate.py holds both to the same placement per node. On the incremental path a pod
shape's fit and resource scores are also kept across workloads (only the nodes bound since are recomputed), and
only the feasible nodes are scored; a score that every feasible node shares is skipped, as it cannot change which
node wins. The engine knows no plugin by name: what a plugin decides lives in its module
(:mod:`policylib.simulate.plugins`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..labels import selector_matches
from .framework import np
from .model import BoundPod, NodeState, PodShape, PodTerm
from .plugins import BINDS, CYCLE_FILTERS, NODE_FILTERS, NODE_SCORES, PREFILTERS, SCORES
from .plugins.node_resources import (
    balance,
    balance_one,
    balanced_allocation,
    least_allocated,
    refresh_resources,
)
from .plugins.pod_topology_spread import domain_arrays
from .resources import NON_MISSING, fits


@dataclass
class Static:
    """What does not change while pods are bound, for one pod signature: each node filter's verdict
    (``passes``, by plugin name; ``ok`` all of them; ``reasons`` each node's first failure) and each node
    score's raw values (``raw``; ``scored``: the plugins with a non-zero one)."""

    ok: np.ndarray
    passes: dict[str, np.ndarray]
    reasons: list[str | None]
    raw: dict[str, np.ndarray]
    sig: str = ""
    scored: frozenset[str] = field(default=frozenset())

    def __post_init__(self) -> None:
        self.scored = frozenset(name for name, raw in self.raw.items() if raw.any())


class Cluster:
    """Every node's state in arrays, kept equal to the :class:`NodeState` list it was built from."""

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
        self.safe = {k: np.where(self.alloc[k] > 0, self.alloc[k], 1) for k in NON_MISSING}
        self.weights = np.maximum((self.alloc["cpu"] > 0).astype(np.int64) + (self.alloc["memory"] > 0), 1)
        self.half_both = ((self.alloc["cpu"] > 0) & (self.alloc["memory"] > 0)) / 2
        self.balance = balance(self.req["cpu"], self.req["memory"], self)    # each node's, without the pod
        #: what a plugin keeps across cycles, keyed by (its name, ...)
        self.cache: dict[tuple[Any, ...], Any] = {}
        # namespace -> label set -> (labels, pods per node); namespace -> (key, value) -> label sets
        self.groups: dict[str, dict[tuple[Any, ...], tuple[dict[str, Any], np.ndarray]]] = {}
        self.pairs: dict[str, dict[tuple[str, Any], set[tuple[Any, ...]]]] = {}
        self.anti: list[tuple[int, str, PodTerm]] = []
        self.ports: list[list[tuple[str, int, str]]] = [[] for _ in states]
        self._domains: dict[str, tuple[np.ndarray, list[str]]] = {}
        self._domain_cache: dict[str, tuple[np.ndarray, bool, np.ndarray]] = {}
        self._node_domains: dict[str, bool] = {}
        self._static: dict[str, Static] = {}
        self.bind_log: list[int] = []     # the node of every bind, in order
        # a pod shape's (fit, LeastAllocated, BalancedAllocation) arrays and how much of bind_log they have seen
        self._resources: dict[tuple[Any, ...], tuple[np.ndarray, np.ndarray, np.ndarray, int]] = {}
        for i, s in enumerate(states):
            for p in s.pod_list:
                self._index_pod(i, p)

    # --- bookkeeping ---

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

    def domain_arrays(self, key: str) -> tuple[np.ndarray, bool, np.ndarray]:
        """:func:`_domain_arrays` of ``key``'s domains, computed once."""
        if key not in self._domain_cache:
            self._domain_cache[key] = domain_arrays(self.domains(key)[0])
        return self._domain_cache[key]

    def node_domains(self, key: str) -> bool:
        """Whether node i is alone in domain i for ``key``, on every node."""
        if key not in self._node_domains:
            idx, values = self.domains(key)
            self._node_domains[key] = len(values) == len(idx) and bool((idx == np.arange(len(idx))).all())
        return self._node_domains[key]

    def domains(self, key: str) -> tuple[np.ndarray, list[str]]:
        """Each node's domain index for a topology key (-1 without the label), and the domains."""
        if key not in self._domains:
            values: dict[str, int] = {}
            idx = np.array([values.setdefault(s.labels[key], len(values)) if key in s.labels else -1
                            for s in self.states], dtype=np.int64)
            self._domains[key] = (idx, list(values))
        return self._domains[key]

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

    def static(self, pod: PodShape) -> Static:
        """The node filters and node scores of the registry for ``pod`` on every node, once per pod signature."""
        sig = pod.signature()
        if sig not in self._static:
            n = len(self.states)
            passes = {name: np.ones(n, dtype=bool) for name, _ in NODE_FILTERS}
            raw = {name: np.zeros(n, dtype=np.int64) for name, _ in NODE_SCORES}
            reasons: list[str | None] = [None] * n
            for i, s in enumerate(self.states):
                for name, node_filter in NODE_FILTERS:
                    why = node_filter(pod, s)
                    if why is not None:
                        passes[name][i] = False
                        reasons[i] = reasons[i] or why
                for name, node_score in NODE_SCORES:
                    raw[name][i] = node_score(pod, s)
            ok = np.array([r is None for r in reasons], dtype=bool)
            self._static[sig] = Static(ok, passes, reasons, raw, sig)
        return self._static[sig]

    def bind(self, i: int, pod: PodShape) -> None:
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
        self.balance[i] = balance_one((s.requested.get("cpu", 0), s.requested.get("memory", 0)),
                                       (s.allocatable.get("cpu", 0), s.allocatable.get("memory", 0)))
        self._index_pod(i, s.pod_list[-1])
        self.bind_log.append(i)

    def resources(self, pod: PodShape, key: tuple[Any, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The pod's NodeResourcesFit filter, LeastAllocated and BalancedAllocation scores on every node. Kept per pod
        shape (``key``, :func:`resource_key`) across workloads: a later workload of the same shape recomputes only
        the nodes bound since (rule R9), and its cycle updates the same arrays after each bind."""
        if key not in self._resources:
            arrays = (fits(pod.requests, self.alloc, self.req, self.pods, self.max_pods),
                      least_allocated(pod, self), balanced_allocation(pod, self))
        else:
            *old, seen = self._resources[key]
            arrays = (old[0], old[1], old[2])
            for i in set(self.bind_log[seen:]):
                refresh_resources(self, pod, i, *arrays)
        self._resources[key] = (*arrays, len(self.bind_log))
        return arrays

    def keep_resources(self, key: tuple[Any, ...], arrays: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
        """Keep a shape's arrays as seen after every bind so far (its cycle updated them after its own binds)."""
        self._resources[key] = (*arrays, len(self.bind_log))

    # --- one workload ---

    def place(self, pod: PodShape, count: int, rank: np.ndarray | None = None,
              incremental: bool = True) -> tuple[dict[str, int], int, list[str], bool]:
        """Place ``count`` replicas, binding each; returns (pods per node, Pending, reasons, whether every choice
        was the only best-scored node). ``rank`` breaks ties (lowest wins; default: name order)."""
        n = len(self.states)
        rank = np.arange(n) if rank is None else rank
        placed: dict[str, int] = {}
        deterministic = True
        state = Cycle(self, pod, incremental)
        for r in range(count):
            if not incremental and r:
                state = Cycle(self, pod, incremental)
            feasible = state.feasible()
            chosen = feasible.nonzero()[0]
            if not len(chosen):
                return placed, count - r, [state.failure_message()], deterministic
            if len(chosen) > 1:
                total = state.scores(feasible, chosen)
                if total is not None:
                    chosen = chosen[total == total.max()]
            if len(chosen) > 1:
                deterministic = False
                i = int(chosen[rank[chosen].argmin()])
            else:
                i = int(chosen[0])
            self.bind(i, pod)
            state.bound(i)
            name = self.states[i].name
            placed[name] = placed.get(name, 0) + 1
        return placed, 0, [], deterministic


class Cycle:
    """One pod's scheduling cycle against the cluster: each plugin's state (``state``, by plugin name: the
    framework's CycleState) from its PreFilter, updated as the pod's siblings bind."""

    def __init__(self, cluster: Cluster, pod: PodShape, incremental: bool = True):
        self.c, self.pod, self.incremental = cluster, pod, incremental
        self.st = cluster.static(pod)
        self.state: dict[str, Any] = {}
        for name, prefilter in PREFILTERS:
            self.state[name] = prefilter(self)

    def feasible(self) -> np.ndarray:
        """The nodes that pass every filter of the registry."""
        ok: np.ndarray = self.st.ok.copy()
        for _name, mask_of, _failures in CYCLE_FILTERS:
            mask = mask_of(self)
            if mask is not None:
                ok &= mask
        return ok

    def scores(self, feasible: np.ndarray, chosen: np.ndarray) -> np.ndarray | None:
        """Rule R10: the weighted sum of the registry's score plugins on the feasible nodes ``chosen`` (each
        normalised as its plugin does), in that order; None where every one scores the same. Computed only when
        more than one node is feasible, as the scheduler does. A plugin returns None where it scores every node
        the same (the framework's Skip, or a constant): it cannot change which node wins."""
        total = None
        for _name, weight, score_of in SCORES:
            score = score_of(self, feasible, chosen)
            if score is not None:
                score = score if weight == 1 else weight * score
                total = score if total is None else total + score
        return total

    def bound(self, i: int) -> None:
        """Rule R9: what a bind on node i changes for the next sibling, plugin by plugin."""
        for _name, bound in BINDS:
            bound(self, i)

    def failure_message(self) -> str:
        """The scheduler's FitError message: for each node the reasons of the first filter it fails (in the
        registry's order), counted by reason and sorted."""
        explain = []
        for _name, _mask, failures_of in CYCLE_FILTERS:
            why = failures_of(self)
            if why is not None:
                explain.append(why)
        failures: dict[str, int] = {}
        for i in range(len(self.c.states)):
            first = self.st.reasons[i]
            reasons = [first] if first else next((r for r in (why(i) for why in explain) if r), [])
            for w in reasons:
                failures[w] = failures.get(w, 0) + 1
        parts = sorted(f"{n} {w}" for w, n in failures.items())
        return f"0/{len(self.c.states)} nodes are available: {', '.join(parts)}."
