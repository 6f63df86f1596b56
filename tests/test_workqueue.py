"""The work queue on its own (webhook/controller/workqueue.py): duplicates, delays, client-go's default rate
limiter (per-key exponential and an overall token bucket) and client-go's workqueue metrics."""
from __future__ import annotations

from prometheus_client import CollectorRegistry

from webhook.controller.workqueue import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    QueueMetrics,
    WorkQueue,
    default_rate_limiter,
)


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_queue_collapses_duplicates_and_never_hands_a_key_out_twice():
    q: WorkQueue[str] = WorkQueue()
    for key in ("a", "b", "a", "a"):
        q.add(key)
    assert len(q) == 2
    first = q.get(0)
    q.add(first)                 # added again while a worker holds it
    assert q.get(0) == "b"
    assert q.get(0) is None      # "a" waits until the worker is done
    q.done(first)
    assert q.get(0) == "a"


def test_queue_backoff_doubles_per_key_up_to_the_cap_and_forget_resets():
    clock = Clock()
    q: WorkQueue[str] = WorkQueue(rate_limiter=ItemExponentialFailureRateLimiter(1.0, 5.0), clock=clock)
    delays = [q.add_rate_limited("k") for _ in range(5)]
    assert delays == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert q.retries("k") == 5
    assert q.get(0) is None
    assert q.pending_delayed() == 1  # one waiting entry per key, at the earliest time asked
    clock.now = 1.0
    assert q.get(0) == "k"
    q.done("k")
    clock.now = 10.0
    assert q.get(0) is None
    q.forget("k")
    assert q.retries("k") == 0
    assert q.add_rate_limited("k") == 1.0


def test_bucket_lets_a_burst_through_then_paces_at_its_rate():
    clock = Clock()
    bucket: BucketRateLimiter[str] = BucketRateLimiter(qps=10.0, burst=3, clock=clock)
    assert [bucket.when(k) for k in "abc"] == [0.0, 0.0, 0.0]
    assert [round(bucket.when(k), 6) for k in "de"] == [0.1, 0.2]   # the 4th token in 0.1 s, the 5th in 0.2 s
    clock.now = 1.0                                                 # refilled to the burst, no more
    assert [round(bucket.when(k), 6) for k in "fghi"] == [0.0, 0.0, 0.0, 0.1]


def test_default_limiter_is_the_larger_of_the_key_backoff_and_the_bucket():
    clock = Clock()
    limiter: MaxOfRateLimiter[str] = MaxOfRateLimiter(ItemExponentialFailureRateLimiter(0.05, 60.0),
                                                      BucketRateLimiter(qps=10.0, burst=2, clock=clock))
    assert limiter.when("a") == 0.05                  # a token is there: the key's own backoff
    assert limiter.when("a") == 0.1
    assert round(limiter.when("b"), 6) == 0.1         # b's backoff is 0.05, but the bucket is empty
    assert limiter.retries("a") == 2 and limiter.retries("b") == 1
    limiter.forget("a")
    assert limiter.retries("a") == 0
    default = default_rate_limiter()
    assert [type(x).__name__ for x in default.limiters] == ["ItemExponentialFailureRateLimiter", "BucketRateLimiter"]


def test_queue_metrics_are_client_gos_names_per_queue():
    registry = CollectorRegistry()
    metrics = QueueMetrics(registry)
    clock = Clock()
    q: WorkQueue[str] = WorkQueue("things", metrics=metrics, clock=clock)
    other: WorkQueue[str] = WorkQueue("others", metrics=metrics, clock=clock)
    q.add("a"), q.add("a"), q.add("b")
    other.add("x")

    def value(name, queue="things"):
        return registry.get_sample_value(name, {"name": queue})
    assert value("workqueue_depth") == 2 and value("workqueue_depth", "others") == 1
    assert value("workqueue_adds_total") == 2          # the duplicate collapsed
    clock.now = 3.0
    key = q.get(0)
    clock.now = 3.5
    q.done(key)
    assert value("workqueue_queue_duration_seconds_sum") == 3.0
    assert value("workqueue_work_duration_seconds_sum") == 0.5
    q.add_rate_limited("a")
    assert value("workqueue_retries_total") == 1 and value("workqueue_depth") == 1
