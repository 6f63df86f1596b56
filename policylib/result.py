"""What every policy returns (:class:`Result`) and the builder every policy fills (:class:`Outcome`);
the preamble every policy starts with is :func:`policylib.request.admission`."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

DOMAIN = "policylib.io"
#: Label or annotation ``policylib.io/skip: "true"`` opts an object out of every policy (rule P1).
SKIP_KEY = f"{DOMAIN}/skip"


@dataclass
class Result:
    """The outcome of applying policies to one object.

    ``object`` is the mutated copy (the input itself when nothing changed);
    ``patch`` the RFC 6902 operations from the input to it (empty when
    unchanged); ``reasons`` are informational; ``warnings`` are things a user
    must act on; ``extra_objects`` are objects a policy wants to exist beside
    this one (shown by preview, created by the controller, never by the
    webhook); ``denial``, when set, is why the object must be rejected (a
    policy configured to deny rather than warn): the webhook answers
    ``allowed: false`` with it and preview exits non-zero; ``unhandled``, when set, is why no policy read
    the object at all: its kind is none a family handles (rule P9), as opposed to a policy that looked
    and found nothing to do.
    """

    object: dict[str, Any]
    patch: list[dict[str, Any]] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    extra_objects: list[dict[str, Any]] = field(default_factory=list)
    denial: str | None = None
    unhandled: str | None = None

    @property
    def changed(self) -> bool:
        return bool(self.patch)


@dataclass
class Outcome:
    """The notes a policy gathers while it decides, turned into a :class:`Result` at the end."""

    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    denial: str | None = None

    def reason(self, *texts: str) -> None:
        self.reasons.extend(texts)

    def warn(self, *texts: str) -> None:
        self.warnings.extend(texts)

    def note(self, text: str, ok: bool) -> None:
        """A reason when ``ok``, else a warning."""
        (self.reasons if ok else self.warnings).append(text)

    def violation(self, message: str, deny: bool) -> None:
        """A rule violation: the denial when the policy is set to deny, else a warning."""
        if deny:
            self.denial = message
        else:
            self.warnings.append(message)

    def merge(self, other: Outcome) -> None:
        """Take ``other``'s notes after this one's (a step whose notes count only if it is kept)."""
        self.reasons += other.reasons
        self.warnings += other.warnings
        self.denial = other.denial or self.denial

    def result(self, obj: dict[str, Any], patch: Sequence[dict[str, Any]] = (), extra: Iterable[dict[str, Any]] = ()) -> Result:
        return Result(obj, list(patch), list(self.reasons), list(self.warnings), list(extra), self.denial)


def is_opted_out(obj: dict[str, Any]) -> bool:
    """Rule P1: label or annotation ``policylib.io/skip: "true"`` opts an object out."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return False
    for k in ("labels", "annotations"):
        values = meta.get(k)
        if isinstance(values, dict) and SKIP_KEY in values and str(values[SKIP_KEY]).lower() == "true":
            return True
    return False
