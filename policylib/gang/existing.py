"""Gang metadata a job already carries: is it consistent (rule G10)?"""
from __future__ import annotations

from typing import Any

from ..config import GangSettings
from .job import KubeflowJob, ReplicaType
from .keys import GROUPS_KEYS, MIN_KEYS, NAME_KEYS, NAME_KEYS_READ
from .metadata import first_key
from .priority import and_list, priority_conflict

Found = tuple[str, object] | None  # (key, value) of the first key found on a template


def ungrouped_types(names: dict[str, Found]) -> list[str]:
    """Templates with pods that carry no gang name while others do: their pods are in no gang."""
    missing = [k for k, n in names.items() if n is None]
    if not missing or len(missing) == len(names):
        return []
    return [f"replica types {and_list(missing)} carry no gang name while "
            f"{and_list([k for k in names if names[k]])} do: their pods are in no gang"]


def minimum_findings(gang: str, members: list[ReplicaType], current: dict[str, Any]) -> list[str]:
    """One gang's min-available: the same on every template, a whole number >= 1, at most its pods."""
    out = []
    mins = {t.key: first_key(current[t.key], MIN_KEYS) for t in members}
    values = {m[1] for m in mins.values() if m}
    if len(values) > 1:
        out.append(f"gang {gang} has different min-available on its templates ("
                   + ", ".join(f"{k}: {m[1]}" for k, m in mins.items() if m) + ")")
    for key, m in mins.items():
        if m and not (isinstance(m[1], str) and m[1].isdigit() and int(m[1]) >= 1):
            out.append(f"{m[0]} {m[1]!r} on {key} is not a whole number >= 1")
    pods = sum(t.replicas for t in members)
    numeric = [int(v) for v in values if isinstance(v, str) and v.isdigit()]
    if len(values) == 1 and numeric and numeric[0] > pods:
        out.append(f"gang {gang} needs min-available {numeric[0]} but the job creates only {pods} pod(s) for it: "
                   "it can never start")
    return out


def group_findings(names: dict[str, Found], current: dict[str, Any]) -> list[str]:
    """The GangGroup annotation is identical on every member template."""
    groups = {k: first_key(current[k], GROUPS_KEYS) for k, n in names.items() if n}
    if len(set(groups.values())) <= 1:
        return []
    return ["the GangGroup annotation differs between templates ("
            + ", ".join(f"{k}: {g[1] if g else '<none>'}" for k, g in groups.items())
            + "); it must be identical on every member"]


def unread_key_findings(names: dict[str, Found], settings: GangSettings) -> list[str]:
    """At least one gang key is one the configured scheduler reads."""
    found = sorted({n[0] for n in names.values() if n})
    if not found or NAME_KEYS_READ[settings.scheduler].intersection(found):
        return []
    return [f"its gang keys ({', '.join(found)}) are not read by scheduler {settings.scheduler}: "
            "these pods are not gang-scheduled by it"]


def existing_metadata_findings(job: KubeflowJob, current: dict[str, Any], settings: GangSettings) -> tuple[list[str], str | None]:
    """Rule G10: warnings about gang metadata a job already carries, and a priority violation (rule G9)
    if any.

    Inconsistent means a scheduler would not gang the pods as the metadata
    seems to intend: templates with pods left out of every gang, one gang with
    two different minimums, a minimum that is not a whole number or exceeds
    the gang's pods, GangGroup annotations that differ between templates, or
    no key the configured scheduler reads.
    """
    with_pods = [t for t in job.types if t.replicas > 0]
    names = {t.key: first_key(current[t.key], NAME_KEYS) for t in with_pods}
    by_gang: dict[str, list[ReplicaType]] = {}
    for t in with_pods:
        found = names[t.key]
        if found:
            by_gang.setdefault(str(found[1]), []).append(t)
    warnings = ungrouped_types(names)
    violation = None
    for gang, members in by_gang.items():
        warnings += minimum_findings(gang, members, current)
        conflict = priority_conflict(members, f" of gang {gang}")
        if conflict and violation is None:
            violation = f"{conflict}; all pods of a gang must share one priority (rule G9)"
    warnings += group_findings(names, current) + unread_key_findings(names, settings)
    return warnings, violation
