"""A keyed work queue after client-go's ``util/workqueue``: the queue, its delays and its rate limiter
as three parts.

- :class:`WorkQueue` collapses duplicate keys and never hands one key to two workers at once (a key
  added while a worker holds it is queued again when that worker is done); ``add_after`` delays a key;
  ``add_rate_limited`` delays it by what its :class:`RateLimiter` says; ``forget`` resets that.
- The default rate limiter is client-go's ``DefaultControllerRateLimiter``: the larger of a per-key
  exponential backoff (:class:`ItemExponentialFailureRateLimiter`) and an overall token bucket
  (:class:`BucketRateLimiter`), so a burst of failing keys cannot hammer the API server.
- :class:`QueueMetrics` are client-go's workqueue metrics, labelled with the queue's name:
  ``workqueue_depth``, ``workqueue_adds_total``, ``workqueue_retries_total``,
  ``workqueue_work_duration_seconds``, ``workqueue_queue_duration_seconds``.
"""
from __future__ import annotations

import heapq
import threading
import time
from collections import deque
from typing import Callable, Generic, Hashable, Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

K = TypeVar("K", bound=Hashable)
K_contra = TypeVar("K_contra", bound=Hashable, contravariant=True)
Clock = Callable[[], float]


class RateLimiter(Protocol[K_contra]):
    """How long to wait before a key is worked on again (client-go's ``TypedRateLimiter``)."""

    def when(self, key: K_contra) -> float: ...

    def forget(self, key: K_contra) -> None: ...

    def retries(self, key: K_contra) -> int: ...


class ItemExponentialFailureRateLimiter(Generic[K]):
    """``base * 2**failures`` per key, at most ``cap``; ``forget`` resets the key."""

    def __init__(self, base: float = 0.05, cap: float = 60.0) -> None:
        self.base, self.cap = base, cap
        self._failures: dict[K, int] = {}
        self._lock = threading.Lock()

    def when(self, key: K) -> float:
        with self._lock:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        return min(self.base * 2.0 ** failures, self.cap)

    def forget(self, key: K) -> None:
        with self._lock:
            self._failures.pop(key, None)

    def retries(self, key: K) -> int:
        with self._lock:
            return self._failures.get(key, 0)


class BucketRateLimiter(Generic[K]):
    """An overall token bucket of ``qps`` tokens a second, ``burst`` at most: each call takes a token
    and answers how long until it is there (client-go wraps ``golang.org/x/time/rate`` the same way)."""

    def __init__(self, qps: float = 10.0, burst: int = 100, clock: Clock = time.monotonic) -> None:
        self.qps, self.burst, self.clock = qps, burst, clock
        self._tokens = float(burst)
        self._at = clock()
        self._lock = threading.Lock()

    def when(self, key: K) -> float:
        with self._lock:
            now = self.clock()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.qps)
            self._at = now
            self._tokens -= 1
            return max(0.0, -self._tokens / self.qps)

    def forget(self, key: K) -> None:
        pass

    def retries(self, key: K) -> int:
        return 0


class MaxOfRateLimiter(Generic[K]):
    """The longest wait of its limiters; retries as the limiter that counts most."""

    def __init__(self, *limiters: RateLimiter[K]) -> None:
        self.limiters = limiters

    def when(self, key: K) -> float:
        return max(limiter.when(key) for limiter in self.limiters)

    def forget(self, key: K) -> None:
        for limiter in self.limiters:
            limiter.forget(key)

    def retries(self, key: K) -> int:
        return max(limiter.retries(key) for limiter in self.limiters)


def default_rate_limiter(base: float = 0.05, cap: float = 60.0, qps: float = 10.0,
                         burst: int = 100) -> MaxOfRateLimiter[K]:
    """client-go's ``DefaultControllerRateLimiter`` with this project's per-key backoff (50 ms doubling to
    at most 60 s) and client-go's bucket (10 a second, bursts of 100)."""
    return MaxOfRateLimiter(ItemExponentialFailureRateLimiter(base, cap), BucketRateLimiter(qps, burst))


class QueueMetrics:
    """client-go's workqueue metrics (``k8s.io/component-base/metrics/prometheus/workqueue``), labelled
    ``name``; registered once per registry, one label value per queue."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.depth = Gauge("workqueue_depth", "Current depth of workqueue", ["name"], registry=registry)
        self.adds = Counter("workqueue_adds", "Total number of adds handled by workqueue", ["name"],
                            registry=registry)
        self.retries = Counter("workqueue_retries", "Total number of retries handled by workqueue", ["name"],
                               registry=registry)
        self.work_duration = Histogram("workqueue_work_duration_seconds",
                                       "How long in seconds processing an item from workqueue takes", ["name"],
                                       buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10), registry=registry)
        self.queue_duration = Histogram("workqueue_queue_duration_seconds",
                                        "How long in seconds an item stays in workqueue before being requested",
                                        ["name"], buckets=(0.001, 0.01, 0.1, 1, 10, 60), registry=registry)


class _Series:
    """One queue's children of :class:`QueueMetrics`."""

    def __init__(self, metrics: QueueMetrics, name: str) -> None:
        self.adds = metrics.adds.labels(name)
        self.retries = metrics.retries.labels(name)
        self.work_duration = metrics.work_duration.labels(name)
        self.queue_duration = metrics.queue_duration.labels(name)


