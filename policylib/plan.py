"""Planning (pure): the writes a controller would make to keep existing objects right.

Admission alone cannot honour rule S11: an HPA's ``minReplicas`` changes
without a write to the Deployment, ``kubectl scale`` writes through the scale
subresource (no pod template), and ``reconcileDrift: true`` must move existing
Deployments to the current settings. :func:`plan` takes a snapshot of objects
and the config and returns exactly the writes to make, each with its reasons
and whether it rolls pods. A compliant object never gets a write.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

from .config import Config, load_config
from .errors import PolicyError, object_ref
from .facts import ClusterFacts, is_fact
from .families import PLANNERS as PLANNERS
from .families import family_of, planner_families
from .planners import UNRECORDED_REASON as UNRECORDED_REASON
from .planners import UNWATCHED_NAMESPACES as UNWATCHED_NAMESPACES
from .planners import Planner, Write, plan_deployment
from .planners import admitted_without_policy as admitted_without_policy
from .planners import create_owned as create_owned
from .planners import owner_reference as owner_reference
from .planners import plan_podgroups as plan_podgroups
from .planners import plan_workload as plan_workload
from .planners import rolls_pods as rolls_pods


def plan(objects: Iterable[dict[str, Any]], config: Config | dict[str, Any] | None = None,
         planners: Iterable[Planner] = (plan_deployment,), facts: ClusterFacts | None = None,
         only: Callable[[dict[str, Any]], bool] | None = None) -> list[Write]:
    """Every write for a snapshot, in input order.

    Each object goes to the planners of its workload family (:data:`policylib.families.FAMILIES`); a
    planner of no family runs on every object. ``facts`` defaults to the facts found among ``objects``; ``only`` limits
    planning to the objects it accepts (a controller re-plans just what an
    event touched). Objects a planner cannot read become error entries
    (``error: True``) instead of stopping the plan.
    """
    config = load_config(config)
    objects = list(objects)
    facts = facts if facts is not None else ClusterFacts.from_objects(objects)
    writes: list[Write] = []
    for obj in objects:
        if not isinstance(obj, dict) or is_fact(obj) or (only is not None and not only(obj)):
            continue
        family = family_of(obj)
        for planner in planners:
            owners = planner_families(planner)
            if owners and family not in owners:   # a family's planners read its own objects only
                continue
            try:
                out = planner(obj, config, facts)
            except PolicyError as e:
                writes.append(_error_entry(obj, str(e)))
                continue
            except (TypeError, AttributeError, KeyError, ValueError) as e:  # cluster data we could not read
                writes.append(_error_entry(obj, f"{object_ref(obj)}: unreadable object ({type(e).__name__}: {e})"))
                continue
            if out is None:
                continue
            writes += out if isinstance(out, list) else [out]
    return writes


def _error_entry(obj: dict[str, Any], message: str) -> Write:
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    ns = meta.get("namespace")
    ns = ns if isinstance(ns, str) else "default"
    return Write(str(obj.get("kind", "")), ns, str(meta.get("name", "")), [f"error: {message}"], False,
                 action="none", error=True)


def summarize(writes: list[Write]) -> str:
    """``12 Deployments would roll, 3 for legacy anti-affinity`` and the other counts."""
    unrecorded = [w for w in writes if w.unrecorded and not w.error]
    waiting = [w for w in writes if w.kind == "Deployment" and w.pending and not w.error]
    deployments = [w for w in writes if w.kind == "Deployment" and not w.error and w.action != "none"]
    rolling = [w for w in deployments if w.rollout]
    legacy = [w for w in rolling if w.legacy_anti_affinity]
    parts = [f"{len(rolling)} Deployment{'s' if len(rolling) != 1 else ''} would roll, "
             f"{len(legacy)} for legacy anti-affinity"]
    quiet = len(deployments) - len(rolling)
    if quiet:
        parts.append(f"{quiet} Deployment{'s' if quiet != 1 else ''} would get a metadata-only write")
    if unrecorded:
        parts.append(f"{len(unrecorded)} Deployment{'s' if len(unrecorded) != 1 else ''} without policylib's record "
                     "(admitted while the webhook was unreachable?)")
    if waiting:
        parts.append(f"{len(waiting)} Deployment{'s' if len(waiting) != 1 else ''} wait for their next rollout "
                     "(rewrite: OnNextRollout)")
    others = [w for w in writes if w.kind != "Deployment" and not w.error]
    if others:
        parts.append(f"{len(others)} other write{'s' if len(others) != 1 else ''}")
    errors = [w for w in writes if w.error]
    if errors:
        parts.append(f"{len(errors)} object{'s' if len(errors) != 1 else ''} could not be planned")
    return "; ".join(parts)



#: The public names of this module (docs/library.md).
__all__ = ["Write", "plan"]
