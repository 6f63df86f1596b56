"""The controller's runtime, in controller-runtime's shape (docs/architecture.md, "Controller runtime").

- A :class:`Runnable` is one component the :class:`Manager` runs: a reflector's watch loop, or a
  :class:`Worker`. It says whether it needs the Lease (``needs_leader``): those are started when this
  replica becomes leader and stopped when it stops leading; the others run from start to stop.
  Leadership changes arrive as the elector's callbacks (client-go's ``OnStartedLeading`` and
  ``OnStoppedLeading``), which the manager handles in order on its own thread.
- A :class:`KeyReconciler` takes a key and returns a :class:`Result` or raises: it never touches its
  key's retries. Its event handlers (reflector threads) only add keys to its ``queue``.
- One generic :class:`Worker` (controller-runtime's ``reconcileHandler``) owns the queue's ``forget``,
  ``add_rate_limited`` (at most :data:`MAX_RETRIES` failures in a row), requeue-after and the metrics,
  for every reconciler.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Generic, Hashable, Protocol, TypeVar

from prometheus_client import Histogram

from .workqueue import WorkQueue

if TYPE_CHECKING:
    from ..informer import Reflector
    from .leaderelection import LeaderElector
    from .metrics import ControllerMetrics

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)

#: A key that failed this many times in a row is dropped with an error in the log (client-go's
#: ``maxRetries`` pattern); the next resync queues it again. With the per-key backoff (50 ms doubling
#: to 60 s) that is about ten minutes of trying.
MAX_RETRIES = 15
#: How long a worker waits for a key before it looks at its stop event and its resync time again.
WAIT_SECONDS = 1.0


@dataclass(frozen=True)
class Result:
    """What one reconcile asks of its worker (controller-runtime's ``reconcile.Result``): nothing (the key's
    failures are forgotten), ``requeue_after`` seconds (0: at once; its failures are forgotten too), or
    ``requeue``: try again after the rate limiter's backoff, as a raised error does."""

    requeue: bool = False
    requeue_after: float | None = None


DONE = Result()


class KeyReconciler(Protocol[K]):
    """One reconciler: its informers (``reflectors``, started by the manager, counted in ``synced``), the
    queue its event handlers add keys to, the keys it queues when its worker starts (``started_leading``)
    and every ``controller.resyncSeconds`` (``resync``), and :meth:`reconcile`."""

    name: str
    queue: WorkQueue[K]
    reflectors: list[Reflector]

    def started_leading(self) -> None: ...

    def resync(self) -> None: ...

    def reconcile(self, key: K) -> Result: ...


class Reconciling:
    """What a reconciler answers of itself the same way in each one: whether this replica holds the Lease
    (``leading``, asked of the elector each time through the ``_leading`` it was given) and whether its
    informers have listed (``synced``)."""

    _leading: Callable[[], bool]
    reflectors: list[Reflector]

    @property
    def leading(self) -> bool:
        return self._leading()

    @property
    def synced(self) -> bool:
        return all(r.synced.is_set() for r in self.reflectors)


class Runnable(Protocol):
    """A component the manager runs on a thread of its own: :meth:`start` returns once ``stop`` is set."""

    name: str
    needs_leader: bool

    def start(self, stop: threading.Event) -> None: ...


@dataclass
class Task:
    """A function run as a :class:`Runnable` (a reflector's watch loop: ``Reflector.run``)."""

    name: str
    run: Callable[[threading.Event], None]
    needs_leader: bool = False

    def start(self, stop: threading.Event) -> None:
        self.run(stop)


def wait_synced(reflectors: list[Reflector], stop: threading.Event) -> bool:
    """Wait until every reflector has listed; False when ``stop`` came first."""
    for reflector in reflectors:
        while not reflector.synced.wait(WAIT_SECONDS):
            if stop.is_set():
                return False
    return not stop.is_set()


