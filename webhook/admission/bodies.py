"""Rule W11: the review bodies a worker holds at once, and reading one within the limit."""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from werkzeug.exceptions import BadRequest, RequestEntityTooLarge, RequestTimeout, ServiceUnavailable
from werkzeug.wsgi import get_content_length

#: Room kept beside the largest review in a worker's budget (rule W11): ordinary reviews (a few KiB) never wait
#: behind one that takes ``maxRequestBytes``.
ORDINARY_ROOM = 64 * 1024
#: How long a review waits for room among the bodies its worker holds (rule W11) before it is answered 503: well
#: within the client's deadline for sending its body (2 s) and the API server's timeoutSeconds (3 s).
ROOM_WAIT_SECONDS = 1.0


#: What a review refused for lack of room reads of its body at a time, to discard it.
DISCARD_CHUNK = 64 * 1024


class NoRoom(ServiceUnavailable):
    """Rule W11: the review found no room among the bodies its worker holds, after waiting ``waited`` seconds."""

    def __init__(self, description: str, waited: float):
        super().__init__(description)
        self.waited = waited


class BodyBudget:
    """Rule W11: the bytes of review bodies one worker holds at once, at most ``budget``.

    A review's body becomes tens of times its size once parsed (a 6 MiB review of small maps: 250 MiB), and a
    worker reads and answers many connections at once (a gevent worker switches on every read and on the HPA read
    of rule W4), so its memory is bounded only if what it holds is. A review takes its declared length (the limit
    when it declares none) before its body is read, and gives it back once answered; one that would pass the
    budget waits up to :data:`ROOM_WAIT_SECONDS` for earlier ones to finish, then is answered 503 (:class:`NoRoom`,
    once :func:`discard_body` has read its body). A review alone
    always fits, and the app's budget is the largest body read and :data:`ORDINARY_ROOM` more, so ordinary reviews
    pass beside the largest one. Under gevent's monkey patching the condition is cooperative: a waiting review holds
    no thread.
    """

    def __init__(self, budget: int):
        self.budget = budget
        self.held = 0
        self._room = threading.Condition()

    @contextmanager
    def hold(self, size: int, wait: float | None = None) -> Iterator[float]:
        """Room for ``size`` bytes while the block runs (given the seconds it waited for room), waiting at most
        ``wait`` seconds (default :data:`ROOM_WAIT_SECONDS`) for it; else :class:`NoRoom`."""
        start = time.monotonic()
        with self._room:
            fits = self._room.wait_for(lambda: self.held == 0 or self.held + size <= self.budget,
                                       ROOM_WAIT_SECONDS if wait is None else wait)
            if not fits:
                raise NoRoom(f"the worker holds {self.held} bytes of reviews (at most {self.budget}): try again",
                             time.monotonic() - start)
            self.held += size
        try:
            yield time.monotonic() - start
        finally:
            with self._room:
                self.held -= size
                self._room.notify_all()


def not_the_clients_time(environ: dict[str, Any], seconds: float) -> None:
    """The ``seconds`` a review waited for room (rule W11) are taken off its client's deadline for sending it
    (rule W12), through the connection gunicorn serves it on (``gunicorn.socket``, a
    :class:`~.deadline.DeadlineSocket`); nothing where the app is served otherwise."""
    move = getattr(environ.get("gunicorn.socket"), "not_the_clients_time", None)
    if move is not None:
        move(seconds)


def discard_body(environ: dict[str, Any], size: int) -> None:
    """Read and drop up to ``size`` bytes of the request body, :data:`DISCARD_CHUNK` at a time (rule W11).

    A client still sending its body when the server answers and closes gets a reset instead of the answer (the
    server's TLS close reaches it mid-write): the API server would then see a failed call, not the 503 that says
    to try again. Reading the body first costs no memory held and at most the connection's request deadline; a
    body that cannot be read ends the discard (the connection is closed after the answer either way)."""
    stream = environ["wsgi.input"]
    left = size
    try:
        while left > 0:
            chunk = stream.read(min(DISCARD_CHUNK, left))
            if not chunk:
                return
            left -= len(chunk)
    except Exception:  # noqa: BLE001 -- the client gone or too slow: nothing more to read, the 503 still goes out
        return


def read_body(environ: dict[str, Any], limit: int) -> bytes:
    """The request body, at most ``limit`` bytes, else 413 (before reading it when the length is declared).

    Reads ``wsgi.input`` directly: werkzeug's stream wrapper cost more than the read.
    A client too slow to send it (the server's deadline, a ``TimeoutError``)
    gets 408; a body that cannot be read (a broken chunked encoding, the client
    gone) gets 400. Either way the server closes the connection afterwards.
    """
    length = get_content_length(environ)
    if length is not None and length > limit:
        raise RequestEntityTooLarge()
    try:
        data = environ["wsgi.input"].read(limit + 1 if length is None else length)
    except TimeoutError:
        raise RequestTimeout("the request body did not arrive in time") from None
    except Exception as e:  # noqa: BLE001 -- whatever the input stream raises, the client caused it
        raise BadRequest(f"the request body could not be read: {type(e).__name__}") from None
    if len(data) > limit:
        raise RequestEntityTooLarge()
    return bytes(data)
