"""The registry: kube-scheduler 1.36's default profile as the simulator runs it (``framework/plugins/registry.go``
and ``apis/config/v1/default_plugins.go``), one module per plugin (or per family).

:data:`PLUGINS` lists the plugins in the order the framework runs their filters; a node's reason is the first
filter it fails. Every caller walks this one list: the engine's scheduling cycle (filters, scores, binds), the
failure messages, ``check`` and the admission policies' capacity verdict (a node's eligibility is the filters
that do not change while pods bind: :func:`eligible_nodes`). Adding a filter or a score is adding a module with
a :class:`Plugin` and its entry here (docs/architecture.md).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable

from ..framework import Failures, Mask, NodeFilter, NodeScore, Plugin, Score
from ..model import NodeState, PodShape
from ..snapshot import Snapshot
from . import (
    inter_pod_affinity,
    node_affinity,
    node_ports,
    node_resources,
    node_unschedulable,
    pod_topology_spread,
    taint_toleration,
)

if TYPE_CHECKING:
    from ..framework import Cycle

#: Rules R3, R10: the default profile's filter and score plugins, filters in the framework's order. ImageLocality
#: (score weight 1) is not modelled: it scores 0 on every node here (no node reports images in the input).
PLUGINS: tuple[Plugin, ...] = (
    node_unschedulable.PLUGIN,
    taint_toleration.PLUGIN,
    node_affinity.PLUGIN,
    node_ports.PLUGIN,
    node_resources.FIT_PLUGIN,
    pod_topology_spread.PLUGIN,
    inter_pod_affinity.PLUGIN,
    node_resources.BALANCED_PLUGIN,
)
#: The filters whose verdict does not change while pods bind: a node's eligibility for a pod.
NODE_FILTERS: tuple[tuple[str, NodeFilter], ...] = tuple((p.name, p.node_filter) for p in PLUGINS
                                                         if p.node_filter is not None)
#: The raw scores that do not change while pods bind (normalised by their plugin's score).
NODE_SCORES: tuple[tuple[str, NodeScore], ...] = tuple((p.name, p.node_score) for p in PLUGINS
                                                       if p.node_score is not None)
#: The filters that read what is bound, run per replica: (name, filter, failures).
CYCLE_FILTERS: tuple[tuple[str, Mask, Failures], ...] = tuple(
    (p.name, p.filter, p.failures) for p in PLUGINS if p.filter is not None and p.failures is not None)
#: The score plugins: (name, weight, score).
SCORES: tuple[tuple[str, int, Score], ...] = tuple((p.name, p.weight, p.score) for p in PLUGINS if p.score is not None)
#: The plugins that keep state for a snapshot's life (each built from the snapshot, as a plugin instance is).
INITS: tuple[tuple[str, Callable[[Snapshot], Any]], ...] = tuple((p.name, p.init) for p in PLUGINS if p.init is not None)
#: The plugins that keep per-cycle state (their PreFilter), and those that update it after a bind.
PREFILTERS: tuple[tuple[str, Callable[[Cycle], Any]], ...] = tuple(
    (p.name, p.prefilter) for p in PLUGINS if p.prefilter is not None)
BINDS: tuple[tuple[str, Callable[[Cycle, int], None]], ...] = tuple(
    (p.name, p.bound) for p in PLUGINS if p.bound is not None)


def node_failure(pod: PodShape, node: NodeState) -> str | None:
    """Rule R3: the first filter that never changes while pods bind (NodeUnschedulable, TaintToleration,
    NodeAffinity) that the node fails for the pod, in the scheduler's words; None when it passes them all."""
    for _name, node_filter in NODE_FILTERS:
        why = node_filter(pod, node)
        if why is not None:
            return why
    return None


def eligible_nodes(pod: PodShape, nodes: Iterable[NodeState]) -> list[NodeState]:
    """The nodes whose eligibility filters (:func:`node_failure`) the pod passes: where it could ever be placed,
    whatever is bound. ``check`` and the engine's cycle use the same filters."""
    return [n for n in nodes if node_failure(pod, n) is None]
