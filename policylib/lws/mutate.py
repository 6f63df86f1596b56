"""The LeaderWorkerSet family's admission policy (rules E1-E8)."""
from __future__ import annotations

from typing import Any

from ..config import Config
from ..constants import POD_TEMPLATE_HASH
from ..errors import invalid, raise_if_any
from ..facts import ClusterFacts
from ..limits import SPREAD_ENTRIES, budget
from ..patch import Draft, diff_owned
from ..request import admission
from ..result import Outcome, Result
from ..spread import mutate_workload
from .gangs import gang_notes
from .leaders import leader_template, leader_template_generated, leader_view, old_leader_template
from .model import (
    ANNOTATIONS,
    GENERATED,
    GROUP_PACKING_RECORD,
    LEADER_TEMPLATE,
    LEADER_TEMPLATE_RECORD,
    LEADER_WORKER_TEMPLATE,
    OWNED_PATHS,
    WORKER_TEMPLATE,
    annotations_of,
    at,
    name_of,
)
from .packing import group_packing, write_packing
from .shape import leaderworkerset_errors

#: Rule E3's warning for GitOps users.
GENERATED_WARNING = ("spec.leaderWorkerTemplate.leaderTemplate generated from the workerTemplate (policylib.io/"
                     "leader-template: generated) to carry the leaders' spread: a GitOps tool shows it as drift; "
                     "ignore that field there (docs/gitops.md)")


def revision_key_note(config: Config) -> list[str]:
    """Rule E4: the configured ``pod-template-hash`` key is not written on the leaders: LWS's pods have none (their
    StatefulSets label ``controller-revision-hash``), and each group is recreated whole on a rolling update."""
    keys = (config.zone.matchLabelKeys if config.zone.enabled else ()) + \
        (config.host.matchLabelKeys if config.host.enabled else ())
    if POD_TEMPLATE_HASH in keys:
        return [f"matchLabelKeys {POD_TEMPLATE_HASH} not written: LeaderWorkerSet pods have no {POD_TEMPLATE_HASH}; "
                "each recreated group's leader is counted with all the leaders (no revision key)"]
    return []


def _checked(obj: dict[str, Any], old: dict[str, Any] | None, ref: str) -> None:
    """Rule E1 for the object and, on an UPDATE, the stored one (named under ``oldObject``)."""
    raise_if_any(ref, leaderworkerset_errors(obj, budget(SPREAD_ENTRIES, old is not None)))
    if old is None:
        return
    if not isinstance(old, dict):
        raise_if_any(ref, [invalid("oldObject", old, "must be an object")])
    raise_if_any(ref, [e.under("oldObject") for e in leaderworkerset_errors(old, budget(SPREAD_ENTRIES, True))])


def _packing_follows_settings(obj: dict[str, Any], old: dict[str, Any] | None) -> bool:
    """Rule E5 on UPDATE: the packing follows the settings on CREATE and when the update changes the
    ``leaderWorkerTemplate`` anyway (LWS then recreates the groups whatever policylib writes); otherwise it is
    kept as stored, so that no settings change alone recreates every group."""
    return old is None or at(obj, LEADER_WORKER_TEMPLATE) != at(old, LEADER_WORKER_TEMPLATE)


def mutate_leaderworkerset(obj: dict[str, Any], config: Config | None = None, *, old: dict[str, Any] | None = None,
                           facts: ClusterFacts | None = None, namespace: str | None = None) -> Result:
    """Rules E1-E8: a ``leaderworkerset.x-k8s.io/v1`` LeaderWorkerSet on CREATE (``old`` None) or UPDATE: the
    Deployment's zone and host spread (rules S2-S22) on its leaders, counting groups (rule E2), in its
    ``leaderTemplate`` (generated from the ``workerTemplate`` when absent, rule E3), without a revision key (rule
    E4); each group packed within the gang placement's level (rules E5, E6); the reasons say what gangs each group
    (rules E7, E8)."""
    req, skipped = admission(obj, config, old, facts, namespace)
    if skipped:
        return skipped
    _checked(obj, old, req.ref)
    settings, name = req.config, name_of(obj)
    generated = leader_template_generated(obj, old)
    view = leader_view(obj, leader_template(obj, generated))
    old_view = leader_view(old, old_leader_template(old)) if old is not None else None
    spread = mutate_workload(view, settings, old=old_view, facts=req.facts, namespace=req.namespace,
                             notes=Outcome(revision_key_note(settings)))
    out = Outcome(list(spread.reasons), list(spread.warnings))
    draft = Draft(obj)
    annotations = (spread.object.get("metadata") or {}).get("annotations") or {}
    if annotations != annotations_of(obj):
        draft.set(ANNOTATIONS, dict(annotations))
    leaders = spread.object["spec"]["template"]
    packing, why = group_packing(obj, settings)
    owned = GROUP_PACKING_RECORD in annotations_of(obj)
    if _packing_follows_settings(obj, old):
        out.reason(why)
        for path in (WORKER_TEMPLATE, LEADER_TEMPLATE):
            if path == LEADER_TEMPLATE:
                draft.set(LEADER_TEMPLATE, leaders)
            write_packing(draft, path, name, packing, owned)
        if packing is not None:
            draft.dict_at(ANNOTATIONS)[GROUP_PACKING_RECORD] = packing.record
        elif owned:
            draft.dict_at(ANNOTATIONS).pop(GROUP_PACKING_RECORD)
    else:
        out.reason("leaderWorkerTemplate unchanged by this update: each group's packing kept as stored (writing "
                   "it now would recreate every group)")
        draft.set(LEADER_TEMPLATE, leaders)
    if generated:
        if draft.get(LEADER_TEMPLATE) == draft.get(WORKER_TEMPLATE) and at(obj, LEADER_TEMPLATE) is None:
            draft.delete(LEADER_TEMPLATE)   # nothing for the leaders alone: LWS uses the workerTemplate
            draft.dict_at(ANNOTATIONS).pop(LEADER_TEMPLATE_RECORD, None)
        else:
            draft.dict_at(ANNOTATIONS)[LEADER_TEMPLATE_RECORD] = GENERATED
            out.reason("leaderTemplate generated from the workerTemplate: it carries the leaders' spread, and is "
                       "derived again from the workerTemplate on every update")
            if annotations_of(obj).get(LEADER_TEMPLATE_RECORD) != GENERATED:
                out.warn(GENERATED_WARNING)   # once, when it is first generated
    elif LEADER_TEMPLATE_RECORD in annotations_of(obj):
        draft.dict_at(ANNOTATIONS).pop(LEADER_TEMPLATE_RECORD)
        out.reason("leaderTemplate written by the user: it is the user's from now on (mutated in place)")
    out.merge(gang_notes(obj, settings))
    draft.prune_empty(ANNOTATIONS)
    patch = diff_owned(obj, draft.root, OWNED_PATHS)
    return out.result(draft.root if patch else obj, patch)