class WorkQueue(Generic[K]):
    """Keys to work on. A key added while queued is queued once; a key added while a worker holds it
    is queued again when that worker is done. ``name`` labels the queue's metrics."""

    def __init__(self, name: str = "queue", rate_limiter: RateLimiter[K] | None = None,
                 metrics: QueueMetrics | None = None, clock: Clock = time.monotonic) -> None:
        self.name, self.clock = name, clock
        self.rate_limiter: RateLimiter[K] = rate_limiter or default_rate_limiter()
        self._queue: deque[K] = deque()
        self._dirty: set[K] = set()
        self._processing: dict[K, float] = {}   # key -> when a worker took it
        self._added: dict[K, float] = {}        # key -> when it was queued
        self._waiting: list[tuple[float, int, K]] = []
        self._waiting_at: dict[K, float] = {}
        self._seq = 0
        self._cond = threading.Condition()
        self._shutdown = False
        self.metrics = metrics
        #: This queue's series, looked up once (a ``labels()`` call per add costs more than the add).
        self._series = None if metrics is None else _Series(metrics, name)
        if metrics is not None:
            metrics.depth.labels(name).set_function(self.__len__)

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue)

    def add(self, key: K) -> None:
        with self._cond:
            if self._shutdown or key in self._dirty:
                return
            self._dirty.add(key)
            if self._series is not None:
                self._series.adds.inc()
            if key not in self._processing:
                self._added[key] = self.clock()
                self._queue.append(key)
                self._cond.notify()

    def add_after(self, key: K, delay: float) -> None:
        if delay <= 0:
            return self.add(key)
        with self._cond:
            ready = self.clock() + delay
            if key in self._waiting_at and self._waiting_at[key] <= ready:
                return  # already waiting, and due sooner (client-go keeps the earliest too)
            self._waiting_at[key] = ready
            self._seq += 1
            heapq.heappush(self._waiting, (ready, self._seq, key))
            self._cond.notify()

    def add_rate_limited(self, key: K) -> float:
        """Queue ``key`` again after its rate limiter's delay; returns the delay."""
        delay = self.rate_limiter.when(key)
        if self._series is not None:
            self._series.retries.inc()
        self.add_after(key, delay)
        return delay

    def retries(self, key: K) -> int:
        """How often ``key`` was queued again by ``add_rate_limited`` since its last ``forget``
        (client-go's ``NumRequeues``)."""
        return self.rate_limiter.retries(key)

    def forget(self, key: K) -> None:
        self.rate_limiter.forget(key)

    def get(self, timeout: float | None = None) -> K | None:
        """The next key (the caller must call ``done``), or None after ``timeout`` or at shutdown."""
        deadline = None if timeout is None else self.clock() + timeout
        with self._cond:
            while True:
                self._promote()
                if self._queue:
                    key = self._queue.popleft()
                    now = self.clock()
                    self._processing[key] = now
                    self._dirty.discard(key)
                    added = self._added.pop(key, now)
                    if self._series is not None:
                        self._series.queue_duration.observe(now - added)
                    return key
                if self._shutdown:
                    return None
                wait = None if deadline is None else deadline - self.clock()
                if self._waiting:
                    due = self._waiting[0][0] - self.clock()
                    wait = due if wait is None else min(wait, due)
                if wait is not None and wait <= 0:
                    if deadline is not None and self.clock() >= deadline:
                        return None
                    continue
                self._cond.wait(wait)

    def done(self, key: K) -> None:
        with self._cond:
            started = self._processing.pop(key, None)
            if started is not None and self._series is not None:
                self._series.work_duration.observe(self.clock() - started)
            if key in self._dirty:
                self._added[key] = self.clock()
                self._queue.append(key)
                self._cond.notify()

    def pending_delayed(self) -> int:
        with self._cond:
            return len(self._waiting_at)

    def shutdown(self) -> None:
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()

    def _promote(self) -> None:
        now = self.clock()
        while self._waiting and self._waiting[0][0] <= now:
            ready, _, key = heapq.heappop(self._waiting)
            if self._waiting_at.get(key) != ready:
                continue  # superseded by an earlier time
            del self._waiting_at[key]
            if key not in self._dirty:
                self._dirty.add(key)
                if self._series is not None:
                    self._series.adds.inc()
                if key not in self._processing:
                    self._added[key] = now
                    self._queue.append(key)
