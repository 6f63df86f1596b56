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

from .costs import cost_writes, desired_costs
from .pods import DELETION_COST, FIELD_MANAGER, cost_owner, deployment_name, deployment_pods, foreign_cost, node_of, project_pod
from .ranking import pods_to_delete
from .report import cluster_report, scale_report
from .scale import scale_down
from .skew import SpreadNodes, skew_of, spread_violations

__all__ = ["DELETION_COST", "FIELD_MANAGER", "SpreadNodes", "cluster_report", "cost_owner", "cost_writes", "deployment_name",
           "deployment_pods", "desired_costs", "foreign_cost", "node_of", "pods_to_delete", "project_pod", "scale_down",
           "scale_report", "skew_of", "spread_violations"]
