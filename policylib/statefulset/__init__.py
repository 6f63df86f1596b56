"""StatefulSets (``apps/v1``): the zone and host spread of Deployments (rules A1-A6).

``shape`` checks the fields a StatefulSet adds to what the spread reads (rule A1); ``mutate`` is the admission
policy (rules A2-A6), which writes through :func:`policylib.spread.mutate_workload`.
"""
from __future__ import annotations

from .mutate import is_statefulset, mutate_statefulset
from .shape import statefulset_errors

__all__ = ["is_statefulset", "mutate_statefulset", "statefulset_errors"]
