"""The controller's initial sync does the same work per object however many objects there are.

Counted in operations (Python function calls, the interpreter's own count: every call and every
builtin call made while the sync runs), never in seconds: a sync whose work per Deployment grows with
the number of Deployments (a per-key pass over every key, a per-key rebuild of the facts) fails here on
any machine. The objects are the scale benchmark's (bench/scale_objects.py): realistic Deployments, half
stored through policylib's webhook and half without its record, and one HPA per four Deployments.
"""
from __future__ import annotations

import sys
import time
from typing import Any

import yaml

from bench.scale_objects import deployment_as_stored, hpa_as_stored
from policylib import load_config
from policylib.shell import kube
from tests.controller_driver import sync
from tests.helpers import REPO
from webhook.controller import Controller, Options

SHIPPED = yaml.safe_load((REPO / "manifests" / "base" / "mutatingwebhookconfiguration.yaml").read_text())


class ListApi:
    """The calls an initial sync makes, in memory: a paginated list per resource, Events created."""

    def __init__(self, deployments: list[dict[str, Any]], hpas: list[dict[str, Any]]):
        self.objects = {kube.DEPLOYMENTS: deployments, kube.HPAS: hpas}
        self.events = 0

    def pages(self, res, namespace=None, timeout=None, limit=kube.PAGE):
        if res.plural == kube.MUTATING_WEBHOOKS.plural:   # the shipped configuration, installed: the scope (rule W5)
            yield {"items": [dict(SHIPPED, metadata=dict(SHIPPED["metadata"], resourceVersion="1"))],
                   "resourceVersion": "1"}
            return
        if res not in self.objects:
            raise kube.NotFound(404, "not served")
        items = self.objects[res]
        for start in range(0, len(items), limit):
            yield {"items": [dict(o) for o in items[start:start + limit]], "resourceVersion": "1"}

    def create(self, res, namespace, body):
        self.events += 1
        return body


def cluster(n: int) -> ListApi:
    return ListApi([dict(deployment_as_stored(i, compliant=i % 2 == 0), apiVersion="apps/v1", kind="Deployment")
                    for i in range(n)],
                   [hpa_as_stored(i) for i in range(0, n, 4)])


def sync_operations(api: ListApi) -> int:
    """Function calls made by one initial sync of a leading controller (writes and Events on)."""
    c = Controller(api, Options(load_config(None), identity="scale"))  # type: ignore[arg-type]
    c.elector.set_leading(True, time.monotonic() + 3600)
    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        if event in ("call", "c_call"):
            calls += 1
    sys.setprofile(count)
    try:
        sync(c)
    finally:
        sys.setprofile(None)
    assert len(c.stores[kube.DEPLOYMENTS]) == len(api.objects[kube.DEPLOYMENTS])
    return calls


def test_initial_sync_work_per_object_does_not_grow_with_the_objects():
    small, large = 100, 800
    small_api, large_api = cluster(small), cluster(large)
    per_small = sync_operations(small_api) / small
    per_large = sync_operations(large_api) / large
    # every Deployment without policylib's record got its one AdmittedWithoutPolicy Event
    assert (small_api.events, large_api.events) == (small // 2, large // 2)
    # 8x the objects: the same work per object, give or take the fixed costs spread thinner (a quadratic
    # sync does 8x the per-key scan here: about +30% per object at these sizes)
    assert per_large <= per_small * 1.05, (per_small, per_large)


def test_a_list_is_projected_page_by_page_never_held_whole():
    """Rule W7: each page's objects are projected into the store before the next page is read, so a
    list's memory is the store plus one page."""
    from policylib.projection import project
    from webhook.informer import LIST_PAGE, Reflector, Store
    seen: list[tuple[str, int]] = []
    api = cluster(2 * LIST_PAGE + 10)

    class Recording(ListApi):
        def pages(self, res, namespace=None, timeout=None, limit=kube.PAGE):
            for i, page in enumerate(super().pages(res, namespace, timeout, limit)):
                seen.append(("page", i))
                yield page

    def projecting(obj):
        seen.append(("project", 0))
        return project(obj)
    recording = Recording(api.objects[kube.DEPLOYMENTS], [])
    store = Store(project=projecting)
    Reflector(recording, kube.DEPLOYMENTS, store, lambda *event: None).list()
    pages = [i for i, event in enumerate(seen) if event[0] == "page"]
    assert len(pages) == 3 and len(store) == 2 * LIST_PAGE + 10
    assert pages == [0, LIST_PAGE + 1, 2 * LIST_PAGE + 2]   # every object of a page projected before the next
    assert "managedFields" not in store.values()[0]["metadata"]
