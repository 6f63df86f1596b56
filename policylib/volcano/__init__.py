"""Volcano: the policy that writes partitions and RestartPartition on Volcano Jobs, above the configuration it
reads; Volcano's own API rules (its job admission among them) are :mod:`policylib.volcano_api`, below it.

- :mod:`policylib.volcano.mutation`: the Volcano Job policy (rules V13-V17) and the other Volcano kinds (V19).
- :mod:`policylib.volcano.topology`: the network topology it writes (V25) and the partitions' fit inside one
  HyperNode (V18, V26).

This package's face names the kinds and nothing of the mutation, which the family registry imports from its
own module (:mod:`policylib.volcano.mutation`).
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
