"""NodePorts (``pkg/scheduler/framework/plugins/nodeports``): host ports already taken."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from ...constants import ANY_ADDRESS
from ..arrays import np
from ..framework import Plugin

if TYPE_CHECKING:
    from ..framework import Cycle

NAME = "NodePorts"
MSG_PORTS = "node(s) didn't have free ports for the requested pod ports"


def ports_free(cy: Cycle) -> np.ndarray | None:
    """Rule R8: a host port (protocol, port) taken on the node by a bound pod, on the same or a wildcard IP,
    excludes the node; None for a pod without host ports."""
    if not cy.pod.host_ports:
        return None
    out = np.ones(len(cy.snapshot.states), dtype=bool)
    for i, used in enumerate(cy.snapshot.ports):
        for proto, port, ip in cy.pod.host_ports:
            if any(p == proto and q == port and (a == ip or ANY_ADDRESS in (a, ip)) for p, q, a in used):
                out[i] = False
    return out


def failures(cy: Cycle) -> Callable[[int], list[str]] | None:
    ok = ports_free(cy)
    if ok is None:
        return None
    return lambda i: [] if ok[i] else [MSG_PORTS]


PLUGIN = Plugin(NAME, ("R8",), (MSG_PORTS,), filter=ports_free, failures=failures)
