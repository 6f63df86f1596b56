"""Which gang schedulers a cluster runs, told from what ``check --cluster`` reads (rule D5): the scheduler
Pods running in any namespace (by the names and images their upstream installs use), the API groups the
cluster serves (the CRDs each scheduler installs, and Kubernetes' own gang API), and ACK's Node labels.
Pure: the Pods, Nodes and served ``group/version`` strings come in as data.
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

from .config import Config
from .constants import (
    KOORDINATOR_GROUP,
    NATIVE_GANG_GROUP,
    NATIVE_GANG_VERSIONS,
    SIGS_GROUP,
    VOLCANO_SCHEDULING_GROUP,
    X_K8S_GROUP,
)
from .notices import GANG_SCHEDULERS

#: Scheduler Pods: (scheduler, name prefixes of their Pods, image fragments), as upstream installs them:
#: Volcano's chart (volcano-scheduler, volcanosh/vc-scheduler), Koordinator's (koord-scheduler,
#: koordinator-sh/koord-scheduler), scheduler-plugins' (scheduler-plugins-scheduler,
#: scheduler-plugins/kube-scheduler).
SCHEDULER_PODS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("volcano", ("volcano-scheduler",), ("volcanosh/vc-scheduler",)),
    ("koordinator", ("koord-scheduler",), ("koordinator-sh/koord-scheduler", "/koord-scheduler:")),
    ("scheduler-plugins", ("scheduler-plugins-scheduler",), ("scheduler-plugins/kube-scheduler",)),
)
#: Served API groups (any version unless one is given) and the scheduler whose install serves them.
SCHEDULER_APIS: tuple[tuple[str, str | None, str], ...] = (
    (VOLCANO_SCHEDULING_GROUP, None, "volcano"),
    (KOORDINATOR_GROUP, None, "koordinator"),
    (SIGS_GROUP, None, "koordinator"),
    (X_K8S_GROUP, None, "scheduler-plugins"),
) + tuple((NATIVE_GANG_GROUP, v, "kube-scheduler") for v in NATIVE_GANG_VERSIONS)
#: A Node label of ACK's node pools: the cluster is ACK, whose managed control plane runs ACK's scheduler.
ACK_NODE_LABEL = "alibabacloud.com/nodepool-id"
#: What to set for each scheduler found.
SETTINGS_FOR = {
    "ack": "gang.scheduler: ack",
    "koordinator": "gang.scheduler: koordinator",
    "scheduler-plugins": "gang.method: podgroup, gang.scheduler: scheduler-plugins",
    "kube-scheduler": "gang.method: workload, gang.scheduler: kube-scheduler",
    "volcano": "gang.method: podgroup, gang.scheduler: volcano",
}


def running_gang_schedulers(objects: Iterable[dict[str, Any]], nodes: Iterable[dict[str, Any]],
                            served: Sequence[str]) -> dict[str, list[str]]:
    """Rule D5: each gang scheduler the cluster runs, with what shows it (a running Pod, a served API
    group, ACK's Node label), in the order of ``gang.scheduler``'s choices. ``served``: ``group/version``
    of every API the cluster serves."""
    found: dict[str, list[str]] = {}
    for pod in objects:
        if not isinstance(pod, dict) or pod.get("kind") != "Pod" or (pod.get("status") or {}).get("phase") != "Running":
            continue
        meta = pod.get("metadata") or {}
        name = str(meta.get("name") or "")
        images = [str(c.get("image") or "") for c in (pod.get("spec") or {}).get("containers") or []
                  if isinstance(c, dict)]
        for scheduler, prefixes, fragments in SCHEDULER_PODS:
            if name.startswith(prefixes) or any(f in image for f in fragments for image in images):
                found.setdefault(scheduler, []).append(f"Pod {meta.get('namespace') or 'default'}/{name} running")
    groups = {g.partition("/")[0]: [] for g in served}   # type: dict[str, list[str]]
    for g in served:
        groups[g.partition("/")[0]].append(g.partition("/")[2])
    for group, version, scheduler in SCHEDULER_APIS:
        if group in groups and (version is None or version in groups[group]):
            found.setdefault(scheduler, []).append(f"API {group}{'/' + version if version else ''} served")
    ack = sorted(str((n.get("metadata") or {}).get("name")) for n in nodes
                 if ACK_NODE_LABEL in ((n.get("metadata") or {}).get("labels") or {}))
    if ack:
        found.setdefault("ack", []).append(f"{len(ack)} Node(s) labelled {ACK_NODE_LABEL}")
    order = list(GANG_SCHEDULERS)
    return {s: found[s] for s in sorted(found, key=order.index)}


def targeted_scheduler(config: Config) -> str | None:
    """The scheduler the gang settings write for: ``gang.operatorGang``'s when the operators gang the jobs
    themselves (rule G15), else ``gang.scheduler``; None when nothing is written (gangs off, or
    ``trainingOperatorGang``, whose scheduler policylib does not know)."""
    gang = config.gang
    if not gang.enabled or gang.trainingOperatorGang:
        return None
    return gang.operatorGang if gang.operatorGang != "none" else gang.scheduler


def gang_scheduler_findings(config: Config, running: dict[str, list[str]]) -> list[tuple[str, str]]:
    """Rule D5's findings as (severity, message): an ``info`` naming the gang schedulers found and what
    shows each, and a ``warning`` when the configured one is not among them (the metadata policylib
    writes is then read by no scheduler), naming the settings for the ones that are."""
    shown = "; ".join(f"{s} ({', '.join(why)})" for s, why in running.items()) or "none"
    out = [("info", f"gang schedulers this cluster runs: {shown}")]
    target = targeted_scheduler(config)
    if target is None or target in running:
        return out
    key = "gang.operatorGang" if config.gang.operatorGang != "none" else "gang.scheduler"
    what = GANG_SCHEDULERS[target][0] if target in GANG_SCHEDULERS else target
    instead = ("set " + "; or ".join(f"for {s}, {SETTINGS_FOR[s]}" for s in running) if running
               else "install a gang scheduler, or set gang.enabled: false")
    out.append(("warning", f"{key}: {target} targets {what}, which this cluster does not run: the gang metadata "
                           f"written for Kubeflow jobs is read by no scheduler and their pods start one by one; "
                           f"{instead}"))
    return out
