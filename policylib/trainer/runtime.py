"""Reading a TrainJob and its runtime: what the TrainJob's pods are, checked (rules T1, T2)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import (
    FieldError,
    FieldPath,
    PolicyError,
    int32_errors,
    invalid,
    map_errors,
    not_supported,
    raise_if_any,
    required,
    too_many,
)
from ..facts import CLUSTER_TRAINING_RUNTIME, TRAINING_RUNTIME
from ..gang.job import read_gang_object
from ..jobset.read import JobSet, ReplicatedJob, read_jobset
from ..labels import qualified_name_errors
from .keys import ANCESTOR_LABEL, MAX_RUNTIME_PATCHES, TRAINER_STEP

RUNTIME_KINDS = (CLUSTER_TRAINING_RUNTIME, TRAINING_RUNTIME)


@dataclass(frozen=True)
class TrainJob:
    """What a TrainJob's gang depends on (rule T2)."""

    name: str
    namespace: str
    runtime_kind: str
    runtime_name: str
    num_nodes: int | None
    #: ``spec.runtimePatches`` as given (a list of maps, checked).
    patches: tuple[dict[str, Any], ...]
    suspended: bool

    @property
    def runtime_ref(self) -> str:
        return f"{self.runtime_kind} {self.runtime_name}"


def _mapping(value: Any, path: FieldPath, errs: list[FieldError]) -> dict[str, Any]:
    errs += map_errors(value, path)
    return value if isinstance(value, dict) else {}


def _patches(raw: Any, errs: list[FieldError]) -> tuple[dict[str, Any], ...]:
    """``spec.runtimePatches``: at most 16 maps, each with a unique domain-prefixed ``manager`` (Trainer's rules)."""
    path = FieldPath("spec", "runtimePatches")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        errs.append(invalid(path, raw, "must be a list of runtime patches"))
        return ()
    if len(raw) > MAX_RUNTIME_PATCHES:
        errs.append(too_many(path, len(raw), MAX_RUNTIME_PATCHES))
        return ()
    seen: set[str] = set()
    for i, patch in enumerate(raw):
        if not isinstance(patch, dict):
            errs.append(invalid(path.index(i), patch, "must be a runtime patch (manager, trainingRuntimeSpec)"))
            continue
        manager = patch.get("manager")
        if not isinstance(manager, str) or "/" not in manager or qualified_name_errors(manager.split("/", 1)[0] + "/x"):
            errs.append(invalid(path.index(i).child("manager"), manager,
                                'must be a domain-prefixed path (such as "acme.io/foo")'))
        elif manager in seen:
            errs.append(invalid(path.index(i).child("manager"), manager, "a manager has one entry (listMapKey)"))
        else:
            seen.add(manager)
    return tuple(p for p in raw if isinstance(p, dict))


def read_trainjob(obj: dict[str, Any], namespace: str | None = None) -> TrainJob:
    """Rule T2: read and check what a TrainJob's gang depends on, every error at once with its field path: the
    name, ``spec.runtimeRef`` (a name; kind ClusterTrainingRuntime, the default, or TrainingRuntime),
    ``spec.trainer.numNodes`` (int32, at least 1) and ``spec.runtimePatches`` (Trainer's rules)."""
    errs: list[FieldError] = []
    namespace, ref, meta, name, spec = read_gang_object(obj, namespace, "TrainJob", errs)
    runtime_ref = _mapping(spec.get("runtimeRef"), FieldPath("spec", "runtimeRef"), errs)
    runtime_name = runtime_ref.get("name")
    if not isinstance(runtime_name, str) or not runtime_name:
        errs.append(required(FieldPath("spec", "runtimeRef", "name"), "the runtime the TrainJob runs"))
    kind = runtime_ref.get("kind", CLUSTER_TRAINING_RUNTIME)
    if kind not in RUNTIME_KINDS:
        errs.append(not_supported(FieldPath("spec", "runtimeRef", "kind"), kind, list(RUNTIME_KINDS)))
    trainer = _mapping(spec.get("trainer"), FieldPath("spec", "trainer"), errs)
    num_nodes = trainer.get("numNodes")
    if num_nodes is not None:
        found = int32_errors(num_nodes, FieldPath("spec", "trainer", "numNodes"), 1)
        errs += found
        num_nodes = None if found else num_nodes
    patches = _patches(spec.get("runtimePatches"), errs)
    raise_if_any(ref, errs)
    assert isinstance(name, str) and isinstance(runtime_name, str)
    return TrainJob(name, namespace, str(kind), runtime_name, num_nodes, patches, spec.get("suspend") is True)


