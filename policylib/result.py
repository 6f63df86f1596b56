"""What every policy returns: the mutated copy, the patch, and why."""
from __future__ import annotations

from dataclasses import dataclass, field


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
    ``allowed: false`` with it and preview exits non-zero.
    """

    object: dict
    patch: list[dict] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    extra_objects: list[dict] = field(default_factory=list)
    denial: str | None = None

    @property
    def changed(self) -> bool:
        return bool(self.patch)
