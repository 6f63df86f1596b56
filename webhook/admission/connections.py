"""Rule W12: a worker's open connections and its limit, the longest waiting closed to make room."""
from __future__ import annotations

import contextlib
import itertools
import socket
from collections import OrderedDict
from typing import Callable

import gevent.monkey

#: At its limit, a worker looks at this many of the longest-waiting connections of a queue for one to close.
EVICTION_SCAN = 16
#: ``select.select`` as the standard library has it (gevent's yields to its loop).
_select = gevent.monkey.get_original("select", "select")

#: A connection's stages as :class:`Connections` sees them (the label values of the limit metric, with ``none``).
HANDSHAKE, FIRST_REQUEST, BUSY, KEEP_ALIVE = "handshake", "first-request", "busy", "keep-alive"


class Connection:
    """One client connection of a worker: its socket (the TLS one once wrapped), its stage, and whether
    :class:`Connections` closed it to make room."""

    __slots__ = ("sock", "stage", "evicted", "_owner")

    def __init__(self, sock: socket.socket, owner: "Connections"):
        self.sock = sock
        self.stage = HANDSHAKE
        self.evicted = False
        self._owner = owner

    def waiting(self, stage: str) -> None:
        """Waiting for the client: for its first request (``FIRST_REQUEST``) or, kept alive, its next one."""
        self._owner.waiting(self, stage)

    def busy(self) -> None:
        """A request has begun: the connection is not closed to make room until it has been answered."""
        self._owner.busy(self)

    def has_input(self) -> bool:
        """Bytes have arrived that its greenlet has not read yet: a request is beginning (TLS may hold some already
        decrypted). Checked without waiting, with the unpatched ``select``: this must not yield."""
        pending = getattr(self.sock, "pending", None)
        if pending is not None and pending():
            return True
        fd = self.sock.fileno()
        return fd >= 0 and bool(_select([fd], [], [], 0)[0])

    def evict(self) -> None:
        """Shut the connection down under the greenlet that serves it, which then wakes (end of file) and closes
        it: through a duplicate of its descriptor, so neither its TLS state nor its socket object is touched."""
        self.evicted = True
        fd = self.sock.fileno()
        if fd < 0:
            return  # already closed
        with socket.fromfd(fd, self.sock.family, self.sock.type) as duplicate, contextlib.suppress(OSError):
            duplicate.shutdown(socket.SHUT_RDWR)  # OSError: the client is gone already


class Connections:
    """Rule W12: a worker's open connections, and its limit (gunicorn's ``worker_connections``, ``--max-connections``).

    gevent's server stops accepting while the worker holds ``limit`` connections. Left at that, connections
    that say nothing (a TLS handshake never finished, no first request) would lock every new client out until
    their deadlines pass, and open again. So the connection that reaches the limit closes the one that has waited
    longest without a request: among those that never sent one first (by arrival), else among the kept-alive
    idle ones (by when they went idle); a connection in the middle of a request, or whose request's first bytes
    have arrived, is never closed. ``reached``
    is told the stage of the connection closed (``"none"`` when every other one is busy with a request).
    Everything runs on the worker's one event-loop thread: no lock.
    """

    def __init__(self, limit: int, reached: Callable[[str], None]):
        self.limit = limit
        self.open = 0
        self._reached = reached
        self._fresh: OrderedDict[Connection, None] = OrderedDict()   # no request yet, by arrival
        self._idle: OrderedDict[Connection, None] = OrderedDict()    # kept alive, by when they went idle

    def opened(self, sock: socket.socket) -> Connection:
        self.open += 1
        if self.open >= self.limit:
            victim = self._longest_waiting()
            self._reached(victim.stage if victim is not None else "none")
            if victim is not None:
                victim.evict()
        connection = Connection(sock, self)
        self._fresh[connection] = None
        return connection

    def _longest_waiting(self) -> Connection | None:
        """The connection to close: the first of the oldest :data:`EVICTION_SCAN` in each queue that has no input
        waiting (one whose request is arriving becomes busy as soon as its greenlet runs: closing it would lose the
        request)."""
        for waiting in (self._fresh, self._idle):
            for connection in itertools.islice(waiting, EVICTION_SCAN):
                if not connection.has_input():
                    del waiting[connection]
                    return connection
        return None

    def waiting(self, connection: Connection, stage: str) -> None:
        connection.stage = stage
        if connection.evicted:
            return
        if stage == KEEP_ALIVE:
            self._idle[connection] = None
        else:
            self._fresh.setdefault(connection, None)

    def busy(self, connection: Connection) -> None:
        connection.stage = BUSY
        self._fresh.pop(connection, None)
        self._idle.pop(connection, None)

    def closed(self, connection: Connection) -> None:
        self.open -= 1
        self._fresh.pop(connection, None)
        self._idle.pop(connection, None)
