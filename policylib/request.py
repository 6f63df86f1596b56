"""The preamble every policy starts with (:func:`admission`): the settings loaded, the facts defaulted, the
namespace and the object's reference, and the object opted out (rule P1)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .config import Config, load_config
from .errors import object_ref
from .facts import NO_FACTS, ClusterFacts, namespace_of
from .result import SKIP_KEY, Result, is_opted_out


@dataclass(frozen=True)
class Admission:
    """What every policy starts from: the object, the settings, the object before an UPDATE (None on
    CREATE), the cluster facts, the namespace and the ``Kind namespace/name`` for messages."""

    obj: dict[str, Any]
    config: Config
    old: dict[str, Any] | None
    facts: ClusterFacts
    namespace: str
    ref: str


def admission(obj: dict[str, Any], config: Config | Mapping[str, Any] | None, old: dict[str, Any] | None = None,
              facts: ClusterFacts | None = None, namespace: str | None = None) -> tuple[Admission, Result | None]:
    """The common preamble of every policy: settings loaded, facts defaulted, the namespace
    (``namespace`` overrides ``metadata.namespace``) and the object's reference; with the
    result to return at once when the object is opted out (rule P1), else None."""
    ns = namespace or namespace_of(obj)
    request = Admission(obj, load_config(config), old, facts or NO_FACTS, ns, object_ref(obj, ns))
    if is_opted_out(obj):
        return request, Result(obj, reasons=[f"skipped: {SKIP_KEY}=true"])
    return request, None
