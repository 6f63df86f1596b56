"""Priorities: all pods of a gang share one priority class (rule G9)."""
from __future__ import annotations

from collections.abc import Sequence

from .gangs import GangPlan
from .job import KubeflowJob, ReplicaType


def and_list(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def priority_conflict(members: Sequence[ReplicaType], of_gang: str = "") -> str | None:
    """Rule G9: the replica types of one gang (or GangGroup) with pods must share one
    priorityClassName; a missing one means the cluster default. The conflict, or None."""
    if len({t.priority_class for t in members}) <= 1:
        return None
    listing = ", ".join(f"{t.key}: {t.priority_class or '<none: cluster default>'}" for t in members)
    return (f"replica types {and_list([t.key for t in members])}{of_gang} have different priorityClassName "
            f"({listing})")


def priority_violation(job: KubeflowJob, plan: GangPlan) -> str | None:
    """Rule G9 for the gangs policylib would write.

    Gangs of a GangGroup are bound together, so the whole plan must share one
    priorityClassName. Replica types with 0 replicas create no pods and do not count.
    """
    members = [t for t in job.types if t.replicas > 0 and plan.gang_of(t.key) is not None]
    conflict = priority_conflict(members)
    if conflict is None:
        return None
    what = "the gang group" if plan.groups else f"gang {plan.gangs[0].name}"
    return f"{conflict}; all pods of {what} must share one priority (rule G9), so no gang metadata was written"