def _ml_policy(runtime: dict[str, Any]) -> dict[str, Any]:
    policy = (runtime.get("spec") or {}).get("mlPolicy")
    return policy if isinstance(policy, dict) else {}


def pod_group_policy(runtime: dict[str, Any]) -> str | None:
    """Which of Trainer's own PodGroups the runtime asks for (``spec.podGroupPolicy``: coscheduling or volcano),
    or None."""
    policy = (runtime.get("spec") or {}).get("podGroupPolicy")
    if not isinstance(policy, dict):
        return None
    return next((str(k) for k, v in policy.items() if v is not None), None)


def node_counts(trainjob: TrainJob, runtime: dict[str, Any], jobs: tuple[ReplicatedJob, ...]) -> dict[str, int]:
    """Rule T1: the pods per Job Trainer gives each replicated job (its ``parallelism = completions``; Trainer v2.3.0
    pkg/runtime/core/trainingruntime.go and the ML policy plugins): the job's parallelism (default 1); the one
    labelled as the trainer step, with an ``mlPolicy``, ``mlPolicy.numNodes`` (default 1), and with a plain, Torch,
    JAX or XGBoost policy the TrainJob's ``spec.trainer.numNodes`` when set; with MPI the job named ``node`` gets
    the TrainJob's node count (else ``mlPolicy.numNodes``), one less (at least 1) with ``runLauncherAsNode``."""
    policy = _ml_policy(runtime)
    nodes = policy.get("numNodes")
    policy_nodes: int = nodes if isinstance(nodes, int) and not isinstance(nodes, bool) and nodes >= 1 else 1
    mpi = policy.get("mpi") if isinstance(policy.get("mpi"), dict) else None
    templates = {}
    # runtime_jobset read the template first (rule J2): every level below is a map
    for rjob in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        if isinstance(rjob, dict):
            labels = ((rjob.get("template") or {}).get("metadata") or {}).get("labels") or {}
            templates[rjob.get("name")] = labels.get(ANCESTOR_LABEL) if isinstance(labels, dict) else None
    counts: dict[str, int] = {}
    for j in jobs:
        count: int = j.pods_per_job
        if templates.get(j.name) == TRAINER_STEP and policy:
            count = policy_nodes
            if mpi is None and trainjob.num_nodes is not None:
                count = trainjob.num_nodes
        if mpi is not None and j.name == "node":
            count = trainjob.num_nodes if trainjob.num_nodes is not None else policy_nodes
            if mpi.get("runLauncherAsNode") is True:
                count = max(1, count - 1)
        if not policy and templates.get(j.name) == TRAINER_STEP and trainjob.num_nodes is not None:
            count = trainjob.num_nodes
        counts[j.name] = count
    return counts


def runtime_jobset(trainjob: TrainJob, runtime: dict[str, Any]) -> JobSet:
    """Rules T1, J1: the JobSet Trainer makes of the TrainJob and its runtime, as far as the gangs go: the
    runtime's replicated jobs (read and checked as a JobSet's, rule J2, named under the runtime), each Job with the
    pods :func:`node_counts` gives it, named after the TrainJob."""
    rspec = runtime.get("spec")
    template = rspec.get("template") if isinstance(rspec, dict) else None
    spec = template.get("spec") if isinstance(template, dict) else None
    template_meta = template.get("metadata") if isinstance(template, dict) else None
    annotations = template_meta.get("annotations") if isinstance(template_meta, dict) else None
    as_jobset = {"apiVersion": "", "kind": "JobSet", "metadata": {
        "name": trainjob.name, "namespace": trainjob.namespace,   # the runtime's JobSet annotations: a Volcano queue
        **({"annotations": annotations} if isinstance(annotations, dict) else {})},
        "spec": spec if isinstance(spec, dict) else None}
    try:
        read = read_jobset(as_jobset, trainjob.namespace)
    except PolicyError as e:
        meta = runtime.get("metadata") or {}
        raise PolicyError.from_errors(f"{runtime.get('kind')} {meta.get('name')}",
                                      [err.under("spec.template") for err in e.errors]) from None
    counts = node_counts(trainjob, runtime, read.jobs)
    jobs = tuple(ReplicatedJob(j.name, j.index, j.replicas, counts[j.name], j.depends_on, j.scheduler_name,
                               j.priority_class) for j in read.jobs)
    return JobSet(trainjob.name, trainjob.namespace, jobs, read.in_order, read.queue)
