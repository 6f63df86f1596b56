"""One placement engine: kube-scheduler 1.36's default profile, run plugin by plugin from one registry.

Each replica goes through the filters of :data:`policylib.kubescheduler.plugins.PLUGINS` in the order the framework
runs them (the first that fails names the node's reason) and the feasible nodes are scored by the weighted score
plugins of the same list (weights of ``pkg/scheduler/apis/config/v1/default_plugins.go``), each normalised as its
plugin normalises. Every node's state lives in arrays (one entry per node), so a filter or a score is computed for
all nodes at once; after a bind only the bound node's entries change and are recomputed (``incremental``). With
``incremental=False`` everything is recomputed from the pods for every replica: the same model, slower; the
property test in tests/test_simulate.py holds both to the same placement per node. On the incremental path a pod
shape's fit and resource scores are also kept across workloads (only the nodes bound since are recomputed), and
only the feasible nodes are scored; a score that every feasible node shares is skipped, as it cannot change which
node wins. The engine knows no plugin by name: what a plugin decides lives in its module
(:mod:`policylib.kubescheduler.plugins`).
"""
from __future__ import annotations

from typing import Any

from ..kubescheduler.arrays import np
from ..kubescheduler.framework import Static
from ..kubescheduler.model import NodeState, PodShape
from ..kubescheduler.plugins import BINDS, CYCLE_FILTERS, INITS, PREFILTERS, SCORES, node_verdicts
from ..kubescheduler.snapshot import Snapshot


class Cluster:
    """The framework over one snapshot: the node facts (:attr:`snapshot`), each plugin's state for the snapshot's
    life (:attr:`plugins`, by plugin name) and the node filters' and node scores' verdicts per pod signature."""

    def __init__(self, states: list[NodeState]):
        self.snapshot = Snapshot(states)
        self.states = states
        self.index = self.snapshot.index
        self.plugins: dict[str, Any] = {name: init(self.snapshot) for name, init in INITS}
        self._static: dict[str, Static] = {}

    def single_node_domains(self, key: str) -> bool:
        """Whether every domain of ``key`` holds one node."""
        return self.snapshot.single_node_domains(key)

    def static(self, pod: PodShape) -> Static:
        """The node filters and node scores of the registry for ``pod`` on every node, once per pod signature."""
        sig = pod.signature()
        if sig not in self._static:
            self._static[sig] = node_verdicts(pod, self.states)
        return self._static[sig]

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
            self.snapshot.bind(i, pod)
            state.bound(i)
            name = self.states[i].name
            placed[name] = placed.get(name, 0) + 1
        return placed, 0, [], deterministic


class Cycle:
    """One pod's scheduling cycle against the cluster (:class:`policylib.kubescheduler.framework.Cycle`): each
    plugin's state (``state``, by plugin name: the framework's CycleState) from its PreFilter, updated as the
    pod's siblings bind."""

    def __init__(self, cluster: Cluster, pod: PodShape, incremental: bool = True):
        self.snapshot, self.plugins = cluster.snapshot, cluster.plugins
        self.pod, self.incremental = pod, incremental
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
        for i in range(len(self.snapshot.states)):
            first = self.st.reasons[i]
            reasons = [first] if first else next((r for r in (why(i) for why in explain) if r), [])
            for w in reasons:
                failures[w] = failures.get(w, 0) + 1
        parts = sorted(f"{n} {w}" for w, n in failures.items())
        return f"0/{len(self.snapshot.states)} nodes are available: {', '.join(parts)}."
