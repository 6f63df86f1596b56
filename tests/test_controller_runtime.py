"""The controller runtime on its own (webhook/controller/runtime.py): the manager starts the components that need
the Lease when the elector says this replica leads and stops them when it says it does not; the generic worker
turns a reconcile's result or error into the queue's forget, rate-limited retry or requeue-after."""
from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from webhook.controller import DONE, MAX_RETRIES, ControllerMetrics, Manager, Result, Task, Worker
from webhook.controller.workqueue import WorkQueue


def wait_for(what, predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


class Elector:
    """What the manager uses of a LeaderElector; a test says when this replica leads."""

    stop_wait = 5.0

    def __init__(self) -> None:
        self.on_started_leading: Any = None
        self.on_stopped_leading: Any = None
        self.released = threading.Event()

    def run(self, stop: threading.Event) -> None:
        stop.wait()

    def release(self) -> None:
        self.released.set()


class Component:
    """A Runnable that records its terms: how many are running at once, and how many began and ended."""

    def __init__(self, name: str, needs_leader: bool) -> None:
        self.name, self.needs_leader = name, needs_leader
        self.running = self.started = self.ended = self.most_at_once = 0
        self.lock = threading.Lock()

    def start(self, stop: threading.Event) -> None:
        with self.lock:
            self.running += 1
            self.started += 1
            self.most_at_once = max(self.most_at_once, self.running)
        stop.wait()
        time.sleep(0.05)   # a key in flight finishes after the term's end
        with self.lock:
            self.running -= 1
            self.ended += 1


@pytest.mark.timeout(60)
def test_components_that_need_the_lease_run_only_for_each_term_the_elector_reports():
    elector, stop = Elector(), threading.Event()
    manager = Manager(elector, stop)  # type: ignore[arg-type]
    always, worker = Component("watch", needs_leader=False), Component("worker", needs_leader=True)
    manager.add(always)
    manager.add(worker)
    thread = threading.Thread(target=manager.run, daemon=True)
    thread.start()
    try:
        wait_for("the watch", lambda: always.running == 1)
        assert worker.started == 0                                   # a standby runs no worker
        elector.on_started_leading()
        wait_for("the first term", lambda: worker.running == 1)
        elector.on_stopped_leading()
        wait_for("the first term's end", lambda: worker.ended == 1)
        assert (worker.running, always.running) == (0, 1)            # the watch goes on
        elector.on_started_leading()                                 # lost and taken again at once:
        elector.on_stopped_leading()
        elector.on_started_leading()
        wait_for("the third term", lambda: worker.started == 3 and worker.running == 1)
        assert worker.most_at_once == 1                              # never two workers on one queue
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive() and elector.released.is_set()
    assert (worker.running, worker.ended) == (0, 3)                  # the term's workers were joined
    wait_for("the watch's end", lambda: always.ended == 1)           # the watches are told, not waited for


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Scripted:
    """A reconciler answering each key with the next of ``answers`` (a Result, or an exception to raise)."""

    name = "scripted"

    def __init__(self, answers: list[Any], clock: Any) -> None:
        self.queue: WorkQueue[str] = WorkQueue(self.name, clock=clock)
        self.reflectors: list[Any] = []
        self.answers = answers
        self.keys: list[str] = []

    def started_leading(self) -> None:
        self.queue.add("k")

    def resync(self) -> None:
        self.queue.add("k")

    def reconcile(self, key: str) -> Result:
        self.keys.append(key)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_the_worker_owns_retries_forget_and_requeue_after():
    clock, metrics = Clock(), ControllerMetrics()
    reconciler = Scripted([ValueError("odd data"), Result(requeue=True), Result(requeue_after=0.0),
                           Result(requeue_after=30.0), DONE], clock)
    worker = Worker(reconciler, metrics, resync_seconds=300, error_stage="scripted")
    reconciler.queue.add("k")
    assert worker.process_next(timeout=0)                            # raised: retried with backoff
    assert (reconciler.queue.retries("k"), metrics.errors.labels("scripted")._value.get()) == (1, 1)
    assert not worker.process_next(timeout=0)                        # not before its backoff
    clock.now += 1
    assert worker.process_next(timeout=0)                            # requeue: retried with backoff too
    assert reconciler.queue.retries("k") == 2 and metrics.retries._value.get() == 2
    clock.now += 1
    assert worker.process_next(timeout=0)                            # requeue_after 0: forgotten, queued at once
    assert reconciler.queue.retries("k") == 0
    assert worker.process_next(timeout=0)                            # requeue_after 30 s
    assert not worker.process_next(timeout=0) and reconciler.queue.pending_delayed() == 1
    clock.now += 30
    assert worker.process_next(timeout=0)                            # DONE: forgotten, not queued
    assert not worker.process_next(timeout=0) and reconciler.queue.pending_delayed() == 0
    assert reconciler.keys == ["k"] * 5 and reconciler.answers == []


def test_a_key_failing_the_retry_cap_in_a_row_is_given_up_until_the_next_resync():
    clock, metrics = Clock(), ControllerMetrics()
    reconciler = Scripted([RuntimeError("always")] * (MAX_RETRIES + 1), clock)
    worker = Worker(reconciler, metrics, resync_seconds=300)
    reconciler.queue.add("k")
    while worker.process_next(timeout=0) or reconciler.queue.pending_delayed():
        clock.now += 120
    assert len(reconciler.keys) == MAX_RETRIES + 1 and metrics.gave_up._value.get() == 1
    assert reconciler.queue.retries("k") == 0                        # forgotten: a resync starts afresh
    assert metrics.errors.labels("reconcile")._value.get() == MAX_RETRIES + 1


@pytest.mark.timeout(60)
def test_a_worker_waits_for_its_sources_lists_then_queues_every_key_and_stops_with_its_term():
    metrics = ControllerMetrics()

    class Listed:
        synced = threading.Event()

    reconciler = Scripted([DONE], time.monotonic)   # the queue's waits end on the real clock
    worker = Worker(reconciler, metrics, resync_seconds=300, sources=lambda: [Listed()])  # type: ignore[list-item]
    term = threading.Event()
    thread = threading.Thread(target=worker.start, args=(term,), daemon=True)
    thread.start()
    term.set()                                                        # a term that ends before the lists are done
    thread.join(10)
    assert not thread.is_alive() and reconciler.keys == [] and len(reconciler.queue) == 0
    Listed.synced.set()
    term = threading.Event()
    thread = threading.Thread(target=worker.start, args=(term,), daemon=True)
    thread.start()
    wait_for("the first key", lambda: reconciler.keys == ["k"])
    term.set()
    thread.join(10)
    assert not thread.is_alive()


def test_a_task_runs_its_function_until_stopped():
    stop, seen = threading.Event(), []
    task = Task("watch-x", lambda s: seen.append(s is stop))
    task.start(stop)
    assert seen == [True] and not task.needs_leader
