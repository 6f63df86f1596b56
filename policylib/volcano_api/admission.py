"""Volcano's job admission, ported: the rules its webhook and ValidatingAdmissionPolicy apply to a
``batch.volcano.sh/v1alpha1`` Job (rules V1-V12, V20, V22, V23 of ``docs/specification.md``).

Ported from volcano-sh/volcano ``pkg/webhooks/admission/jobs/validate`` (admit_job.go
validateJobCreate): the Job as a whole and each task (plugins, volumes, dependencies, pod names) here, its
lifecycle policies in :mod:`.policies`, its network topology and partitions in :mod:`.partitions`, the types
of what the policy reads in :mod:`.shape`. As in :mod:`policylib.validation`, each rule is one function
returning every field error it finds, each with its field path; nothing is raised.
"""
from __future__ import annotations

from typing import Any

from ..errors import (
    MAX_NAME_CHARS,
    FieldError,
    FieldPath,
    Path,
    as_path,
    cut,
    duplicate,
    forbidden,
    invalid,
    is_int,
    not_supported,
    object_items,
    required,
)
from ..labels import dns1123_label_errors, dns1123_subdomain_errors, qualified_name_errors
from .partitions import (
    DEFAULT_VOLCANO_VERSION,
    validate_network_topology,
    validate_partition_policy,
    validate_partition_topology_mode,
    validate_task_topology_policy,
)
from .policies import RESTART_PARTITION, validate_job_restart_partition, validate_volcano_policies
from .shape import count_errors, depends_on_errors


def _validate_task(task: Any, path: FieldPath, version: str = DEFAULT_VOLCANO_VERSION) -> list[FieldError]:
    if not isinstance(task, dict):
        return [invalid(path, task, "must be an object")]
    errs: list[FieldError] = []
    name = task.get("name")
    if not isinstance(name, str):
        errs.append(required(path.child("name")))
    else:
        errs += [invalid(path.child("name"), name, m) for m in dns1123_label_errors(name)]
    replicas = task.get("replicas", 0)
    replica_errors = count_errors(replicas, path.child("replicas"))
    errs += replica_errors
    replicas = 0 if replica_errors else replicas
    min_available = task.get("minAvailable")
    if min_available is not None:
        available_errors = count_errors(min_available, path.child("minAvailable"))
        if available_errors:
            errs += available_errors
        elif min_available > replicas:
            errs.append(invalid(path.child("minAvailable"), min_available, "'minAvailable' is greater than 'replicas'"))
    errs += validate_volcano_policies(task.get("policies"), path.child("policies"))
    task_policies = task.get("policies")
    task_policies = task_policies if isinstance(task_policies, list) else []
    has_restart_partition = any(isinstance(pol, dict) and pol.get("action") == RESTART_PARTITION
                                for pol in task_policies)
    if has_restart_partition and task.get("partitionPolicy") is None:
        errs.append(forbidden(path.child("policies"), "RestartPartition has no effect on a task without a "
                                                      "partitionPolicy"))
    errs += validate_partition_policy(task, path, version)
    errs += validate_task_topology_policy(task, path)
    errs += depends_on_errors(task.get("dependsOn"), path.child("dependsOn"))
    return errs


#: Job plugins Volcano's job controller registers (pkg/controllers/job/plugins/factory.go).
VOLCANO_JOB_PLUGINS = ("ssh", "env", "svc", "tensorflow", "mpi", "pytorch", "hcclrank", "ray")


def validate_job_plugins(plugins: Any, tasks: list[Any], path: Path = "spec.plugins") -> list[FieldError]:
    """Rule V8: every plugin is one the job controller knows; the mpi plugin's ``--master`` (default
    ``master``) names a task of the job (admit_job.go validateJobCreate)."""
    if not isinstance(plugins, dict):
        return []
    path = as_path(path)
    errs = [not_supported(path.key(name), name, VOLCANO_JOB_PLUGINS) for name in plugins
            if name not in VOLCANO_JOB_PLUGINS]
    if "mpi" in plugins:
        master = "master"
        for arg in plugins.get("mpi") or []:
            if isinstance(arg, str) and arg.lstrip("-").startswith("master="):
                master = arg.split("=", 1)[1]
        names = [t.get("name") for t in tasks if isinstance(t, dict)]
        if master not in names:
            errs.append(invalid(path.key("mpi"), master, "the specified mpi master task was not found"))
    return errs


def validate_job_volumes(volumes: Any, path: Path = "spec.volumes") -> list[FieldError]:
    """Rule V9: mountPath required and unique; a volume names an existing claim (a valid name) or
    describes a new one, not both (util.go validateIO)."""
    if not isinstance(volumes, list):
        return []
    errs: list[FieldError] = []
    mounts: set[Any] = set()
    for _, p, volume in object_items(volumes, as_path(path), errs):
        mount = volume.get("mountPath")
        claim, claim_name = volume.get("volumeClaim"), volume.get("volumeClaimName")
        if not mount:
            errs.append(required(p.child("mountPath"), "mountPath is required"))
        elif mount in mounts:
            errs.append(duplicate(p.child("mountPath"), mount))
        mounts.add(mount)
        if claim is None and not claim_name:
            errs.append(required(p, "either volumeClaim or volumeClaimName must be specified"))
        elif claim_name and claim is not None:
            errs.append(forbidden(p, "volumeClaimName names an existing claim; volumeClaim describes a new "
                                     "one: not both"))
        elif claim_name:
            errs += [invalid(p.child("volumeClaimName"), claim_name, m)
                     for m in dns1123_subdomain_errors(str(claim_name))]
    return errs


