"""PodGroups for method podgroup."""
from __future__ import annotations

from typing import Any

from ..config import GangSettings
from .gangs import Gang, GangPlan, podgroup_timeout
from .job import KubeflowJob
from .keys import PODGROUP_API_VERSION
from .match import groups_key, groups_value, match_policy_key
from .metadata import Meta


def build_podgroups(job: KubeflowJob, plan: GangPlan, settings: GangSettings,
                    network_topology: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Rule G5: the PodGroups of method podgroup, in the job's namespace.

    ``apiVersion`` is the one the scheduler watches; ``minMember`` the gang's
    minimum; match policy and groups go on the PodGroup where the scheduler
    reads them there. A Volcano PodGroup carries ``network_topology`` (rule N5), the gang placement in Volcano's
    words.
    """
    if settings.method != "podgroup":
        return []
    out = []
    for gang in plan.gangs:
        meta = Meta()
        where = match_policy_key(settings, on_podgroup=True)
        if where:
            meta.put(*where, settings.matchPolicy)
        if plan.groups:
            meta.put("annotations", groups_key(settings), groups_value(plan))
        metadata: dict[str, Any] = {"name": gang.name, "namespace": plan.namespace}
        if meta.labels:
            metadata["labels"] = meta.labels
        if meta.annotations:
            metadata["annotations"] = meta.annotations
        spec = dict(volcano_podgroup_spec(job, gang), **({"networkTopology": dict(network_topology)}
                                                         if network_topology else {})) \
            if settings.scheduler == "volcano" else \
            {"scheduleTimeoutSeconds": podgroup_timeout(job, settings), "minMember": gang.min_available}
        out.append({"apiVersion": PODGROUP_API_VERSION[settings.scheduler], "kind": "PodGroup", "metadata": metadata,
                    "spec": spec})
    return out


def volcano_podgroup_spec(job: KubeflowJob, gang: Gang) -> dict[str, Any]:
    """Rule G21: a Volcano PodGroup's spec (scheduling.volcano.sh/v1beta1 PodGroupSpec).

    ``minMember`` is the gang's minimum; ``queue`` the job's
    ``runPolicy.schedulingPolicy.queue`` when set (else Volcano's admission
    defaults it to ``default``); ``priorityClassName`` the one its pods share
    (rule G9), as Volcano's own controller copies it from a pod. Volcano's
    PodGroup has no ``scheduleTimeoutSeconds``: its gang waits until it fits.
    """
    spec: dict[str, Any] = {"minMember": gang.min_available}
    if job.queue:
        spec["queue"] = job.queue
    priorities = {t.priority_class for t in job.types if t.key in gang.replica_types and t.replicas > 0}
    if len(priorities) == 1 and None not in priorities:
        spec["priorityClassName"] = priorities.pop()
    return spec
