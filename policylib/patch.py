"""Copy-on-write edits and RFC 6902 patches made by diffing owned subtrees.

Policies never build patch operations by hand (controller-runtime's
``PatchResponseFromRaw`` is the model): they edit a :class:`Draft` of the
object, and :func:`diff_owned` compares the original and the edited copy at
the paths the policy owns. A draft copies only the mappings along the paths
it writes, so the original is never changed and a large object is not
deep-copied; an unchanged object yields an empty patch.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any, Iterable, Sequence

Path = Sequence[str]
#: A path to a subtree a policy owns; list indexes are ints.
OwnedPath = Sequence[str | int]


def escape_token(token: object) -> str:
    """JSON Pointer escaping (RFC 6901): ``~`` then ``/``."""
    token = str(token)
    if "~" in token or "/" in token:
        return token.replace("~", "~0").replace("/", "~1")
    return token


class Draft:
    """A copy-on-write view of a JSON object.

    ``dict_at(path)`` returns a mapping at ``path`` that is safe to change:
    every mapping from the root down to it is a fresh shallow copy, made once
    and reused. Subtrees that are not written stay shared with the original.
    """

    def __init__(self, original: dict[str, Any]):
        self.original = original
        self.root = dict(original)
        self._fresh = {id(self.root)}

    def get(self, path: Path, default: Any = None) -> Any:
        node: Any = self.root
        for key in path:
            if not isinstance(node, dict) or key not in node:
                return default
            node = node[key]
        return node

    def dict_at(self, path: Path) -> dict[str, Any]:
        node = self.root
        for key in path:
            child = node.get(key)
            if not isinstance(child, dict):
                child = {}
                node[key] = child
                self._fresh.add(id(child))
            elif id(child) not in self._fresh:
                child = dict(child)
                self._fresh.add(id(child))
                node[key] = child
            node = child
        return node

    def set(self, path: Path, value: Any) -> None:
        self.dict_at(path[:-1])[path[-1]] = value

    def delete(self, path: Path) -> None:
        """Remove the key at ``path`` if present, creating nothing on the way."""
        if self.get(path, _MISSING) is _MISSING:
            return
        self.dict_at(path[:-1]).pop(path[-1], None)

    def prune_empty(self, path: Path) -> None:
        """Delete the mapping at ``path`` and each ancestor up to ``path[0]`` left empty."""
        for end in range(len(path), 0, -1):
            value = self.get(path[:end], _MISSING)
            if value is _MISSING:
                continue
            if value not in ({}, None):
                return
            self.delete(path[:end])


_MISSING = object()


def diff_owned(original: dict[str, Any], mutated: dict[str, Any], owned: Iterable[OwnedPath]) -> list[dict[str, Any]]:
    """Rule P3: the RFC 6902 operations that turn ``original`` into ``mutated`` at ``owned`` paths.

    Mappings are compared key by key; lists and scalars that differ are
    replaced whole. A path may index into a list (``("spec", "tasks", 0,
    "policies")``) when both sides have the same list length there. Where an owned path's parent is missing in the original,
    the first missing mapping is added whole (and only once when several owned
    paths share it). Everything outside the owned paths must be identical; the
    caller guarantees that by editing only through a :class:`Draft`.
    """
    ops: list[dict[str, Any]] = []
    emitted: set[str] = set()
    for path in owned:
        a: Any = original
        b: Any = mutated
        for depth, key in enumerate(path):
            if isinstance(a, dict) and isinstance(b, dict):  # the common case, kept cheap
                a_has, b_has = key in a, key in b
            else:
                a_has, b_has = _has(a, key), _has(b, key)
            if a_has and b_has:
                a, b = a[key], b[key]
                continue
            if a_has or b_has:
                ptr = _pointer(path[:depth + 1])  # built only where an operation may be written
                if not _covered(ptr, emitted):
                    ops.append({"op": "add", "path": ptr, "value": b[key]} if b_has else {"op": "remove", "path": ptr})
                    emitted.add(ptr)
            break
        else:
            if a is not b:  # an unchanged subtree is the same object (a Draft shares what it does not write)
                ptr = _pointer(path)
                if not _covered(ptr, emitted):
                    _diff_values(ptr, a, b, ops)
                    emitted.add(ptr)
    return ops


def _pointer(path: OwnedPath) -> str:
    """The JSON Pointer (RFC 6901) of ``path`` (a policy's owned paths are a few constant tuples: remembered)."""
    if isinstance(path, tuple):
        return _tuple_pointer(path)
    return "".join("/" + escape_token(key) for key in path)


@lru_cache(maxsize=256)
def _tuple_pointer(path: tuple[str | int, ...]) -> str:
    return "".join("/" + escape_token(key) for key in path)


def _has(node: Any, key: Any) -> bool:
    """Mapping keys, and list indexes (paths may name an item of a list, like a task)."""
    if isinstance(node, dict):
        return key in node
    return isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node)


def _covered(ptr: str, emitted: set[str]) -> bool:
    """Whether an operation already written replaces ``ptr`` or one of its ancestors: ``ptr`` and each ancestor
    (the pointer cut before each ``/``; a token's own ``/`` is escaped) looked up in the set of pointers written,
    so the cost is the pointer's length, not the number of operations."""
    if ptr in emitted:
        return True
    end = ptr.find("/")
    while end != -1:
        if ptr[:end] in emitted:
            return True
        end = ptr.find("/", end + 1)
    return False


def _diff_values(ptr: str, a: Any, b: Any, ops: list[dict[str, Any]]) -> None:
    if a == b and type(a) is type(b):
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for key in a:
            if key not in b:
                ops.append({"op": "remove", "path": f"{ptr}/{escape_token(key)}"})
        for key, value in b.items():
            if key not in a:
                ops.append({"op": "add", "path": f"{ptr}/{escape_token(key)}", "value": value})
                continue
            old = a[key]
            if old is value or (type(old) is type(value) and old == value):
                continue  # unchanged (most of a map): no pointer built for it
            _diff_values(f"{ptr}/{escape_token(key)}", old, value, ops)
        return
    ops.append({"op": "replace", "path": ptr, "value": b})
