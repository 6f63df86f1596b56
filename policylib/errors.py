"""One error hierarchy for policylib: every error names where it happened.

User errors (bad config, bad objects) are instances of :class:`PolicylibError`;
the CLI prints them as one line and the webhook turns them into a fail-open
warning or a denial. Programming errors are left to raise as usual.

Field errors follow the API server's ``field.Path`` and ``field.Error``
(k8s.io/apimachinery/pkg/util/validation/field): a validator returns a list of
:class:`FieldError`, each with a type, a :class:`FieldPath`, the bad value and a
detail, rendered as the API server renders them
(``spec.tasks[0].replicas: Invalid value: "x": must be an integer``). A policy that
cannot proceed raises one :class:`PolicyError` carrying every error it found.
"""
from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard


class PolicylibError(ValueError):
    """Base class for every user-facing error raised by policylib."""


#: Rule P8: the most characters of a client's value one message quotes (a bad value, a map key in a field path, a
#: name in a detail); the rest is cut and marked ``...``. What a client sends may be megabytes: a message never
#: grows with it.
MAX_QUOTED_CHARS = 64
#: The longest object name a message quotes whole (the API's longest name, a DNS subdomain of 253 characters).
MAX_NAME_CHARS = 253
#: The most field errors one message lists; the rest are counted (``..., and 39980 more``).
MAX_LISTED_ERRORS = 20


def cut(text: str, limit: int = MAX_QUOTED_CHARS) -> str:
    """Rule P8: at most ``limit`` characters of ``text``, ``...`` marking a cut."""
    return text if len(text) <= limit else text[:limit] + "..."


class FieldPath:
    """A field path as the API server builds and prints it (``field.Path``).

    ``FieldPath("spec").child("tasks").index(0).child("name")`` renders
    ``spec.tasks[0].name``; ``key("app")`` renders ``[app]`` (map keys are not quoted).
    Immutable: every step returns a new path.
    """

    __slots__ = ("_parent", "_name", "_index")

    def __init__(self, name: str = "", *more: str) -> None:
        root = FieldPath._node(None, name, None) if more else None
        for part in more[:-1]:
            root = FieldPath._node(root, part, None)
        self._parent: FieldPath | None = root
        self._name = more[-1] if more else name
        self._index: str | None = None

    @staticmethod
    def _node(parent: FieldPath | None, name: str, index: str | None) -> FieldPath:
        node = FieldPath.__new__(FieldPath)
        node._parent, node._name, node._index = parent, name, index
        return node

    def _step(self, name: str, index: str | None) -> FieldPath:
        return FieldPath._node(self, name, index)

    def child(self, name: str, *more: str) -> FieldPath:
        """``name`` (and ``more``) under this path: ``spec`` -> ``spec.template.spec``."""
        path = self._step(name, None)
        for part in more:
            path = path._step(part, None)
        return path

    def index(self, i: int) -> FieldPath:
        """A list element: ``containers`` -> ``containers[0]``."""
        return self._step("", str(i))

    def key(self, k: str) -> FieldPath:
        """A map entry: ``labels`` -> ``labels[app]`` (a key past 64 characters cut: rule P8)."""
        return self._step("", cut(str(k)))

    def __str__(self) -> str:
        elems: list[FieldPath] = []
        node: FieldPath | None = self
        while node is not None:
            elems.append(node)
            node = node._parent
        out = []
        for p in reversed(elems):
            if p._index is not None:
                out.append(f"[{p._index}]")
            elif p._name:
                out.append(("." if out else "") + p._name)
        return "".join(out)

    def __repr__(self) -> str:
        return f"FieldPath({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, (FieldPath, str)) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))


Path = FieldPath | str


class ErrorType(enum.Enum):
    """The API server's field error types: the machine-readable reason and how it prints."""

    REQUIRED = ("FieldValueRequired", "Required value")
    INVALID = ("FieldValueInvalid", "Invalid value")
    NOT_SUPPORTED = ("FieldValueNotSupported", "Unsupported value")
    FORBIDDEN = ("FieldValueForbidden", "Forbidden")
    TOO_LONG = ("FieldValueTooLong", "Too long")
    TOO_MANY = ("FieldValueTooMany", "Too many")
    DUPLICATE = ("FieldValueDuplicate", "Duplicate value")

    @property
    def reason(self) -> str:
        return self.value[0]

    def __str__(self) -> str:
        return self.value[1]


#: The types whose message never shows the value (errors.go ErrorBody).
_VALUE_HIDDEN = (ErrorType.REQUIRED, ErrorType.FORBIDDEN, ErrorType.TOO_LONG)


