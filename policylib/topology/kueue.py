"""Kueue's words for the gang placement (rule N6): the podset topology annotations of Kueue v0.19.2's
topology-aware scheduling, on the pod templates of the jobs Kueue manages, and the port of Kueue's checks of them.

Kueue reads ``kueue.x-k8s.io/podset-required-topology`` (all pods of the PodSet in one domain of the level) or
``-preferred-topology`` (that level, else each level up) from each PodSet's pod template; the value is the level's
node label key (a Kueue ``Topology`` level has no name). They act only on jobs Kueue manages, the ones labelled
``kueue.x-k8s.io/queue-name`` (Kueue v0.19.2 pkg/controller/constants/constants.go), and Kueue's job webhooks
refuse a template whose annotations break :func:`validate_podset_annotations`
(pkg/controller/jobframework/tas_validation.go ``ValidateTASPodSetRequest``).
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ..errors import INT32_MAX, ErrorType, FieldError, FieldPath, forbidden, invalid, required
from ..labels import qualified_name_errors
from ..patch import diff_owned
from ..result import Result
from .levels import REQUIRED, Placement

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
UNCONSTRAINED_TOPOLOGY = "kueue.x-k8s.io/podset-unconstrained-topology"
SLICE_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
SLICE_CONSTRAINTS = "kueue.x-k8s.io/podset-slice-required-topology-constraints"
GROUP_NAME = "kueue.x-k8s.io/podset-group-name"
#: The keys that say where a PodSet goes: a template carrying any of them keeps its own (rule N8).
PLACEMENT_KEYS = (REQUIRED_TOPOLOGY, PREFERRED_TOPOLOGY, UNCONSTRAINED_TOPOLOGY, SLICE_REQUIRED_TOPOLOGY,
                  SLICE_CONSTRAINTS)


@dataclass(frozen=True)
class OmittedValueError(FieldError):
    """A field error printed without its value (``field.OmitValueType{}`` in Kubernetes' errors.go)."""

    @property
    def message(self) -> str:
        return f"{self.type}: {self.detail}"


def _go_parse_int(value: str) -> int | None:
    """Go's ``strconv.ParseInt(value, 10, ...)`` syntax: an optional sign and ASCII digits."""
    return int(value) if re.fullmatch(r"[+-]?[0-9]+", value) else None


def _go_parse_bool(value: str) -> bool:
    return value in ("1", "t", "T", "TRUE", "true", "True", "0", "f", "F", "FALSE", "false", "False")


def validate_podset_annotations(annotations: Mapping[str, Any], path: FieldPath) -> list[FieldError]:
    """Rule N6: Kueue v0.19.2's ``ValidateTASPodSetRequest`` on one pod template's annotations (``path`` its
    metadata): at most one of required, preferred and unconstrained; the level values (and the slice level) label
    keys; unconstrained a boolean; the slice size a number of at least 1, given with the slice level and only
    with it; the group name not a number, not with slices, and only beside required or preferred. (The
    multi-layer slice constraints' JSON and the grouping of two PodSets are not ported.)"""
    errs: list[FieldError] = []
    at = path.child("annotations")
    found = {k: str(annotations[k]) for k in (REQUIRED_TOPOLOGY, PREFERRED_TOPOLOGY, UNCONSTRAINED_TOPOLOGY,
                                              SLICE_REQUIRED_TOPOLOGY, SLICE_SIZE, GROUP_NAME) if k in annotations}
    if sum(k in found for k in (REQUIRED_TOPOLOGY, PREFERRED_TOPOLOGY, UNCONSTRAINED_TOPOLOGY)) > 1:
        errs.append(OmittedValueError(ErrorType.INVALID, str(at), None,
                               f'must not contain more than one topology annotation: ["{REQUIRED_TOPOLOGY}", '
                               f'"{PREFERRED_TOPOLOGY}", "{UNCONSTRAINED_TOPOLOGY}"]'))
    for key in (REQUIRED_TOPOLOGY, PREFERRED_TOPOLOGY, SLICE_REQUIRED_TOPOLOGY):
        if key in found:
            errs += [invalid(at.key(key), found[key], e) for e in qualified_name_errors(found[key])]
    if GROUP_NAME in found:
        if re.fullmatch(r"[0-9]+", found[GROUP_NAME]) and int(found[GROUP_NAME]) < 2**64:   # strconv.ParseUint
            errs.append(invalid(at.key(GROUP_NAME), found[GROUP_NAME], "must not be a number"))
        for other in (SLICE_SIZE, SLICE_REQUIRED_TOPOLOGY):
            if other in found:
                errs.append(forbidden(at.key(GROUP_NAME), f"may not be set when '{other}' is specified"))
        if REQUIRED_TOPOLOGY not in found and PREFERRED_TOPOLOGY not in found:
            errs.append(forbidden(at.key(GROUP_NAME), f"may not be set when neither '{PREFERRED_TOPOLOGY}' nor "
                                                      f"'{REQUIRED_TOPOLOGY}' is specified"))
    if UNCONSTRAINED_TOPOLOGY in found and not _go_parse_bool(found[UNCONSTRAINED_TOPOLOGY]):
        errs.append(invalid(at.key(UNCONSTRAINED_TOPOLOGY), found[UNCONSTRAINED_TOPOLOGY], "must be a boolean value"))
    if SLICE_SIZE in found:
        size = _go_parse_int(found[SLICE_SIZE])
        if size is None or not -INT32_MAX - 1 <= size <= INT32_MAX:
            errs.append(invalid(at.key(SLICE_SIZE), found[SLICE_SIZE], "must be a numeric value"))
        elif size < 1:
            errs.append(invalid(at.key(SLICE_SIZE), found[SLICE_SIZE], "must be greater than or equal to 1"))
    if SLICE_REQUIRED_TOPOLOGY in found and SLICE_SIZE not in found:
        errs.append(required(at.key(SLICE_SIZE), f"must be set when '{SLICE_REQUIRED_TOPOLOGY}' is specified"))
    if SLICE_SIZE in found and SLICE_REQUIRED_TOPOLOGY not in found:
        errs.append(forbidden(at.key(SLICE_SIZE), f"may not be set when '{SLICE_REQUIRED_TOPOLOGY}' is not specified"))
    return errs


def managed_by_kueue(obj: Mapping[str, Any]) -> bool:
    """Whether Kueue manages the job: it carries the ``kueue.x-k8s.io/queue-name`` label."""
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return isinstance(labels, dict) and bool(labels.get(QUEUE_LABEL))


def kueue_word(p: Placement) -> tuple[str, str] | None:
    """Rule N6: the annotation Kueue reads for the gang placement, and its value (the level's node label key):
    required or preferred; None without a placement."""
    if p.within is None:
        return None
    return (REQUIRED_TOPOLOGY if p.mode == REQUIRED else PREFERRED_TOPOLOGY), p.within.node_label


def template_annotations(template: Any) -> dict[str, Any]:
    meta = template.get("metadata") if isinstance(template, dict) else None
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    return annotations if isinstance(annotations, dict) else {}


#: A pod template of a job: its path in the object, and its name for messages (the replica type or ReplicatedJob).
Template = tuple[tuple[Any, ...], str]


def _get(obj: Any, path: Sequence[Any]) -> Any:
    for part in path:
        if isinstance(obj, dict) and isinstance(part, str):
            obj = obj.get(part)
        elif isinstance(obj, list) and isinstance(part, int) and part < len(obj):
            obj = obj[part]
        else:
            return None
    return obj


def field_path(path: Sequence[Any]) -> FieldPath:
    out = FieldPath(str(path[0]))
    for part in path[1:]:
        out = out.index(part) if isinstance(part, int) else out.child(str(part))
    return out


def own_placement(annotations: Mapping[str, Any]) -> dict[str, str]:
    """The Kueue placement keys a template carries already, and their values."""
    return {k: str(annotations[k]) for k in PLACEMENT_KEYS if k in annotations}


def kueue_words(obj: dict[str, Any], result: Result, p: Placement, templates: Sequence[Template],
                old: dict[str, Any] | None = None) -> Result:
    """Rules N6 and N8: Kueue's word for the gang placement (:func:`kueue_word`) on each of ``templates`` (paths in
    ``obj``), added to what the family's policy made (``result``): only for a job Kueue manages (a reason
    otherwise); a template that carries a Kueue placement of its own keeps it (a warning when it disagrees with
    the declaration); on UPDATE only the stored value comes back (Kueue's PodSets do not change under a running
    job), nothing new is added. What is written passes Kueue's checks (:func:`validate_podset_annotations`), or is
    not written (a warning). The older ``gang.topology`` keeps its meaning, kube-scheduler's words only: Kueue's
    are written for a declared ``topology.gangs.within``."""
    word = kueue_word(p)
    if word is None or not p.declared or result.denial is not None or not templates:
        return result
    key, value = word
    head = f"{p.describe_within()}: Kueue"
    if not managed_by_kueue(obj):
        result.reasons.append(f"{head}: {key} not written: the object has no {QUEUE_LABEL} label, and Kueue "
                              "reads its podset annotations only on the jobs it manages")
        return result
    mutated = copy.deepcopy(result.object)
    written: list[str] = []
    kept: list[str] = []
    restored: list[str] = []
    for path, name in templates:
        template = _get(mutated, path)
        if not isinstance(template, dict):
            continue
        annotations = template_annotations(template)
        own = own_placement(annotations)
        if own:
            kept.append(name)
            if own != {key: value}:
                result.warnings.append(
                    f"{name}: keeps its own Kueue placement ({', '.join(f'{k}: {v}' for k, v in own.items())}); "
                    f"{p.within_setting} says {key}: {value}")
            continue
        want = value
        if old is not None:
            stored = own_placement(template_annotations(_get(old, path)))
            if key not in stored:
                continue
            want = stored[key]
        errs = validate_podset_annotations({**annotations, key: want}, field_path(path).child("metadata"))
        if errs:
            result.warnings.append(f"{name}: {key}: {want} not written: Kueue would refuse it: "
                                   + "; ".join(str(e) for e in errs))
            continue
        if template.get("metadata") is None:   # null reads as empty, as the API server reads it
            template["metadata"] = {}
        meta = template["metadata"]
        if isinstance(meta, dict) and meta.get("annotations") is None:
            meta["annotations"] = {}
        if not isinstance(meta, dict) or not isinstance(meta["annotations"], dict):
            continue
        meta["annotations"][key] = want
        (restored if old is not None else written).append(name)
    if written:
        result.reasons.append(f"{head}: {key}: {value} on the pod templates of {', '.join(written)}")
    if restored:
        result.reasons.append(f"{head}: UPDATE: {key} kept as stored on the pod templates of {', '.join(restored)} "
                              "(Kueue's PodSets do not change under a running job)")
    if kept:
        result.reasons.append(f"{head}: the pod templates of {', '.join(kept)} carry a Kueue placement of their own: "
                              "kept")
    if old is not None and not restored and not kept:
        result.reasons.append(f"{head}: UPDATE: {key} not added (only a stored value is kept)")
    if not written and not restored:
        return result
    ops = diff_owned(result.object, mutated, [(*path, "metadata") for path, _ in templates])
    result.object, result.patch = mutated, [*result.patch, *ops]
    return result


def entry_words(obj: dict[str, Any], desired: dict[str, tuple[dict[str, Any], dict[str, Any]]], names: Sequence[str],
                p: Placement, own: Mapping[str, Mapping[str, Any]]) -> tuple[dict[str, tuple[dict[str, Any],
                                                                                           dict[str, Any]]],
                                                                           list[str], list[str]]:
    """Rules N6 and N8 for a TrainJob: Kueue's word added to the pod template annotations policylib's runtime patch
    writes (``desired``, by replicated job) for each replicated job of ``names`` (Kueue reads the JobSet Trainer
    builds, runtime patches merged); a replicated job whose runtime template or another runtime patch carries a
    Kueue placement (``own``) keeps it. Returns the new ``desired``, the reasons and the warnings."""
    word = kueue_word(p)
    if word is None or not p.declared:
        return desired, [], []
    key, value = word
    head = f"{p.describe_within()}: Kueue"
    if not managed_by_kueue(obj):
        return desired, [f"{head}: {key} not written: the object has no {QUEUE_LABEL} label, and Kueue reads its "
                         "podset annotations only on the jobs it manages"], []
    out = dict(desired)
    written, kept, warnings = [], [], []
    for name in names:
        mine = own_placement(own.get(name) or {})
        if mine:
            kept.append(name)
            if mine != {key: value}:
                warnings.append(f"{name}: keeps its own Kueue placement "
                                f"({', '.join(f'{k}: {v}' for k, v in mine.items())}); {p.within_setting} says "
                                f"{key}: {value}")
            continue
        labels, annotations = out.get(name, ({}, {}))
        out[name] = (labels, {**annotations, key: value})
        written.append(name)
    reasons = [f"{head}: {key}: {value} on the pod templates of {', '.join(written)} (runtime patch)"] if written else []
    if kept:
        reasons.append(f"{head}: the pod templates of {', '.join(kept)} carry a Kueue placement of their own: kept")
    return out, reasons, warnings


def no_entry_reason(obj: dict[str, Any], p: Placement, why: str) -> list[str]:
    """Rule N6 for a TrainJob that gets no runtime patch of policylib's (``why``): the reason Kueue's word is not
    written, for a declared placement on a Kueue-managed TrainJob."""
    word = kueue_word(p)
    if word is None or not p.declared or not managed_by_kueue(obj):
        return []
    return [f"{p.describe_within()}: Kueue: {word[0]} not written: policylib writes no runtime patch for this "
            f"TrainJob ({why})"]
