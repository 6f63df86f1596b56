"""Reading a JobSet: its ReplicatedJobs, their pods and start waves, checked (rule J2), and its gangs (rule J1)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..constants import JOBSET_GROUP
from ..errors import (
    INT32_MAX,
    FieldError,
    FieldPath,
    PolicyError,
    cut,
    duplicate,
    forbidden,
    int32_errors,
    invalid,
    map_errors,
    not_supported,
    raise_if_any,
    required,
    too_many,
)
from ..gang import Gang, GangPlan, KubeflowJob, ReplicaType, gang_name, role_gang_name
from ..gang.job import read_gang_object
from ..labels import dns1123_label_errors
from ..limits import MAX_REPLICATED_JOBS
from .keys import IN_ORDER, KIND, VOLCANO_QUEUE

#: Where a JobSet keeps its ReplicatedJobs.
REPLICATED_JOBS = ("spec", "replicatedJobs")


@dataclass(frozen=True)
class ReplicatedJob:
    """One ReplicatedJob: its name and position, its Jobs and their pods, what it waits for, and its pod
    template's scheduler and priority class."""

    name: str
    index: int
    replicas: int
    pods_per_job: int
    depends_on: tuple[str, ...]
    scheduler_name: str | None
    priority_class: str | None

    @property
    def pods(self) -> int:
        return self.replicas * self.pods_per_job


@dataclass(frozen=True)
class JobSet:
    """What a JobSet's gangs depend on, read and checked (rule J2)."""

    name: str
    namespace: str
    jobs: tuple[ReplicatedJob, ...]
    in_order: bool
    #: The annotation ``scheduling.volcano.sh/queue-name``: the queue of a Volcano PodGroup (rule J3).
    queue: str | None = None

    @property
    def total(self) -> int:
        return sum(j.pods for j in self.jobs)

    def waves(self) -> list[list[ReplicatedJob]]:
        """Rule J1: the ReplicatedJobs that start together, in start order. A ReplicatedJob with ``dependsOn``
        starts after the ones it names (one wave after the latest of them); with ``startupPolicy InOrder`` each
        starts after the previous one is ready; the others start at once."""
        if self.in_order:
            return [[j] for j in self.jobs]
        wave: dict[str, int] = {}
        for j in self.jobs:
            wave[j.name] = 1 + max((wave[d] for d in j.depends_on), default=-1)
        out: list[list[ReplicatedJob]] = [[] for _ in range(max(wave.values(), default=-1) + 1)]
        for j in self.jobs:
            out[wave[j.name]].append(j)
        return out

    def gang_view(self) -> KubeflowJob:
        """The JobSet as the gang writers read a job (:class:`~policylib.gang.KubeflowJob`): one replica type per
        ReplicatedJob, its pods as replicas."""
        types = tuple(ReplicaType(j.name, j.pods, j.priority_class, str(template_path(j.index)), j.scheduler_name)
                      for j in self.jobs)
        return KubeflowJob(KIND, self.name, self.namespace, "replicatedJobs", types, None, None, self.queue,
                           api_group=JOBSET_GROUP)


def template_path(index: int) -> FieldPath:
    """The field path of a ReplicatedJob's pod template."""
    return FieldPath(*REPLICATED_JOBS).index(index).child("template", "spec", "template")


def pods_per_job(job_spec: dict[str, Any], path: FieldPath, errs: list[FieldError]) -> int:
    """Rule J1: the pods one Job runs at once: ``min(parallelism, completions)``, parallelism 1 when unset and
    completions equal to parallelism when unset (batch/v1 defaults; Kueue's JobSet PodSet count)."""
    parallelism, completions = job_spec.get("parallelism"), job_spec.get("completions")
    found: list[FieldError] = []
    if parallelism is not None:
        found += int32_errors(parallelism, path.child("parallelism"), 0)
    if completions is not None:
        found += int32_errors(completions, path.child("completions"), 0)
    errs += found
    if found:
        return 0
    p = 1 if parallelism is None else parallelism
    return p if completions is None else min(p, completions)


def _mapping(value: Any, path: FieldPath, errs: list[FieldError]) -> dict[str, Any]:
    errs += map_errors(value, path)
    return value if isinstance(value, dict) else {}


def _optional_string(value: Any, path: FieldPath, errs: list[FieldError]) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        errs.append(invalid(path, value, "must be a string"))
        return None
    return value