def render_value(value: object) -> str:
    """A bad value as ErrorBody prints it: numbers and booleans plainly, strings quoted, null
    for None; other values (maps, lists) as JSON, where Go would print its own syntax. Rule P8: at
    most :data:`MAX_QUOTED_CHARS` characters of it (a string's first ones, quoted, then ``...``),
    and no more of a large value is rendered than that."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        try:
            return cut(str(value))
        except ValueError:  # an integer past Python's digit limit for str()
            return f"<an integer of {int(value).bit_length()} bits>"
    if isinstance(value, str):
        text = json.dumps(value[:MAX_QUOTED_CHARS], ensure_ascii=False)
        return text + "..." if len(value) > MAX_QUOTED_CHARS else text
    return _bounded_json(value)


def _bounded_json(value: object) -> str:
    """A map or list as JSON with sorted keys, encoded only until :data:`MAX_QUOTED_CHARS` characters are out
    (the encoder yields its text piece by piece)."""
    pieces: list[str] = []
    length = 0
    try:
        # a map too large to be quoted whole is not sorted first (that alone would grow with it)
        sort = not (isinstance(value, dict) and len(value) > MAX_QUOTED_CHARS)
        for piece in json.JSONEncoder(ensure_ascii=False, sort_keys=sort, default=repr).iterencode(value):
            pieces.append(piece)
            length += len(piece)
            if length > MAX_QUOTED_CHARS:
                break
        return cut("".join(pieces))
    except (TypeError, ValueError, RecursionError):
        return cut(repr(value)) if not isinstance(value, (dict, list)) else f"<a {type(value).__name__}>"


@dataclass(frozen=True)
class FieldError:
    """Rule P6: one finding about one field, shaped like the API server's ``field.Error``."""

    type: ErrorType
    field: str
    value: object = None
    detail: str = ""

    @property
    def message(self) -> str:
        """The error without the field (ErrorBody): ``Invalid value: "x": detail``."""
        body = str(self.type) if self.type in _VALUE_HIDDEN else f"{self.type}: {render_value(self.value)}"
        return f"{body}: {self.detail}" if self.detail else body

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"

    def under(self, prefix: str) -> FieldError:
        """The same error with its field named below ``prefix`` (an object beside the one checked)."""
        return FieldError(self.type, f"{prefix}.{self.field}", self.value, self.detail)


def required(path: Path, detail: str = "") -> FieldError:
    return FieldError(ErrorType.REQUIRED, str(path), "", detail)


def invalid(path: Path, value: object, detail: str) -> FieldError:
    return FieldError(ErrorType.INVALID, str(path), value, detail)


def not_supported(path: Path, value: object, supported: Sequence[str]) -> FieldError:
    detail = "supported values: " + ", ".join(json.dumps(v) for v in supported) if supported else ""
    return FieldError(ErrorType.NOT_SUPPORTED, str(path), value, detail)


def forbidden(path: Path, detail: str) -> FieldError:
    return FieldError(ErrorType.FORBIDDEN, str(path), "", detail)


def too_many(path: Path, actual: int, max_items: int) -> FieldError:
    """A list longer than its limit (field.TooMany): ``Too many: 20000: must have at most 1000 items``."""
    return FieldError(ErrorType.TOO_MANY, str(path), actual, f"must have at most {max_items} "
                                                             f"{'item' if max_items == 1 else 'items'}")


def duplicate(path: Path, value: object, detail: str = "") -> FieldError:
    return FieldError(ErrorType.DUPLICATE, str(path), value, detail)


def errors_not_in(errors: Iterable[FieldError], known: Iterable[FieldError]) -> list[FieldError]:
    """The errors of ``errors`` that are not in ``known`` (as ``e not in known`` decides), in order; ``known`` is
    indexed by type, field and detail first, so the cost grows with the errors, not with their product."""
    index: dict[tuple[ErrorType, str, str], list[object]] = {}
    for e in known:
        index.setdefault((e.type, e.field, e.detail), []).append(e.value)
    return [e for e in errors if not any(v == e.value for v in index.get((e.type, e.field, e.detail), ()))]


def render_errors(errors: Sequence[FieldError]) -> str:
    """One error as itself; several as the API server aggregates them: ``[a, b]``; past
    :data:`MAX_LISTED_ERRORS`, the first ones and how many more (rule P8)."""
    if len(errors) == 1:
        return str(errors[0])
    listed = ", ".join(map(str, errors[:MAX_LISTED_ERRORS]))
    more = len(errors) - MAX_LISTED_ERRORS
    return "[" + listed + (f", and {more} more" if more > 0 else "") + "]"


def _setting_message(error: FieldError) -> str:
    """A setting's error without the type word where the API server would show no value: the
    configuration is our own document, and ``Forbidden:`` before a sentence adds nothing."""
    return error.detail if error.type in _VALUE_HIDDEN and error.detail else error.message


