"""Spread-aware scale-down (rules S23 to S28): the pod deletion costs that make the ReplicaSet controller
remove the pods of the most-populated zone first, its choice of victims replayed (``simulate --scale``), and
the zone and host skew a Deployment's pods have now (``check --cluster``, ``plan --cluster``, the
controller's ``SpreadViolated``).

The modules, by job: ``pods`` (what the rules read of a Pod, and the pod watch's projection, S27), ``costs``
(the deletion costs, S23-S25), ``ranking`` (the ReplicaSet controller's choice of victims, S26), ``skew``
(the skew now, S28), ``scale`` (``simulate --scale``, S26) and ``report`` (what the commands print). The
names the CLI, the controller and the tests use are exported here, as :mod:`policylib.spread` does.
"""
from __future__ import annotations

from .costs import CostWrite, cost_writes, costs_as_they_are, desired_costs, zone_levels
from .pods import (
    DELETION_COST,
    FIELD_MANAGER,
    POD_FIELDS,
    cost_owner,
    current_cost,
    deployment_name,
    deployment_pods,
    foreign_cost,
    is_active,
    node_of,
    owner_uid,
    parse_cost,
    project_pod,
)
from .ranking import pods_to_delete, rank_less
from .report import cluster_report, is_managed, scale_report, scale_table
from .scale import ScaleDown, scale_down
from .skew import Violation, skew_of, spread_violations

__all__ = ["DELETION_COST", "FIELD_MANAGER", "POD_FIELDS", "CostWrite", "ScaleDown", "Violation", "cluster_report",
           "cost_owner", "cost_writes", "costs_as_they_are", "current_cost", "deployment_name", "deployment_pods",
           "desired_costs", "foreign_cost", "is_active", "is_managed", "node_of", "owner_uid",
           "parse_cost", "pods_to_delete", "project_pod", "rank_less", "scale_down", "scale_report", "scale_table",
           "skew_of", "spread_violations", "zone_levels"]
