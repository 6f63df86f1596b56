"""Reading and writing Kubernetes objects as YAML or JSON documents.

Multi-document YAML, JSON, and ``kind: List`` (what ``kubectl get -o yaml``
prints) are all read into a flat list of objects, each remembering where it
came from so that errors can name the file and the document.
"""
from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import yaml

from .errors import InputError

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


@dataclass(frozen=True)
class Document:
    """One object and where it came from (``source`` is a file name or ``-``)."""

    obj: dict[str, Any]
    source: str
    index: int


def yaml_problem(e: yaml.YAMLError) -> str:
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or str(e)
    return f"line {mark.line + 1} column {mark.column + 1}: {problem}" if mark else problem


@contextmanager
def no_gc() -> Iterator[None]:
    """Parsing builds many small containers and no cycles; the cyclic GC's repeated
    passes over them cost more than the parse itself on large snapshots (files, and the
    live cluster's pages: :func:`policylib.shell.kube.snapshot`)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def parse_documents(text: str, source: str) -> list[Document]:
    """Every object in ``text``; ``kind: List`` is expanded into its items.

    Raises :class:`InputError` naming the source and document for
    invalid YAML/JSON or a document that is not an object.
    """
    stripped = text.lstrip()
    try:
        with no_gc():
            raw = None
            if stripped.startswith(("{", "[")):
                try:
                    loaded = json.loads(text)
                    raw = loaded if isinstance(loaded, list) else [loaded]
                except json.JSONDecodeError:
                    raw = None  # flow-style YAML such as {apiVersion: v1, ...}
            if raw is None:
                raw = list(yaml.load_all(text, Loader=_Loader))
    except yaml.YAMLError as e:
        raise InputError(f"{source}: invalid YAML: {yaml_problem(e)}") from None
    docs: list[Document] = []
    for i, obj in enumerate(raw, start=1):
        if obj is None:
            continue
        if not isinstance(obj, dict):
            raise InputError(f"{source}: document {i}: expected a Kubernetes object (a mapping), "
                                    f"got {type(obj).__name__}")
        if is_list(obj):
            items = obj.get("items") or []
            if not isinstance(items, list):
                raise InputError(f"{source}: document {i}: {obj.get('kind')}.items must be a list")
            for j, item in enumerate(items):
                if not isinstance(item, dict):
                    raise InputError(f"{source}: document {i}: items[{j}] is not an object")
                docs.append(Document(item, source, len(docs) + 1))
        else:
            docs.append(Document(obj, source, len(docs) + 1))
    return docs


def is_list(obj: dict[str, Any]) -> bool:
    """``v1 List`` and typed lists such as ``DeploymentList`` (items, no spec)."""
    kind = str(obj.get("kind", ""))
    return kind.endswith("List") and "items" in obj and "spec" not in obj


def dump_yaml(obj: object) -> str:
    """Block-style YAML keeping the object's key order."""
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True)