class ConfigError(PolicylibError):
    """A setting in the policy configuration is invalid.

    ``path`` is the dotted key path (``hostTopologySpread.maxSkew``), ``message``
    says what is allowed. ``errors`` lists every field error when a check found several.
    """

    def __init__(self, path: str, message: str, source: str | None = None,
                 errors: Sequence[FieldError] = ()):
        self.path = path
        self.message = message
        self.source = source
        self.errors = list(errors)
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{path}: {message}" if path else f"{where}{message}")

    @classmethod
    def from_errors(cls, errors: Sequence[FieldError], prefix: str = "") -> ConfigError:
        """One ConfigError carrying ``errors`` (at least one); the first names ``path``."""
        first = errors[0]
        rest = "".join(f"; {prefix}{e.field}: {_setting_message(e)}" for e in errors[1:])
        return cls(prefix + first.field, _setting_message(first) + rest, errors=errors)


class PolicyError(PolicylibError):
    """An object cannot be handled: names the object, the field and why.

    ``obj_ref`` is ``Kind namespace/name``; ``field`` is a field path such as
    ``spec.replicas`` and ``message`` its error, both of the first error;
    ``errors`` lists every :class:`FieldError` found.
    """

    def __init__(self, obj_ref: str, field: str, message: str, errors: Sequence[FieldError] = ()):
        self.obj_ref = obj_ref
        self.field = field
        self.message = message
        self.errors = list(errors)
        if len(self.errors) > 1:
            super().__init__(f"{obj_ref}: {render_errors(self.errors)}")
        else:
            super().__init__(f"{obj_ref}: {field}: {message}" if field else f"{obj_ref}: {message}")

    @classmethod
    def from_errors(cls, obj_ref: str, errors: Sequence[FieldError]) -> PolicyError:
        """One PolicyError carrying ``errors`` (at least one)."""
        return cls(obj_ref, errors[0].field, errors[0].message, errors)


def raise_if_any(obj_ref: str, errors: Iterable[FieldError]) -> None:
    """Rule P5: raise one :class:`PolicyError` carrying every error, when there is one."""
    found = list(errors)
    if found:
        raise PolicyError.from_errors(obj_ref, found)


#: The largest value of the API's int32 fields (replicas, maxSkew, minDomains, minMember, ...).
INT32_MAX = 2**31 - 1


def is_int(value: object) -> TypeGuard[int]:
    """An integer that is not a bool (JSON's numbers, as the API reads them)."""
    return isinstance(value, int) and not isinstance(value, bool)


def int32_errors(value: object, path: Path, minimum: int) -> list[FieldError]:
    """An int32 field (never a bool or a string) of at least ``minimum``."""
    if not is_int(value):
        return [invalid(path, value, "must be an integer")]
    assert isinstance(value, int)
    if value < minimum:
        return [invalid(path, value, f"must be greater than or equal to {minimum}")]
    if value > INT32_MAX:
        return [invalid(path, value, f"must be less than or equal to {INT32_MAX} (int32)")]
    return []


def int_field(value: object, ref: str, path: Path, minimum: int) -> int:
    """An int32 field of an object, at least ``minimum``; else a :class:`PolicyError`
    naming the object and the field."""
    raise_if_any(ref, int32_errors(value, path, minimum))
    assert isinstance(value, int)
    return value


def map_errors(value: object, path: Path) -> list[FieldError]:
    """A map, when set (labels, annotations, metadata)."""
    if value is None or isinstance(value, dict):
        return []
    return [invalid(path, value, "must be a map")]



def as_path(path: Path) -> FieldPath:
    """``path`` as a :class:`FieldPath` (validators take either a path or its text)."""
    return path if isinstance(path, FieldPath) else FieldPath(path)


def object_items(items: list[Any], path: FieldPath, errs: list[FieldError]) -> Iterator[tuple[int, FieldPath, dict[str, Any]]]:
    """The items of a list field that are objects, with their index and path; an item that is not
    an object is an error added to ``errs``, in order."""
    for i, item in enumerate(items):
        if isinstance(item, dict):
            yield i, path.index(i), item
        else:
            errs.append(invalid(path.index(i), item, "must be an object"))

class InputError(PolicylibError):
    """Input the CLI cannot read: a file, bad YAML/JSON, or a document that is not an object."""


def object_ref(obj: object, namespace: str | None = None) -> str:
    """``Kind namespace/name`` for messages; tolerant of malformed objects."""
    if not isinstance(obj, dict):
        return f"<{type(obj).__name__}>"
    kind = cut(str(obj.get("kind") or "<no kind>"))
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    name = cut(str(meta.get("name") or meta.get("generateName") or "<no name>"), MAX_NAME_CHARS)
    ns = namespace or meta.get("namespace")
    return f"{kind} {cut(str(ns), MAX_NAME_CHARS)}/{name}" if ns else f"{kind} {name}"
