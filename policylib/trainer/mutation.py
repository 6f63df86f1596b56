"""The TrainJob policy: the gang of each start wave in policylib's ``spec.runtimePatches`` entry (rules T1-T4)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..config import Config
from ..constants import TRAINER_GROUP
from ..errors import FieldError, FieldPath, raise_if_any
from ..facts import ClusterFacts
from ..gang import (
    build_podgroups,
    describe_plan,
    desired_metadata,
    is_gang_key,
    metadata_errors,
    notes_on_job,
    priority_violation,
    validate_gang_labels,
)
from ..gang.job import GENERATE_NAME_WARNING, named_by_generate_name_only
from ..gang.topology import gang_words
from ..gang.workload import native_gang, native_notes, other_scheduler_warning, workload_objects
from ..jobset.mutation import current_gang_keys, waves_reason
from ..jobset.read import plan_jobset_gangs
from ..patch import Draft, diff_owned
from ..request import admission
from ..result import Outcome, Result
from ..topology import placement
from ..topology.kueue import entry_words, no_entry_reason
from ..topology.volcano import trainer_podgroup_words
from .keys import KIND, MANAGER
from .patch import build_entry, entry_pod_metadata, find_entry, same_entry
from .runtime import TrainJob, pod_group_policy, read_trainjob, runtime_jobset

PATCHES = ("spec", "runtimePatches")


def _patches(obj: dict[str, Any]) -> list[Any]:
    value = (obj.get("spec") or {}).get("runtimePatches")
    return list(value) if isinstance(value, list) else []


def _write(obj: dict[str, Any], patches: list[Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    draft = Draft(obj)
    draft.dict_at(("spec",))["runtimePatches"] = patches
    patch = diff_owned(obj, draft.root, [PATCHES])
    return (draft.root if patch else obj), patch


def kept_on_update(obj: dict[str, Any], old: dict[str, Any], out: Outcome) -> Result:
    """Rule T4: on UPDATE policylib's entry is the stored one, byte for byte (its ``time`` and its place in the
    list): Trainer's validation refuses any change to ``spec.runtimePatches`` while the TrainJob runs, and
    ``spec.trainer`` and ``spec.runtimeRef`` (what the gang is computed from) are immutable. A re-applied manifest
    without the entry gets it back where it was; a TrainJob stored without one gets none."""
    stored_patches = _patches(old)
    stored_at = find_entry(stored_patches)
    patches = _patches(obj)
    mine = find_entry(patches)
    if stored_at is None:
        out.reason("UPDATE: the stored TrainJob has no policylib runtime patch, and Trainer refuses changes to "
                   "spec.runtimePatches while it runs: none added (rule T4)")
        return out.result(obj)
    stored = stored_patches[stored_at]
    if mine is not None and patches[mine] == stored:
        out.reason(f"runtime patch {MANAGER} as stored")
        return out.result(obj)
    if mine is not None:
        patches[mine] = stored
    else:
        patches.insert(min(stored_at, len(patches)), stored)
    out.reason(f"UPDATE: runtime patch {MANAGER} kept as stored (Trainer refuses changes to spec.runtimePatches "
               "while the TrainJob runs; rule T4)")
    mutated, patch = _write(obj, patches)
    return out.result(mutated, patch)


def _existing_gang(trainjob: TrainJob, runtime: dict[str, Any]) -> list[str]:
    """Gang keys the TrainJob gets from elsewhere: another manager's runtime patch or the runtime's templates."""
    found = []
    for patch in trainjob.patches:
        if patch.get("manager") == MANAGER:
            continue
        for name, meta in entry_pod_metadata(patch):
            keys = sorted(k for part in ("labels", "annotations") for k in (meta.get(part) or {}) if is_gang_key(k))
            if keys:
                found.append(f"runtime patch {patch.get('manager')} on {name}: {', '.join(keys)}")
    template = (runtime.get("spec") or {}).get("template") or {}
    for name, (labels, annots) in current_gang_keys({"spec": template.get("spec") or {}}).items():
        if labels or annots:
            found.append(f"the runtime's {name} template: {', '.join(sorted([*labels, *annots]))}")
    return found


def own_annotations(trainjob: TrainJob, runtime: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Rule N8: the pod template annotations of each replicated job from the runtime and other managers' runtime
    patches (a Kueue placement there is the user's own)."""
    found: dict[str, dict[str, Any]] = {}
    template = (runtime.get("spec") or {}).get("template") or {}
    for rjob in ((template.get("spec") or {}).get("replicatedJobs") or []):
        if isinstance(rjob, dict):
            meta = ((((rjob.get("template") or {}).get("spec") or {}).get("template") or {}).get("metadata") or {})
            found.setdefault(str(rjob.get("name")), {}).update(meta.get("annotations") or {})
    for patch in trainjob.patches:
        if patch.get("manager") != MANAGER:
            for name, meta in entry_pod_metadata(patch):
                found.setdefault(name, {}).update(meta.get("annotations") or {})
    return found


