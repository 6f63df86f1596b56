"""StatefulSets (``apps/v1``): the zone and host spread of Deployments (rules A1-A8).

``shape`` checks the fields a StatefulSet adds to what the spread reads (rule A1); ``mutate`` is the admission
policy (rules A2-A6), which writes through :func:`policylib.spread.mutate_workload`; ``volumes`` reads where a
StatefulSet's bound PersistentVolumes let each ordinal run (rules A7, A8).
"""
from __future__ import annotations

from .mutate import is_statefulset, mutate_statefulset
from .shape import statefulset_errors
from .volumes import VolumePins, bound_volumes, is_claim, is_volume, pinned_zones, pv_nodes, volume_pins

__all__ = ["VolumePins", "bound_volumes", "is_claim", "is_statefulset", "is_volume", "mutate_statefulset",
           "pinned_zones", "pv_nodes", "statefulset_errors", "volume_pins"]