def validate_task_dependencies(tasks: list[Any], path: Path = "spec.tasks") -> list[FieldError]:
    """Rule V10: tasks' ``dependsOn`` names form a directed acyclic graph over the job's tasks
    (util.go topoSort: a name that is no task of the job is never satisfied)."""
    # Names that are not strings, and dependsOn that is no list of strings, are field errors of their
    # own (validate_task_shape); here they name no task.
    names = [t.get("name") if isinstance(t.get("name"), str) else None for t in tasks if isinstance(t, dict)]
    deps: dict[str | None, list[str]] = {}
    for t in tasks:
        depends_on = t.get("dependsOn") if isinstance(t, dict) else None
        if isinstance(depends_on, dict) and isinstance(depends_on.get("name"), list):
            name = t.get("name") if isinstance(t.get("name"), str) else None
            deps[name] = [d for d in depends_on["name"] if isinstance(d, str)]
    if not deps:
        return []
    done = _startable(set(names), deps)
    if len(done) < len(names):
        stuck = [n for n in names if n not in done]
        return [invalid(path, stuck, "job has dependencies between tasks, but doesn't form a directed acyclic "
                                     "graph (DAG) over its tasks: these can never start")]
    return []


def _startable(names: set[str | None], deps: dict[str | None, list[str]]) -> set[str | None]:
    """The names whose dependencies all start, transitively (a name with no dependencies starts; a dependency
    that names no task never does): Kahn's topological sort, each name and each dependency visited once."""
    waiting: dict[str | None, set[str | None]] = {name: set(deps.get(name, ())) for name in names}
    needed_by: dict[str | None, list[str | None]] = {}
    for name, wanted in waiting.items():
        for d in wanted:
            needed_by.setdefault(d, []).append(name)
    ready = [name for name, wanted in waiting.items() if not wanted]
    done: set[str | None] = set()
    while ready:
        name = ready.pop()
        done.add(name)
        for dependent in needed_by.get(name, ()):
            wanted = waiting[dependent]
            wanted.discard(name)
            if not wanted and dependent not in done:
                ready.append(dependent)
    return done


def validate_pod_names(job: dict[str, Any], tasks: list[Any]) -> list[FieldError]:
    """Rule V11: the job's name and each pod name ``<job>-<task>-<index>`` are qualified names (at most
    63 characters; admit_job.go validateJobName, validateK8sPodNameLength)."""
    meta = job.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str):
        return []
    errs = [invalid("metadata.name", name, m) for m in qualified_name_errors(name)]
    for i, task in enumerate(tasks):
        if isinstance(task, dict) and isinstance(task.get("name"), str):
            pod = f"{name}-{task['name']}-{i}"
            errs += [invalid(FieldPath("spec", "tasks").index(i).child("name"), task["name"],
                             f"pod name {cut(pod, MAX_NAME_CHARS)}: {m}") for m in qualified_name_errors(pod)]
    return errs


def validate_volcano_job(job: dict[str, Any], version: str = DEFAULT_VOLCANO_VERSION) -> list[FieldError]:
    """Volcano's job admission rules for tasks, policies, partitionPolicy, plugins, volumes and task
    dependencies, as the given Volcano release applies them, with field paths (rules V2-V12)."""
    spec = job.get("spec")
    if not isinstance(spec, dict):
        return [required("spec")]
    errs: list[FieldError] = []
    tasks = spec.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        return [required("spec.tasks", "No task specified in job spec")]
    names: dict[str | None, int] = {}
    total = 0
    for i, task in enumerate(tasks):
        path = FieldPath("spec", "tasks").index(i)
        errs += _validate_task(task, path, version)
        if isinstance(task, dict):
            name = task.get("name") if isinstance(task.get("name"), str) else None
            if name is not None and name in names:
                errs.append(duplicate(path.child("name"), name))
            names[name] = i
            replicas = task.get("replicas", 0)
            total += replicas if is_int(replicas) else 0
    min_available = spec.get("minAvailable")
    if min_available is not None:
        if not is_int(min_available) or min_available < 0:
            errs.append(invalid("spec.minAvailable", min_available, "job 'minAvailable' must be >= 0"))
        elif min_available > total:
            errs.append(invalid("spec.minAvailable", min_available, "job 'minAvailable' should not be greater "
                                                                    f"than total replicas in tasks ({total})"))
    errs += validate_volcano_policies(spec.get("policies"), "spec.policies")
    errs += validate_job_restart_partition(spec.get("policies"))
    errs += validate_network_topology(spec.get("networkTopology"), "spec.networkTopology")
    if any(isinstance(t, dict) and t.get("partitionPolicy") is not None for t in tasks):
        errs += validate_partition_topology_mode(spec.get("networkTopology"), "spec.networkTopology")
    errs += validate_job_plugins(spec.get("plugins"), tasks)
    errs += validate_job_volumes(spec.get("volumes"))
    errs += validate_task_dependencies(tasks)
    errs += validate_pod_names(job, tasks)
    return errs
