"""The StatefulSet family's admission policy (rules A1-A6): the Deployment's spread, read through the StatefulSet's
:class:`~policylib.spread.workload.PodTemplateKind`."""
from __future__ import annotations

from typing import Any

from ..config import Config, load_config
from ..constants import POD_TEMPLATE_HASH
from ..errors import object_ref, raise_if_any
from ..facts import ClusterFacts, namespace_of
from ..limits import SPREAD_ENTRIES, budget
from ..result import Outcome, Result, is_opted_out
from ..spread import STATEFULSET, deployment_shape_errors, mutate_workload
from .shape import controller_owner, statefulset_errors, update_strategy


def is_statefulset(obj: object) -> bool:
    """An ``apps/v1`` StatefulSet."""
    return STATEFULSET.matches(obj)


def owned_skip(obj: dict[str, Any]) -> Result | None:
    """Rule A5: a StatefulSet with a controller ownerReference (a LeaderWorkerSet's, an operator's) is left as it
    is, with the reason: its owner writes its pod template back, so a spread written here would be overwritten
    (and roll every pod twice)."""
    owner = controller_owner(obj)
    if owner is None:
        return None
    return Result(obj, reasons=[f"owned by {owner.get('kind')} {owner.get('name')}: its controller writes this "
                                "StatefulSet's pod template, so the spread is left to it"])


def update_strategy_warning(obj: dict[str, Any]) -> list[str]:
    """Rule A6: under ``updateStrategy: OnDelete`` a change of the pod template reaches a pod only when that pod is
    deleted: the written spread then holds only for pods created after it, which the warning says; under the alpha
    ``Recreate`` a change of the pod template deletes every pod before the new ones are created, which it says
    too."""
    strategy = update_strategy(obj)
    if strategy == "OnDelete":
        return ["updateStrategy OnDelete: the spread reaches each pod only when it is deleted and re-created"]
    if strategy == "Recreate":
        return ["updateStrategy Recreate: a change of the pod template (the spread's included) deletes every pod "
                "before the new ones are created"]
    return []


def revision_key_note(config: Config) -> list[str]:
    """Rule A3, in words: the configured ``pod-template-hash`` key, not written for a StatefulSet."""
    keys = (config.zone.matchLabelKeys if config.zone.enabled else ()) + \
        (config.host.matchLabelKeys if config.host.enabled else ())
    if POD_TEMPLATE_HASH in keys:
        return [f"matchLabelKeys {POD_TEMPLATE_HASH} not written: StatefulSet pods have no {POD_TEMPLATE_HASH}, and "
                "each ordinal's successor is counted with the whole set (no revision key)"]
    return []


def mutate_statefulset(obj: dict[str, Any], config: Config | None = None, *, old: dict[str, Any] | None = None,
                       facts: ClusterFacts | None = None, namespace: str | None = None) -> Result:
    """Rules A1-A6: an ``apps/v1`` StatefulSet gets the Deployment's zone and host spread (rules S2-S22: effective
    replicas from an HPA whose scaleTargetRef is the StatefulSet, hardMinReplicas, the replica-derived maxSkew, the
    self anti-affinity replaced, the UPDATE and re-apply rules) on CREATE (``old`` None) or UPDATE; its own fields
    are checked with the spread's (every error at once), one owned by a controller is left alone."""
    if is_opted_out(obj):
        return mutate_workload(obj, config, old=old, facts=facts, namespace=namespace)
    ref = object_ref(obj, namespace or namespace_of(obj))
    raise_if_any(ref, deployment_shape_errors(obj, budget(SPREAD_ENTRIES, old is not None)) + statefulset_errors(obj))
    skipped = owned_skip(obj)
    if skipped is not None:
        return skipped
    settings = load_config(config)
    notes = Outcome(revision_key_note(settings), update_strategy_warning(obj))
    return mutate_workload(obj, settings, old=old, facts=facts, namespace=namespace, notes=notes)
