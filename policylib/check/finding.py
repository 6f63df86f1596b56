"""One finding of ``check``: a setting (``key``), its severity and the message naming what is concerned."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Finding:
    severity: str
    key: str
    message: str

    def as_dict(self) -> dict[str, Any]:
        return {"severity": self.severity, "key": self.key, "message": self.message}


def names(items: Iterable[str], limit: int = 5) -> str:
    """The first ``limit`` names, and how many more."""
    items = list(items)
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")
