"""Snapshots: every object of some resources, listed page by page and held as :class:`Interner` keeps it
(rule W7), and which resources ``plan``/``check --cluster`` read for a config."""
from __future__ import annotations

from typing import Any, Callable

from ...documents import no_gc
from .client import Api
from .errors import NotFound
from .interner import Interner
from .resources import (
    DEPLOYMENTS,
    GANG_JOBS,
    HPAS,
    NATIVE_GANG,
    PODGROUPS,
    SNAPSHOT_RESOURCES,
    STATEFULSETS,
    VOLCANO_PODGROUPS,
    Resource,
)
from .wire import PAGE


def snapshot_resources(config: Any) -> tuple[Resource, ...]:
    """What ``plan --cluster`` and ``check --cluster`` read for ``config`` (a :class:`policylib.Config`):
    Deployments, StatefulSets (unless ``statefulSets.enabled`` is false, rule A4), HPAs, Kubeflow jobs, JobSets,
    TrainJobs (their runtimes: ``live_runtimes``) and scheduler-plugins' PodGroups always; Volcano's PodGroups only
    for gang method podgroup on scheduler volcano (rule G21; a Volcano cluster has one per pod), Kubernetes' own
    Workloads and PodGroups only for method workload (G18). A user who may read only some groups then needs no more
    than the settings use."""
    gang = config.gang
    extra: tuple[Resource, ...] = ()
    if gang.enabled and gang.method == "podgroup" and gang.scheduler == "volcano":
        extra = (VOLCANO_PODGROUPS,)
    elif gang.enabled and gang.method == "workload":
        extra = NATIVE_GANG
    statefulsets = (STATEFULSETS,) if config.statefulSets.enabled else ()
    return (DEPLOYMENTS,) + statefulsets + (HPAS,) + GANG_JOBS + PODGROUPS + extra


def snapshot(api: Api, namespace: str | None = None, resources: tuple[Resource, ...] = SNAPSHOT_RESOURCES,
             progress: Callable[[str, int], None] | None = None,
             project: Callable[[Any], Any] | None = None, limit: int = PAGE,
             share: bool = False) -> list[dict[str, Any]]:
    """Every object the planners read, listed page by page, the next page read ahead while this one is
    decoded; resources the cluster does not serve contribute nothing. ``project`` (rule W7) is applied to
    each object as its page is decoded, and what it keeps is held :class:`Interner`'s way (its strings once;
    with ``share``, each equal part once: read such objects, never change them in place, as the policies do),
    so the memory a snapshot takes is what it keeps plus one page decoded and the next as the server sent it."""
    objects: list[dict[str, Any]] = []
    hold = Interner(share)
    keep = (lambda obj: hold(project(obj))) if project else hold
    with no_gc():   # decoded JSON has no cycles: the cyclic GC would pass over every object held, page after page
        for res in resources:
            count = 0
            try:
                for page in api.pages(res, namespace, limit=limit, ahead=True):
                    objects += map(keep, page["items"])
                    count += len(page["items"])
                    if progress:
                        progress(res.plural, count)
            except NotFound:
                continue
    return objects


def stored_count(api: Api, res: Resource) -> int | None:
    """How many objects of ``res`` the cluster stores (one page per 500; None when it does not serve ``res``)."""
    count = 0
    try:
        for page in api.pages(res, limit=PAGE):
            count += len(page["items"])
    except NotFound:
        return None
    return count
