"""Volcano: its job admission rules and the policy that writes partitions and RestartPartition.

- :mod:`policylib.volcano.admission`: what Volcano's job admission denies (rules V1-V12, V20, V22, V23),
  ported, with field paths; the mutation never returns a Job it would deny.
- :mod:`policylib.volcano.mutation`: the Volcano Job policy (rules V13-V17) and the other Volcano kinds (V19).
- :mod:`policylib.volcano.topology`: the network topology it writes (V25) and the partitions' fit inside one
  HyperNode (V18, V26).

This package's face names the kinds and nothing of the mutation: the configuration's checks read the admission
rules (through :mod:`policylib.validation`) and the mutation reads the configuration, so the mutation is imported
from its own module (:mod:`policylib.volcano.mutation`) by the family registry.
"""
from __future__ import annotations

from ..constants import VOLCANO_DOMAIN, VOLCANO_JOB_API_VERSION


def is_volcano_job(obj: object) -> bool:
    """A ``batch.volcano.sh/v1alpha1`` Job."""
    return isinstance(obj, dict) and obj.get("apiVersion") == VOLCANO_JOB_API_VERSION and obj.get("kind") == "Job"


def is_volcano_workload(obj: object) -> bool:
    """Other kinds of Volcano's API groups (HyperJob among them)."""
    return isinstance(obj, dict) and str(obj.get("apiVersion", "")).split("/")[0].endswith(VOLCANO_DOMAIN)


__all__ = ["is_volcano_job", "is_volcano_workload"]
