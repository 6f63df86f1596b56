"""Informer pieces for the controller, after client-go: an indexed store kept in step with events, a
reflector that lists then watches and resumes (the work queue is :mod:`webhook.controller.workqueue`).

- :class:`Store` holds one resource's objects by (namespace, name) with named indexes. Its one writer
  is its :class:`Reflector`; it ignores an event older than the object it holds only where the API
  server says resourceVersions compare (:func:`compare_resource_versions`).
- :class:`Reflector` lists, then watches from the list's resourceVersion with bookmarks, resumes from
  the last version seen after a watch ends or fails, and lists again only on 410 Gone; the relist
  replaces the store and yields a DELETED event for every object that vanished in the gap.
"""
from __future__ import annotations

import logging
import re
import threading
from typing import Any, Callable, Hashable, Iterable, Iterator

from policylib.shell import kube

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name)
#: Objects per page of a reflector's list (rule W7: projected page by page).
LIST_PAGE = kube.PROJECTED_PAGE
Indexer = Callable[[dict[str, Any]], Iterable[Hashable]]
Handler = Callable[[str, dict[str, Any], "dict[str, Any] | None"], None]  # (event type, object, the object it replaced)


def key_of(obj: dict[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""


def whole(obj: dict[str, Any]) -> dict[str, Any]:
    return obj


class Store:
    """One resource's objects by (namespace, name), with indexes; one writer (its reflector: what a
    controller writes itself goes into its own overlay, never here), any readers. ``project``
    is applied to every object before it is stored (rule W7: :func:`policylib.projection.project` keeps
    only what the planners read)."""

    def __init__(self, indexers: dict[str, Indexer] | None = None,
                 project: Callable[[dict[str, Any]], dict[str, Any]] = whole):
        self.project = project
        self.objects: dict[Key, dict[str, Any]] = {}
        self.indexers = indexers or {}
        self._indexes: dict[str, dict[Hashable, set[Key]]] = {name: {} for name in self.indexers}
        self.lock = threading.RLock()

    def __len__(self) -> int:
        return len(self.objects)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((namespace, name))

    def keys(self) -> list[Key]:
        with self.lock:
            return list(self.objects)

    def values(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.objects.values())

    def by_index(self, index: str, value: Hashable) -> list[dict[str, Any]]:
        with self.lock:
            return [self.objects[k] for k in sorted(self._indexes[index].get(value, ())) if k in self.objects]

    def apply(self, event_type: str, obj: dict[str, Any]) -> tuple[bool, dict[str, Any] | None]:
        """Apply one watch event. Returns (applied, the object it replaced or deleted); an event older
        than the object held is not applied."""
        obj = self.project(obj)
        key = key_of(obj)
        with self.lock:
            old = self.objects.get(key)
            if old is not None and is_older(obj, old):
                return False, old
            if event_type == "DELETED":
                if old is None:
                    return False, None
                self._unindex(key, old)
                del self.objects[key]
                return True, old
            if old is not None:
                self._unindex(key, old)
            self.objects[key] = obj
            self._index(key, obj)
            return True, old

    def replace(self, objs: Iterable[dict[str, Any]]) -> list[tuple[str, dict[str, Any], dict[str, Any] | None]]:
        """After a list: exactly ``objs``. Returns the events that take the old content to the new:
        ADDED, MODIFIED (resourceVersion changed) and a DELETED for every object that vanished. ``objs``
        may be a generator over a paginated list: each object is projected as it comes, so the list is
        never held whole."""
        fresh: dict[Key, dict[str, Any]] = {}
        for raw in objs:
            obj = self.project(raw)
            fresh[key_of(obj)] = obj
        events: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = []
        with self.lock:
            for key, old in list(self.objects.items()):
                if key not in fresh:
                    events.append(("DELETED", old, old))
            for key, obj in fresh.items():
                held = self.objects.get(key)
                if held is None:
                    events.append(("ADDED", obj, None))
                elif (held.get("metadata") or {}).get("resourceVersion") != (obj.get("metadata") or {}).get(
                        "resourceVersion"):
                    events.append(("MODIFIED", obj, held))
            self.objects = fresh
            self._indexes = {name: {} for name in self.indexers}
            for key, obj in fresh.items():
                self._index(key, obj)
        return events

    def _index(self, key: Key, obj: dict[str, Any]) -> None:
        for name, indexer in self.indexers.items():
            for value in indexer(obj):
                self._indexes[name].setdefault(value, set()).add(key)

    def _unindex(self, key: Key, obj: dict[str, Any]) -> None:
        for name, indexer in self.indexers.items():
            for value in indexer(obj):
                bucket = self._indexes[name].get(value)
                if bucket is not None:
                    bucket.discard(key)
                    if not bucket:
                        del self._indexes[name][value]


#: A resourceVersion the API server lets clients compare: a positive integer without leading zeros
#: (Kubernetes' "comparable resource versions", GA in 1.35: apimachinery's
#: ``util/resourceversion.CompareResourceVersion``). Anything else is opaque: equality only.
COMPARABLE_VERSION = re.compile(r"[1-9][0-9]*")


def compare_resource_versions(a: object, b: object) -> int | None:
    """-1, 0 or 1 as ``a`` is older than, the same as or newer than ``b``, two resourceVersions of
    objects of one resource, as the API server documents their order (longer is newer, then digit by
    digit); None when either is not of the documented form: the API calls those opaque."""
    if not (isinstance(a, str) and isinstance(b, str) and COMPARABLE_VERSION.fullmatch(a)
            and COMPARABLE_VERSION.fullmatch(b)):
        return None
    left, right = (len(a), a), (len(b), b)
    return (left > right) - (left < right)


def is_older(obj: dict[str, Any], held: dict[str, Any]) -> bool:
    """``obj`` is an older version of ``held``: the same object (same uid) at a resourceVersion the API
    server orders before ``held``'s. Versions of any other form are opaque: never older."""
    same = (obj.get("metadata") or {}).get("uid") == (held.get("metadata") or {}).get("uid")
    order = compare_resource_versions((obj.get("metadata") or {}).get("resourceVersion"),
                                      (held.get("metadata") or {}).get("resourceVersion"))
    return same and order == -1


class ReflectorMetrics:
    """Counters a reflector reports to (no-ops by default)."""

    def watch_restart(self, plural: str) -> None: ...

    def relist(self, plural: str) -> None: ...


class Reflector:
    """List-then-watch one resource into a store, calling ``handler`` for every change."""

    def __init__(self, api: kube.Api, res: kube.Resource, store: Store, handler: Handler,
                 metrics: ReflectorMetrics | None = None, watch_seconds: int = 300, max_backoff: float = 30.0):
        self.api, self.res, self.store, self.handler = api, res, store, handler
        self.metrics = metrics or ReflectorMetrics()
        self.watch_seconds, self.max_backoff = watch_seconds, max_backoff
        self.resource_version: str | None = None
        #: Objects read by the list under way (or the last one): how far an initial sync is.
        self.listed = 0
        self.synced = threading.Event()
        self.served = True
        self.last_error: str | None = None

    def list(self) -> None:
        """List into the store page by page (``limit``/``continue``), handing the events of the
        difference to the handler. Each page is projected into the store as it arrives: the memory a list
        takes is the store plus one page, never the whole list as one body."""
        version = [""]

        def items() -> Iterator[dict[str, Any]]:
            for page in self.api.pages(self.res, limit=LIST_PAGE):
                version[0] = page["resourceVersion"]
                self.listed += len(page["items"])
                yield from page["items"]
        self.listed = 0
        events = self.store.replace(items())
        self.resource_version = version[0]
        for event_type, obj, old in events:
            self.handler(event_type, obj, old)
        self.synced.set()

    def watch_once(self) -> None:
        """One watch from the current resourceVersion until the server ends it."""
        for event_type, obj in self.api.watch(self.res, self.resource_version, self.watch_seconds):
            version = (obj.get("metadata") or {}).get("resourceVersion")
            if event_type != "BOOKMARK":
                applied, old = self.store.apply(event_type, obj)
                if applied:
                    self.handler(event_type, obj, old)
            if version:
                self.resource_version = version

    def sync(self) -> bool:
        """List, as the first step of :meth:`run` and after 410 Gone. False when the cluster does not
        serve the resource (a CRD not installed): the reflector then counts as synced, with nothing
        to wait for, and :meth:`run` looks again later."""
        try:
            if self.synced.is_set():
                self.metrics.relist(self.res.plural)
            self.list()
        except kube.NotFound as e:
            self.served, self.resource_version = False, None
            self.synced.set()
            self.last_error = str(e)
            return False
        self.served = True
        return True

    def run(self, stop: threading.Event) -> None:
        backoff = 0.5
        while not stop.is_set():
            try:
                if self.resource_version is None and not self.sync():
                    stop.wait(self.max_backoff)
                    continue
                self.watch_once()
                self.metrics.watch_restart(self.res.plural)
                backoff, self.last_error = 0.5, None
                continue
            except kube.Gone:
                self.resource_version = None  # too old: list again, now
                continue
            except kube.NotFound as e:
                # The cluster stopped serving it (a CRD removed): look again later.
                self.served, self.resource_version = False, None
                self.synced.set()
                self.last_error = str(e)
                stop.wait(self.max_backoff)
                continue
            except Exception as e:  # noqa: BLE001 -- network or server trouble: back off, resume
                self.last_error = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"[:300]
                log.warning("watch failed", extra={"resource": self.res.plural, "error": self.last_error})
                self.metrics.watch_restart(self.res.plural)
            stop.wait(backoff)
            backoff = min(backoff * 2, self.max_backoff)
