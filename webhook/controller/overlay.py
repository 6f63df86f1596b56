"""The one overlay of what the controller wrote that an informer's store may not show yet, used by every
reconciler (client-go's ``MutationCache``, without its integer comparison of resourceVersions), and the
facts a plan reads through it. Nothing here writes to a store: its reflector is its one writer."""
from __future__ import annotations

from typing import Any, Callable, Generic, Hashable, TypeVar

from policylib.facts import CLUSTER_TRAINING_RUNTIME, ClusterFacts
from policylib.projection import project
from policylib.shell import kube

from ..informer import Store

K = TypeVar("K", bound=Hashable)


def version_of(obj: dict[str, Any] | None) -> str | None:
    return ((obj or {}).get("metadata") or {}).get("resourceVersion")


class Overlay(Generic[K]):
    """What a worker wrote (or re-read after a 409) that the informer's store may not show yet, by key. An
    entry is read instead of the stored object only while the store still holds the version it was written
    over; once the store moves on (our write came back through the watch, or a newer change did) the entry
    is dropped. Only equality of resourceVersions is used: the API calls them opaque. One worker alone reads
    and writes each overlay. ``project`` cuts what is kept of a written object to what its store keeps."""

    def __init__(self, project: Callable[[dict[str, Any]], dict[str, Any]] = project) -> None:
        self._project = project
        self._entries: dict[K, tuple[str | None, dict[str, Any]]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, key: K, stored: dict[str, Any] | None, obj: dict[str, Any]) -> None:
        """``obj`` is newer than ``stored``, what the store holds now (None: nothing)."""
        self._entries[key] = (version_of(stored), self._project(obj))

    def clear(self) -> None:
        self._entries.clear()

    def prune(self, exists: Callable[[K], bool]) -> None:
        """Drop the entries of objects gone from the store (a deletion leaves no version to compare)."""
        for gone in [key for key in self._entries if not exists(key)]:
            del self._entries[gone]

    def get(self, key: K, stored: dict[str, Any] | None) -> dict[str, Any] | None:
        entry = self._entries.get(key)
        if entry is None:
            return stored
        if version_of(stored) == entry[0]:
            return entry[1]
        del self._entries[key]
        return stored


class OverlayFacts(ClusterFacts):
    """The facts a plan reads, from the stores' indexes (nothing is copied per event) seen through
    the overlay."""

    def __init__(self, stores: dict[kube.Resource, Store], overlay: Overlay[tuple[str, str, str, str]]):
        super().__init__()
        self.stores, self.overlay = stores, overlay
        self._by_kind = {(r.api_version, r.kind): s for r, s in stores.items()}

    def stored(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object as its informer's store holds it."""
        store = self._by_kind.get((api_version, kind))
        return store.get(namespace, name) if store else None

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object as the worker knows it: the overlay's while the store has not caught up."""
        return self.overlay.get((api_version, kind, namespace, name), self.stored(api_version, kind, namespace, name))

    def hpas_for(self, namespace: str, name: str) -> list[dict[str, Any]]:
        store = self.stores.get(kube.HPAS)
        return store.by_index("target", (namespace, name)) if store else []

    def runtime(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """Rule T7: the Trainer runtime from the controller's own watch (a ClusterTrainingRuntime is stored under the
        namespace ``""``)."""
        return self.stored(kube.TRAINJOBS.api_version, kind, "" if kind == CLUSTER_TRAINING_RUNTIME else namespace,
                           name)

    def podgroup(self, api_version: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.get(api_version, "PodGroup", namespace, name)

    def native_gang_object(self, kind: str, namespace: str, name: str,
                           api_version: str | None = None) -> dict[str, Any] | None:
        versions = [api_version] if api_version else [r.api_version for r in kube.NATIVE_GANG if r.kind == kind]
        return next((found for v in versions if (found := self.get(v, kind, namespace, name)) is not None), None)
