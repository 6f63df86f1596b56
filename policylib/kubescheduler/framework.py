"""The simulator's plugin interface: kube-scheduler's framework (``pkg/scheduler/framework/interface.go``) as one
record per plugin.

A :class:`Plugin` names the extension points it implements, as a kube-scheduler plugin does:

- ``node_filter``: a filter whose verdict does not change while pods bind (it reads the pod's
  :meth:`~policylib.kubescheduler.model.PodShape.signature` and the Node, never what is bound). These decide a node's
  *eligibility* for a pod; ``check`` asks them alone (:func:`policylib.kubescheduler.plugins.eligible_nodes`).
- ``init``: the plugin's own state for the life of one snapshot (what it derives from the node facts and keeps
  across cycles, as a kube-scheduler plugin instance keeps its fields), kept in ``cycle.plugins[plugin.name]``.
- ``prefilter``: the plugin's state for one pod's cycle (kube-scheduler's CycleState entry), kept in
  ``cycle.state[plugin.name]``; ``bound``: what a sibling's bind changes in that state.
- ``filter``: the nodes that pass, as an array (None: every node passes, the framework's Skip); ``failures``:
  for the failure message, each node's reasons in the scheduler's words (None: every node passes).
- ``node_score``: a raw per-node score that does not change while pods bind; ``score``: the normalised score
  of the feasible nodes, with ``weight`` from the default profile (None: every node scores the same).

``reasons`` are the reason strings the plugin's filter reports (``{}`` fields filled per node), and ``rules`` the
rules of docs/specification.md that it implements. The plugins, in the framework's order, are listed once in
:data:`policylib.kubescheduler.plugins.PLUGINS`; the engine, the failure messages and ``check`` all iterate that list.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol

from .arrays import np

if TYPE_CHECKING:
    from .model import NodeState, PodShape
    from .snapshot import Snapshot

__all__ = ["MAX_SCORE", "Cycle", "Plugin", "Static", "default_normalize"]

MAX_SCORE = 100

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


class Cycle(Protocol):
    """What a plugin reads of one pod's scheduling cycle: the snapshot's node facts, the pod, the node filters'
    and node scores' verdicts for its signature (``st``), every plugin's per-cycle state (``state``, the
    framework's CycleState) and every plugin's per-snapshot state (``plugins``), by plugin name; ``incremental``:
    whether the plugin may keep and update its arrays after each bind (else everything is recomputed)."""

    snapshot: Snapshot
    pod: PodShape
    st: Static
    state: dict[str, Any]
    plugins: dict[str, Any]
    incremental: bool


NodeFilter = Callable[["PodShape", "NodeState"], "str | None"]
NodeScore = Callable[["PodShape", "NodeState"], int]
Mask = Callable[["Cycle"], "np.ndarray | None"]
Failures = Callable[["Cycle"], "Callable[[int], list[str]] | None"]
Score = Callable[["Cycle", "np.ndarray", "np.ndarray"], "np.ndarray | None"]


@dataclass(frozen=True)
class Plugin:
    """One filter and/or score plugin of kube-scheduler's default profile (see the module's docstring)."""

    name: str
    rules: tuple[str, ...]
    reasons: tuple[str, ...] = ()
    node_filter: NodeFilter | None = None
    init: Callable[["Snapshot"], Any] | None = None
    prefilter: Callable[["Cycle"], Any] | None = None
    filter: Mask | None = None
    failures: Failures | None = None
    bound: Callable[["Cycle", int], None] | None = None
    node_score: NodeScore | None = None
    score: Score | None = None
    weight: int = 0

    def __post_init__(self) -> None:
        if self.node_filter is not None and (self.filter is not None or self.failures is not None):
            raise ValueError(f"plugin {self.name}: a node filter does not change while pods bind; it has no "
                             "per-cycle filter")
        if (self.filter is None) != (self.failures is None):
            raise ValueError(f"plugin {self.name}: a per-cycle filter needs its failures (and the reverse)")
        if (self.score is None) != (self.weight == 0):
            raise ValueError(f"plugin {self.name}: a score needs a weight (and the reverse)")


def default_normalize(raw: np.ndarray, feasible: np.ndarray, reverse: bool) -> np.ndarray:
    """The framework's ``helper.DefaultNormalizeScore``: 100 x score / the highest among the feasible nodes,
    reversed (100 - that) for plugins where less is better; every node 100 (reversed) or 0 when the highest is 0."""
    top = raw[feasible].max() if feasible.any() else 0
    if top == 0:
        return np.full(raw.shape, MAX_SCORE if reverse else 0, dtype=np.int64)
    score = MAX_SCORE * raw // top
    return MAX_SCORE - score if reverse else score