def mutate_trainjob(obj: dict[str, Any], config: Config | None = None, *, old: dict[str, Any] | None = None,
                    namespace: str | None = None, facts: ClusterFacts | None = None) -> Result:
    """Rules T1-T4: a ``trainer.kubeflow.org/v1alpha1`` TrainJob gets the gang of each start wave of the JobSet
    Trainer makes of it (rule T1, computed from its runtime, which ``facts`` must hold) in one
    ``spec.runtimePatches`` entry of its own (``manager: policylib.io/gang``): the keys of ``gang.method`` and
    ``gang.scheduler`` (rule G4) on the pod templates of the gang's replicated jobs, with the PodGroups (rule G5)
    or the Workload and PodGroup (rule G18) in ``Result.extra_objects``. Left alone, with the reason: a runtime
    that has ``podGroupPolicy`` (Trainer makes its own PodGroup), a runtime not known here, gang keys from
    elsewhere. On UPDATE the stored entry is kept (rule T4)."""
    req, skipped = admission(obj, config, old, facts, namespace)
    if skipped:
        return skipped
    settings, out = req.config.gang, Outcome()
    if named_by_generate_name_only(obj):
        out.warn(GENERATE_NAME_WARNING.format(what="TrainJob"))
        return out.result(obj)
    trainjob = read_trainjob(obj, req.namespace)
    if old is not None and isinstance(old.get("spec"), dict):
        return kept_on_update(obj, old, out)
    runtime = req.facts.runtime(trainjob.runtime_kind, trainjob.namespace, trainjob.runtime_name)
    if runtime is None:
        out.warn(f"runtime {trainjob.runtime_ref} not found (not in the input or the cluster): no gang written (its "
                 "replicated jobs, its node count and whether it has podGroupPolicy decide the gang: give it with -f "
                 "or use --cluster; in a cluster, create it before its TrainJobs)")
        return out.result(obj)
    jobset = runtime_jobset(trainjob, runtime)
    plan = plan_jobset_gangs(jobset)
    out.reason(f"runtime {trainjob.runtime_ref}: {waves_reason(jobset, plan)}")
    own = pod_group_policy(runtime)
    if own is not None:
        out.reason(f"runtime {trainjob.runtime_ref} has podGroupPolicy.{own}: Trainer makes the PodGroup "
                   f"{trainjob.name} and labels the pods itself: no gang written (rule T3)")
        if len(jobset.waves()) > 1:
            out.warn(f"runtime {trainjob.runtime_ref} starts its replicated jobs in {len(jobset.waves())} waves, but "
                     "Trainer's PodGroup counts every pod of all of them: it can never fill (remove podGroupPolicy "
                     "to have policylib gang each wave)")
        trainers = trainer_podgroup_words(placement(req.config), runtime)
        if trainers is not None:
            (out.warn if trainers[0] == "warning" else out.reason)(trainers[1])
        out.reason(*no_entry_reason(obj, placement(req.config), f"its runtime has podGroupPolicy.{own}"))
        return out.result(obj)
    if plan is None:
        out.reason("no start wave has more than one pod: nothing to gang")
        out.reason(*no_entry_reason(obj, placement(req.config), "no gang"))
        return out.result(obj)
    elsewhere = _existing_gang(trainjob, runtime)
    if elsewhere:
        out.reason(f"already carries gang metadata ({'; '.join(elsewhere)}): left untouched")
        out.reason(*no_entry_reason(obj, placement(req.config), "gang metadata from elsewhere"))
        return out.result(obj)
    job = replace(jobset.gang_view(), kind=KIND, api_group=TRAINER_GROUP)
    violation = priority_violation(job, plan)
    if violation:
        out.violation(violation, settings.onViolation == "deny")
        return out.result(obj)
    desired, kueue_reasons, kueue_warnings = entry_words(
        obj, desired_metadata(job, plan, settings), [j.name for j in jobset.jobs], placement(req.config),
        own_annotations(trainjob, runtime))
    entry = build_entry(desired, [j.name for j in jobset.jobs])
    native = native_gang(req.config, facts)
    words = gang_words(req.config)
    extra = build_podgroups(job, plan, settings, words.network_topology) + workload_objects(job, plan, native)
    errs: list[FieldError] = []
    for name, meta_ in entry_pod_metadata(entry):
        errs += metadata_errors(meta_, FieldPath("spec", "runtimePatches").key(MANAGER).child(
            "trainingRuntimeSpec", "template", "spec", "replicatedJobs").key(name).child("template", "spec",
                                                                                           "template", "metadata"))
    for pg in extra:
        errs += [e.under(f"{pg['kind']} {pg['metadata']['name']}") for e in validate_gang_labels(pg)]
    raise_if_any(req.ref, errs)
    notes_on_job(job, obj, settings, out)
    schedulers = {t.scheduler_name for t in job.types if t.scheduler_name}
    warning = other_scheduler_warning(obj, settings, schedulers)
    if warning:
        out.warn(warning)
    patches = _patches(obj)
    mine = find_entry(patches)
    if mine is not None and same_entry(patches[mine], entry):
        out.reason(f"runtime patch {MANAGER} up to date: {describe_plan(plan, settings)}")
        native_notes(native, out)
        out.reason(*words.reasons, *kueue_reasons)
        out.warn(*kueue_warnings)
        return out.result(obj, extra=extra)
    if mine is not None:
        patches[mine] = entry
    else:
        patches.append(entry)
    out.reason(f"runtime patch {MANAGER}: {describe_plan(plan, settings)}")
    native_notes(native, out)
    out.reason(*words.reasons, *kueue_reasons)
    out.warn(*kueue_warnings)
    mutated, patch = _write(obj, patches)
    return out.result(mutated, patch, extra)
