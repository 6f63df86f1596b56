"""Drive a :class:`webhook.controller.Controller` without its threads, through its real parts: the
reflectors list and watch through the (fake) API, a term's first steps are the reconciler's own
``started_leading``/``resync``, and the worker's step is its generic worker's ``process_next``. Nothing here reaches into
a store."""
from __future__ import annotations

import json
import logging
import weakref

from tests.fakeapi import FakeAPI
from webhook.controller import Controller
from webhook.logs import JsonFormatter

_led: weakref.WeakSet[Controller] = weakref.WeakSet()


def work(c: Controller) -> None:
    """The worker works the queue off (keys due now; backoffs still waiting stay queued)."""
    while c.worker.process_next(timeout=0):
        pass


def sync(c: Controller) -> None:
    """What a term of :meth:`Controller.run` does first (the next calls: at a resync): every reflector
    lists, every key is queued, and the worker works the queue off."""
    for reflector in c.reflectors:
        reflector.sync()
    if c in _led:
        c.reconciler.resync()
    else:
        _led.add(c)
        c.reconciler.started_leading()
    work(c)


def deliver(c: Controller, api: FakeAPI, event_type: str, obj: dict) -> None:
    """The API server sends one watch event for ``obj``: its reflector's next watch reads it, and the
    worker works the queue off."""
    [reflector] = [r for r in c.reflectors
                   if (r.res.api_version, r.res.kind) == (obj.get("apiVersion"), obj.get("kind"))]
    api.push(reflector.res.path(), [(event_type, obj)])
    reflector.watch_once()
    work(c)


def log_entries(records: list[logging.LogRecord]) -> list[dict]:
    """Captured log records as the controller writes them: one JSON object each (``msg`` and the fields)."""
    return [json.loads(JsonFormatter().format(r)) for r in records]
