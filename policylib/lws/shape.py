"""What the LeaderWorkerSet family reads, checked (rule E1)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..errors import FieldError, int32_errors, invalid, map_errors, not_supported, required
from ..limits import SPREAD_ENTRIES
from ..spread import deployment_shape_errors
from .leaders import leader_view
from .model import LEADER_WORKER_TEMPLATE, STARTUP_POLICIES, name_of

#: The view's pod template path, and the LeaderWorkerSet's for each template.
VIEW_TEMPLATE = "spec.template"
LWT = ".".join(LEADER_WORKER_TEMPLATE)


def _template_errors(obj: dict[str, Any], template: Any, path: str, entries: int) -> list[FieldError]:
    """Rule S1's checks of one pod template (its spec, metadata, labels, constraint list, affinity object and the
    spread's budget), named at ``path`` instead of the leader view's ``spec.template``."""
    errs = deployment_shape_errors(leader_view(obj, template), entries)
    return [replace(e, field=path + e.field[len(VIEW_TEMPLATE):]) for e in errs
            if e.field == VIEW_TEMPLATE or e.field.startswith(VIEW_TEMPLATE + ".")]


def leaderworkerset_errors(obj: dict[str, Any], entries: int = SPREAD_ENTRIES) -> list[FieldError]:
    """Rule E1: a LeaderWorkerSet the family can read: ``metadata`` an object with a ``name`` (the leaders'
    selector names it) and string maps for labels and annotations; ``spec`` an object, ``replicas`` an int32 of at
    least 0, ``startupPolicy`` LeaderCreated or LeaderReady; ``leaderWorkerTemplate`` an object, its ``size`` an
    int32 of at least 1, its ``workerTemplate`` (required) and ``leaderTemplate`` (optional) pod templates as rule
    S1 reads a Deployment's (a ``spec`` object, metadata and labels maps, a constraint list, an affinity object,
    within the spread's budget). Every error at once, each with its field path."""
    errs: list[FieldError] = []
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        errs.append(invalid("metadata", meta, "must be an object"))
    else:
        if not name_of(obj):
            errs.append(required("metadata.name", "the leaders' selector names the LeaderWorkerSet"))
        for key in ("labels", "annotations"):
            errs += map_errors(meta.get(key), f"metadata.{key}")
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return errs + [required("spec", "a LeaderWorkerSet needs a spec")]
    if spec.get("replicas") is not None:
        errs += int32_errors(spec["replicas"], "spec.replicas", 0)
    policy = spec.get("startupPolicy")
    if policy is not None and policy not in STARTUP_POLICIES:
        errs.append(not_supported("spec.startupPolicy", policy, STARTUP_POLICIES))
    lwt = spec.get("leaderWorkerTemplate")
    if not isinstance(lwt, dict):
        return errs + [required(LWT, "a LeaderWorkerSet needs a leaderWorkerTemplate") if lwt is None
                       else invalid(LWT, lwt, "must be an object")]
    if lwt.get("size") is not None:
        errs += int32_errors(lwt["size"], f"{LWT}.size", 1)
    errs += _template_errors(obj, lwt.get("workerTemplate"), f"{LWT}.workerTemplate", entries)
    if lwt.get("leaderTemplate") is not None:
        errs += _template_errors(obj, lwt["leaderTemplate"], f"{LWT}.leaderTemplate", entries)
    return errs