def _depends_on(raw: Any, path: FieldPath, index: int, earlier: set[str], errs: list[FieldError]) -> tuple[str, ...]:
    """``dependsOn``: names of earlier ReplicatedJobs (JobSet's webhook: not on the first one)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        errs.append(invalid(path, raw, "must be a list of {name, status}"))
        return ()
    if index == 0 and raw:
        errs.append(forbidden(path, "the first ReplicatedJob cannot use dependsOn (JobSet's validation)"))
        return ()
    names = []
    for k, item in enumerate(raw):
        name = item.get("name") if isinstance(item, dict) else None
        if not isinstance(name, str) or name not in earlier:
            errs.append(invalid(path.index(k).child("name"), name, "must name a ReplicatedJob listed before this one"))
            continue
        names.append(name)
    return tuple(names)


def _replicated_job(raw: Any, index: int, earlier: set[str], errs: list[FieldError]) -> ReplicatedJob | None:
    path = FieldPath(*REPLICATED_JOBS).index(index)
    if not isinstance(raw, dict):
        errs.append(invalid(path, raw, "must be a ReplicatedJob (name, replicas, template)"))
        return None
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        errs.append(required(path.child("name"), "each ReplicatedJob needs a name (its Jobs are named after it)"))
        name = None
    else:
        errs += [invalid(path.child("name"), cut(name), m) for m in dns1123_label_errors(name)]
        if name in earlier:
            errs.append(duplicate(path.child("name"), name))
    replicas = raw.get("replicas", 1)
    found = int32_errors(replicas, path.child("replicas"), 0)
    errs += found
    job = _mapping(raw.get("template"), path.child("template"), errs)
    job_spec = _mapping(job.get("spec"), path.child("template", "spec"), errs)
    per_job = pods_per_job(job_spec, path.child("template", "spec"), errs)
    pod = job_spec.get("template")
    pod_path = template_path(index)
    if not isinstance(pod, dict):
        errs.append(required(pod_path, "a Job template needs a pod template"))
        pod = {}
    meta = _mapping(pod.get("metadata"), pod_path.child("metadata"), errs)
    for part in ("labels", "annotations"):
        _mapping(meta.get(part), pod_path.child("metadata", part), errs)
    pod_spec = _mapping(pod.get("spec"), pod_path.child("spec"), errs)
    scheduler = _optional_string(pod_spec.get("schedulerName"), pod_path.child("spec", "schedulerName"), errs)
    priority = _optional_string(pod_spec.get("priorityClassName"), pod_path.child("spec", "priorityClassName"), errs)
    depends = _depends_on(raw.get("dependsOn"), path.child("dependsOn"), index, earlier, errs)
    if name is None:
        return None
    earlier.add(name)
    return ReplicatedJob(name, index, 0 if found else replicas, per_job, depends, scheduler, priority)


def read_jobset(obj: dict[str, Any], namespace: str | None = None) -> JobSet:
    """Rule J2: read and check what a JobSet's gangs depend on; bad input raises one :class:`PolicyError` listing
    every error with its field path (the name, each ReplicatedJob's name, replicas, parallelism, completions, pod
    template and dependsOn, ``startupPolicy``, and JobSet's own rule that InOrder and dependsOn exclude each other)."""
    errs: list[FieldError] = []
    namespace, ref, meta, name, spec = read_gang_object(obj, namespace, "JobSet", errs)
    raw_jobs = spec.get("replicatedJobs")
    jobs_path = FieldPath(*REPLICATED_JOBS)
    if not isinstance(raw_jobs, list) or not raw_jobs:
        errs.append(required(jobs_path, "a JobSet needs at least one ReplicatedJob"))
        raw_jobs = []
    if len(raw_jobs) > MAX_REPLICATED_JOBS:   # rule P7: no ReplicatedJob is read
        raise PolicyError.from_errors(ref, errs + [too_many(jobs_path, len(raw_jobs), MAX_REPLICATED_JOBS)])
    earlier: set[str] = set()
    jobs = [j for i, raw in enumerate(raw_jobs) if (j := _replicated_job(raw, i, earlier, errs)) is not None]
    startup = _mapping(spec.get("startupPolicy"), FieldPath("spec", "startupPolicy"), errs)
    order = startup.get("startupPolicyOrder")
    if order is not None and order not in ("AnyOrder", IN_ORDER):
        errs.append(not_supported(FieldPath("spec", "startupPolicy", "startupPolicyOrder"), order,
                                  ["AnyOrder", IN_ORDER]))
    in_order = order == IN_ORDER
    if in_order and any(j.depends_on for j in jobs):
        errs.append(forbidden(FieldPath("spec", "startupPolicy"), "StartupPolicy and DependsOn APIs are mutually "
                                                                  "exclusive (JobSet's validation)"))
    annotations = _mapping(meta.get("annotations"), FieldPath("metadata", "annotations"), errs)
    queue = _optional_string(annotations.get(VOLCANO_QUEUE), FieldPath("metadata", "annotations").key(VOLCANO_QUEUE),
                             errs)
    raise_if_any(ref, errs)
    assert isinstance(name, str)
    jobset = JobSet(name, namespace, tuple(jobs), in_order, queue)
    if jobset.total > INT32_MAX:
        raise_if_any(ref, [invalid(jobs_path, jobset.total, f"the pods add up to more than the {INT32_MAX} a gang's "
                                                           "minimum can hold (int32)")])
    return jobset


def plan_jobset_gangs(jobset: JobSet) -> GangPlan | None:
    """Rule J1: one gang per start wave whose pods add up to more than one, its minimum every pod of the wave
    (a later wave's pods are created only once the earlier ones run, so one gang over all waves could never
    fill); named after the JobSet when it has one gang, else ``<jobset>-<first ReplicatedJob of the wave>``
    (rule G3's shortening). None when no wave is a gang."""
    waves = [w for w in jobset.waves() if sum(j.pods for j in w) > 1]
    if not waves:
        return None
    gangs = []
    for wave in waves:
        pods = sum(j.pods for j in wave)
        name = gang_name(jobset.name) if len(waves) == 1 else role_gang_name(jobset.name, wave[0].name)
        gangs.append(Gang(name, pods, pods, tuple(j.name for j in wave if j.pods > 0)))
    return GangPlan(jobset.namespace, tuple(gangs))