class Worker(Generic[K]):
    """The one worker loop of every reconciler, a :class:`Runnable` that needs the Lease: once ``sources``
    have listed it calls ``started_leading``, then works keys off the reconciler's queue and calls
    ``resync`` every ``resync_seconds`` until its term ends. ``error_stage`` labels
    ``policylib_controller_errors`` for a reconcile that raised; ``latency`` (optional) times each key;
    ``after`` is called with each key once it is done."""

    needs_leader = True

    def __init__(self, reconciler: KeyReconciler[K], metrics: ControllerMetrics, *, resync_seconds: float,
                 sources: Callable[[], list[Reflector]] = list, error_stage: str = "reconcile",
                 latency: Histogram | None = None, after: Callable[[K], None] | None = None) -> None:
        self.reconciler, self.queue, self.metrics = reconciler, reconciler.queue, metrics
        self.name = f"worker-{reconciler.name}"
        self.resync_seconds, self.sources, self.error_stage = resync_seconds, sources, error_stage
        self.latency, self.after = latency, after

    def start(self, stop: threading.Event) -> None:
        if not wait_synced(self.sources(), stop):
            return
        self.reconciler.started_leading()
        resync_at = time.monotonic() + self.resync_seconds
        while not stop.is_set():
            now = time.monotonic()
            if now >= resync_at:
                self.reconciler.resync()
                resync_at = now + self.resync_seconds
            self.process_next(timeout=min(WAIT_SECONDS, resync_at - now))

    def process_next(self, timeout: float | None = None) -> bool:
        """Reconcile the next key from the queue; False when none came within ``timeout``."""
        key = self.queue.get(timeout)
        if key is None:
            return False
        started = time.perf_counter()
        try:
            self.handle(key)
        finally:
            self.queue.done(key)
            if self.latency is not None:
                self.latency.observe(time.perf_counter() - started)
            if self.after is not None:
                self.after(key)
        return True

    def handle(self, key: K) -> None:
        """controller-runtime's ``reconcileHandler``: an error or ``requeue`` retries with backoff; ``requeue_after``
        forgets the failures and queues the key after the delay; otherwise the failures are forgotten."""
        try:
            result = self.reconciler.reconcile(key)
        except Exception as e:  # noqa: BLE001 -- a bug or odd data must not stop the worker
            self.metrics.errors.labels(self.error_stage).inc()
            log.warning("reconcile failed", extra={"controller": self.reconciler.name, "key": list(key)
                                                   if isinstance(key, tuple) else key, "error": str(e)[:500]})
            self.retry(key)
            return
        if result.requeue:
            self.retry(key)
            return
        self.queue.forget(key)
        if result.requeue_after is not None:
            self.queue.add_after(key, result.requeue_after)

    def retry(self, key: K) -> None:
        """Queue ``key`` again after its backoff, or give it up after :data:`MAX_RETRIES` failures in a row."""
        if self.queue.retries(key) < MAX_RETRIES:
            self.metrics.retries.inc()
            self.queue.add_rate_limited(key)
            return
        self.queue.forget(key)
        self.metrics.gave_up.inc()
        log.error("gave up on key until the next resync", extra={"controller": self.reconciler.name,
                                                                 "key": list(key) if isinstance(key, tuple) else key,
                                                                 "retries": MAX_RETRIES})


class Manager:
    """Runs :class:`Runnable` components: those that do not need the Lease from :meth:`run` until ``stop``,
    those that do for each term this replica leads (a term's components are stopped, and their threads
    joined, before the next term's start: a reconciler never has two workers)."""

    def __init__(self, elector: LeaderElector, stop: threading.Event) -> None:
        self.elector, self.stop = elector, stop
        self.runnables: list[Runnable] = []
        #: Leadership changes as the elector reports them (True: started, False: stopped); None: the manager stops.
        self._changes: queue.SimpleQueue[bool | None] = queue.SimpleQueue()
        self._term: tuple[threading.Event, list[threading.Thread]] | None = None
        elector.on_started_leading = lambda: self._changes.put(True)
        elector.on_stopped_leading = lambda: self._changes.put(False)

    def add(self, runnable: Runnable) -> None:
        """Run ``runnable`` too (before :meth:`run`)."""
        self.runnables.append(runnable)

    def run(self) -> None:
        """Run the election and the components until ``stop``; then end the term (its workers are waited for, at
        most the elector's ``stop_wait``) and give the Lease up. The components that run always are told to stop
        by ``stop`` and not waited for: a watch may be in a long request."""
        lease = threading.Thread(target=self.elector.run, args=(self.stop,), daemon=True, name="lease")
        always = [r for r in self.runnables if not r.needs_leader]
        for r in always:
            self._thread(r, self.stop)
        threading.Thread(target=self._stopped, daemon=True, name="manager-stop").start()
        lease.start()
        while (leading := self._changes.get()) is not None:
            self._end_term(timeout=None)
            if leading:
                stop = threading.Event()
                self._term = (stop, [self._thread(r, stop) for r in self.runnables if r.needs_leader])
        self._end_term(timeout=self.elector.stop_wait)
        # The round in flight ends first (client-go releases from the loop that renews, once it has ended): a
        # renewal committed after the release would make the release a 409 and keep the Lease held, and a round
        # that read the released Lease would take it back. A round still unanswered at its renewal's deadline
        # could not keep this replica leading anyway: it is not waited for longer.
        lease.join(timeout=self.elector.stop_wait)
        self.elector.release()

    def _stopped(self) -> None:
        self.stop.wait()
        self._changes.put(None)

    def _thread(self, runnable: Runnable, stop: threading.Event) -> threading.Thread:
        thread = threading.Thread(target=runnable.start, args=(stop,), daemon=True, name=runnable.name)
        thread.start()
        return thread

    def _end_term(self, timeout: float | None) -> None:
        """Stop the components of the term that ends and wait for their threads (a key in flight finishes)."""
        if self._term is None:
            return
        stop, threads = self._term
        self._term = None
        stop.set()
        for thread in threads:
            thread.join(timeout)

