"""Volcano: its job admission rules and the policy that writes partitions and RestartPartition.

- :mod:`policylib.volcano.admission`: what Volcano's job admission denies (rules V1-V12, V20, V22, V23),
  ported, with field paths; the mutation never returns a Job it would deny.
- :mod:`policylib.volcano.mutation`: the Volcano Job policy (rules V13-V17) and the other Volcano kinds (V19).
- :mod:`policylib.volcano.topology`: the network topology it writes (V25) and the partitions' fit inside one
  HyperNode (V18, V26).

Both are importable from here. The mutation's names load on first use: the configuration's checks read
the admission rules, and the mutation reads the configuration, so importing this package must not
import the mutation.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..constants import VOLCANO_DOMAIN, VOLCANO_JOB_API_VERSION
from .admission import DEFAULT_VOLCANO_VERSION, validate_volcano_job, validate_volcano_job_shape

if TYPE_CHECKING:
    from ..hypernodes import tier_limit
    from .mutation import (
        PARTITION_SIZE_ANNOTATION,
        mutate_other_volcano_kind,
        mutate_volcano_job,
        partition_policy_for,
        partition_size_for,
        restart_partition_policies,
    )
    from .topology import partition_feasibility

JOB_API_VERSION = VOLCANO_JOB_API_VERSION

#: The mutation's names this package serves (loaded by :func:`__getattr__`).
_MUTATION = ("PARTITION_SIZE_ANNOTATION", "mutate_other_volcano_kind", "mutate_volcano_job", "partition_policy_for",
             "partition_size_for", "restart_partition_policies")


def is_volcano_job(obj: object) -> bool:
    """A ``batch.volcano.sh/v1alpha1`` Job."""
    return isinstance(obj, dict) and obj.get("apiVersion") == JOB_API_VERSION and obj.get("kind") == "Job"


def is_volcano_workload(obj: object) -> bool:
    """Other kinds of Volcano's API groups (HyperJob among them)."""
    return isinstance(obj, dict) and str(obj.get("apiVersion", "")).split("/")[0].endswith(VOLCANO_DOMAIN)


def __getattr__(name: str) -> Any:
    """The mutation's names, from :mod:`policylib.volcano.mutation` on first use (PEP 562)."""
    if name in _MUTATION:
        from . import mutation
        return getattr(mutation, name)
    if name == "partition_feasibility":
        from .topology import partition_feasibility
        return partition_feasibility
    if name == "tier_limit":   # the partitions' tier bound (rule V26), shared with the simulator
        from ..hypernodes import tier_limit
        return tier_limit
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["DEFAULT_VOLCANO_VERSION", "JOB_API_VERSION", "PARTITION_SIZE_ANNOTATION", "is_volcano_job",
           "is_volcano_workload", "mutate_other_volcano_kind", "mutate_volcano_job", "partition_feasibility",
           "partition_policy_for", "partition_size_for", "restart_partition_policies", "tier_limit",
           "validate_volcano_job", "validate_volcano_job_shape"]
