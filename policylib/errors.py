"""One error hierarchy for policylib: every error names where it happened.

User errors (bad config, bad objects) are instances of :class:`PolicylibError`;
the CLI prints them as one line and the webhook turns them into a fail-open
warning or a denial. Programming errors are left to raise as usual.
"""
from __future__ import annotations

from dataclasses import dataclass


class PolicylibError(ValueError):
    """Base class for every user-facing error raised by policylib."""


class ConfigError(PolicylibError):
    """A setting in the policy configuration is invalid.

    ``path`` is the dotted key path (``hostTopologySpread.maxSkew``), ``message``
    says what is allowed.
    """

    def __init__(self, path: str, message: str, source: str | None = None):
        self.path = path
        self.message = message
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{path}: {message}" if path else f"{where}{message}")


class PolicyError(PolicylibError):
    """An object cannot be handled: names the object, the field and why.

    ``obj_ref`` is ``Kind namespace/name``; ``field`` is a field path such as
    ``spec.replicas``.
    """

    def __init__(self, obj_ref: str, field: str, message: str):
        self.obj_ref = obj_ref
        self.field = field
        self.message = message
        super().__init__(f"{obj_ref}: {field}: {message}" if field else f"{obj_ref}: {message}")


#: The largest value of the API's int32 fields (replicas, maxSkew, minDomains, minMember, ...).
INT32_MAX = 2**31 - 1


def int_field(value: object, ref: str, path: str, minimum: int) -> int:
    """An int32 field of an object (never a bool or a string), at least ``minimum``; else a
    :class:`PolicyError` naming the object and the field."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise PolicyError(ref, path, f"must be an integer, got {value!r}")
    if value < minimum:
        raise PolicyError(ref, path, f"must be >= {minimum}, got {value}")
    if value > INT32_MAX:
        raise PolicyError(ref, path, f"must be at most {INT32_MAX} (int32), got {value}")
    return value


class InputError(PolicylibError):
    """Input the CLI cannot read: a file, bad YAML/JSON, or a document that is not an object."""


@dataclass(frozen=True)
class FieldError:
    """One validation finding, shaped like Kubernetes' ``field.Error``."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def object_ref(obj: object, namespace: str | None = None) -> str:
    """``Kind namespace/name`` for messages; tolerant of malformed objects."""
    if not isinstance(obj, dict):
        return f"<{type(obj).__name__}>"
    kind = obj.get("kind") or "<no kind>"
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    name = meta.get("name") or meta.get("generateName") or "<no name>"
    ns = namespace or meta.get("namespace")
    return f"{kind} {ns}/{name}" if ns else f"{kind} {name}"
