"""policylib's ``spec.runtimePatches`` entry on a TrainJob: built, found, compared (rules T3, T4).

Trainer merges each entry's pod template metadata into the JobSet it makes (its controller, by strategic merge
patch keyed by replicated job name; Trainer v2.3.0 pkg/runtime/core/trainingruntime.go), and its API names
admission webhooks as the writers of entries, each under its own ``manager``."""
from __future__ import annotations

from typing import Any

from .keys import MANAGER

#: Each replicated job's gang labels and annotations, by its name.
Desired = dict[str, tuple[dict[str, Any], dict[str, Any]]]


def build_entry(desired: Desired, order: list[str]) -> dict[str, Any]:
    """The entry: for each replicated job (in the runtime's ``order``) with gang keys, its pod template's labels
    and annotations."""
    jobs = []
    for name in order:
        labels, annotations = desired.get(name, ({}, {}))
        if not labels and not annotations:
            continue
        meta: dict[str, Any] = {}
        if labels:
            meta["labels"] = dict(labels)
        if annotations:
            meta["annotations"] = dict(annotations)
        jobs.append({"name": name, "template": {"spec": {"template": {"metadata": meta}}}})
    return {"manager": MANAGER, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": jobs}}}}


def find_entry(patches: Any) -> int | None:
    """The index of policylib's entry in ``spec.runtimePatches``, or None."""
    if not isinstance(patches, list):
        return None
    return next((i for i, p in enumerate(patches) if isinstance(p, dict) and p.get("manager") == MANAGER), None)


def same_entry(have: dict[str, Any], want: dict[str, Any]) -> bool:
    """The same entry, whatever ``time`` Trainer's defaulter stamped on the stored one."""
    return {k: v for k, v in have.items() if k != "time"} == {k: v for k, v in want.items() if k != "time"}


def entry_pod_metadata(patch: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(replicated job name, pod template metadata) of each replicated job an entry patches."""
    spec = (((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec") or {})
    out = []
    for rjob in spec.get("replicatedJobs") or [] if isinstance(spec, dict) else []:
        if isinstance(rjob, dict):
            meta = ((((rjob.get("template") or {}).get("spec") or {}).get("template") or {}).get("metadata") or {})
            out.append((str(rjob.get("name")), meta if isinstance(meta, dict) else {}))
    return out
