"""What gives each group of a LeaderWorkerSet its gang (rules E7, E8).

LWS v0.10.0 gangs groups only through its own controller: with ``gangSchedulingManagement.schedulerProvider:
volcano`` in the LWS controller's Configuration it creates one Volcano PodGroup per group and revision
(``minMember`` = size, 1 under ``startupPolicy: LeaderReady``) and names it on every pod. That setting is the
controller's, not the LeaderWorkerSet's, so policylib cannot see it. policylib writes no gang object for a
LeaderWorkerSet; the reasons say, for the gang scheduler configured, what does or does not gang each group.
"""
from __future__ import annotations

from typing import Any

from ..config import Config
from ..result import Outcome
from .model import LEADER_READY, group_size, startup_policy


def gang_notes(obj: dict[str, Any], config: Config) -> Outcome:
    """Rule E7: one reason naming what gives each group its gang under the configured gang scheduler
    (``gang.method``, ``gang.scheduler``): on Volcano, the LWS controller's own Volcano provider (a setting of the
    LWS controller, which policylib cannot see); on kube-scheduler's native Workload API, Coscheduling
    (scheduler-plugins), Koordinator and ACK, nothing yet: policylib does not write per-group gangs for
    LeaderWorkerSets, so the groups are not gang-scheduled unless the LWS controller does it. Never silent."""
    out = Outcome()
    size = group_size(obj)
    if not config.gang.enabled:
        out.reason("gang.enabled false: no gang for the groups (policylib writes none for LeaderWorkerSets)")
        return out
    method, scheduler = config.gang.method, config.gang.scheduler
    if scheduler == "volcano":
        out.reason(f"gang per group (size {size}): given by the LWS controller's gangSchedulingManagement."
                   "schedulerProvider: volcano (one Volcano PodGroup per group, minMember the group's size; a setting "
                   "of the LWS controller that policylib cannot see); the pods must name schedulerName: volcano; "
                   "policylib writes no gang object for LeaderWorkerSets")
    elif method == "workload":
        out.reason(f"gang per group (size {size}): not written: kube-scheduler's Workload API gangs for "
                   "LeaderWorkerSets are not built by policylib yet, and LWS v0.10.0 makes none; the groups are "
                   "not gang-scheduled")
    else:
        out.reason(f"gang per group (size {size}): not written: {scheduler} gangs (method {method}) for "
                   "LeaderWorkerSets are not built by policylib yet, and LWS v0.10.0 gangs only through "
                   "Volcano; the groups are not gang-scheduled")
    out.warn(*leader_ready_warning(obj, config))
    return out


def leader_ready_warning(obj: dict[str, Any], config: Config) -> list[str]:
    """Rule E8: under ``startupPolicy: LeaderReady`` the workers are created only once the leader is Ready, so a
    gang whose minimum is the group's size can never be met: on Volcano the LWS controller lowers its PodGroup's
    minMember to 1, and the group is then not gang-scheduled (its leader may run while its workers cannot)."""
    if startup_policy(obj) != LEADER_READY or not config.gang.enabled or group_size(obj) <= 1:
        return []
    if config.gang.scheduler == "volcano":
        return ["startupPolicy LeaderReady: the workers wait for a Ready leader, so a gang of the group's size can "
                "never be met: LWS's Volcano provider sets the PodGroup's minMember to 1, and the group is not "
                "gang-scheduled (the leader may run while its workers stay Pending)"]
    return ["startupPolicy LeaderReady: the workers wait for a Ready leader, so a gang of the group's size can never "
            "be met: a group gang must use startupPolicy LeaderCreated"]
