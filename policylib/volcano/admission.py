"""Volcano's job admission, ported: the rules its webhook and ValidatingAdmissionPolicy apply to a
``batch.volcano.sh/v1alpha1`` Job (rules V1-V12, V20, V22, V23 of ``docs/specification.md``).

Ported from volcano-sh/volcano ``pkg/webhooks/admission/jobs/validate`` (admit_job.go
validateJobCreate, util.go validatePolicies) and the v1.14+ partitionPolicy rules; RestartPartition
at job level is what Volcano's optional ValidatingAdmissionPolicy denies. As in
:mod:`policylib.validation`, each rule is one function returning every field error it finds, each
with its field path; nothing is raised.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..constants import VOLCANO_VERSION
from ..errors import (
    INT32_MAX,
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
    map_errors,
    not_supported,
    object_items,
    required,
)
from ..labels import dns1123_label_errors, dns1123_subdomain_errors, qualified_name_errors
from ..limits import VOLCANO_ENTRIES, budget_errors
from ..quantity import whole_units

#: The events a Volcano lifecycle policy may name (util.go policyEventMap).
VOLCANO_POLICY_EVENTS = ("*", "PodFailed", "PodEvicted", "PodPending", "Unknown", "TaskCompleted", "TaskFailed",
                         "JobUpdated")
VOLCANO_POLICY_ACTIONS = ("AbortJob", "RestartJob", "RestartTask", "RestartPod", "RestartPartition",
                          "TerminateJob", "CompleteJob", "ResumeJob")
RESTART_PARTITION = "RestartPartition"
NETWORK_TOPOLOGY_MODES = ("hard", "soft")


def policy_events(policy: dict[str, Any]) -> list[str]:
    """``event`` and ``events`` merged, duplicates removed (util.go getEventList)."""
    events = policy.get("events") or []
    events = list(events) if isinstance(events, list) else [events]
    if policy.get("event"):
        events.append(policy["event"])
    return list(dict.fromkeys(e if isinstance(e, str) else repr(e) for e in events))


def validate_policy_shape(policies: Any, path: Path) -> list[FieldError]:
    """Rule V1: lifecycle policies are a list of objects whose ``event`` is a string, ``events`` a
    list of strings and ``exitCode`` an integer (the CRD's types)."""
    if policies is None:
        return []
    if not isinstance(policies, list):
        return [invalid(path, policies, "must be a list")]
    errs: list[FieldError] = []
    for _, p, policy in object_items(policies, as_path(path), errs):
        if policy.get("event") is not None and not isinstance(policy["event"], str):
            errs.append(invalid(p.child("event"), policy["event"], "must be a string"))
        events = policy.get("events")
        if events is not None and not (isinstance(events, list) and all(isinstance(e, str) for e in events)):
            errs.append(invalid(p.child("events"), events, "must be a list of strings"))
        code = policy.get("exitCode")
        if code is not None and not is_int(code):
            errs.append(invalid(p.child("exitCode"), code, "must be an integer"))
    return errs


def validate_volcano_policies(policies: Any, path: Path) -> list[FieldError]:
    """Rule V2 (validatePolicies): event xor exitCode, known events and actions, each event once,
    ``*`` alone."""
    if policies is None:
        return []
    if not isinstance(policies, list):
        return [invalid(path, policies, "must be a list")]
    path = as_path(path)
    errs: list[FieldError] = []
    seen_events: dict[str, int] = {}
    seen_codes: set[Any] = set()
    for i, p, policy in object_items(policies, path, errs):
        events = policy_events(policy)
        has_code = policy.get("exitCode") is not None
        if events and has_code:
            errs.append(forbidden(p, "must not specify event and exitCode simultaneously"))
            continue
        if not events and not has_code:
            errs.append(required(p, "either event or exitCode should be specified"))
            continue
        # Volcano checks the action of event policies only (util.go validatePolicies): an exitCode
        # policy with any action is admitted.
        if events and policy.get("action") not in VOLCANO_POLICY_ACTIONS:
            errs.append(not_supported(p.child("action"), policy.get("action"), VOLCANO_POLICY_ACTIONS))
        for event in events:
            if event not in VOLCANO_POLICY_EVENTS:
                errs.append(not_supported(p.child("event"), event, VOLCANO_POLICY_EVENTS))
            elif event in seen_events:
                errs.append(invalid(p, event, f"duplicate event {cut(event)} across different policy "
                                              f"(also in {path.index(seen_events[event])})"))
            else:
                seen_events[event] = i
        if has_code:
            code = policy["exitCode"]
            if not is_int(code):
                errs.append(invalid(p.child("exitCode"), code, "must be an integer"))
            elif code == 0:
                errs.append(invalid(p.child("exitCode"), code, "0 is not a valid error code"))
            elif code in seen_codes:
                errs.append(duplicate(p.child("exitCode"), code))
            else:
                seen_codes.add(code)
    if "*" in seen_events and len(seen_events) > 1:
        errs.append(forbidden(path, "if there's * here, no other policy should be here"))
    return errs


def validate_restart_partition_events(events: Any, path: Path) -> list[FieldError]:
    """Rule V3: the events of a RestartPartition policy are known Volcano events, each once, and
    ``*`` stands alone (validatePolicies)."""
    if events is None:
        return []
    if not isinstance(events, list):
        return [invalid(path, events, "must be a list of Volcano events")]
    path = as_path(path)
    errs = [not_supported(path.index(i), e, VOLCANO_POLICY_EVENTS)
            for i, e in enumerate(events) if e not in VOLCANO_POLICY_EVENTS]
    if errs:
        return errs
    if len(set(events)) != len(events):
        errs.append(invalid(path, events, "lists an event twice"))
    if "*" in events and len(events) > 1:
        errs.append(invalid(path, events, "'*' covers every event and must stand alone"))
    return errs


def is_soft(topology: Any) -> bool:
    return isinstance(topology, dict) and topology.get("mode") == "soft"


def validate_network_topology(spec: Any, path: Path) -> list[FieldError]:
    """Rule V4: mode hard or soft; highestTierAllowed and highestTierName are exclusive; a hard mode
    without either is not enforced by the scheduler."""
    if spec is None:
        return []
    if not isinstance(spec, dict):
        return [invalid(path, spec, "must be an object")]
    path = as_path(path)
    errs = []
    if spec.get("mode", "hard") not in NETWORK_TOPOLOGY_MODES:
        errs.append(not_supported(path.child("mode"), spec.get("mode"), NETWORK_TOPOLOGY_MODES))
    tier, name = spec.get("highestTierAllowed"), spec.get("highestTierName")
    if tier is not None and (not is_int(tier) or tier < 1):
        errs.append(invalid(path.child("highestTierAllowed"), tier, "must be an integer >= 1"))
    if name is not None and (not isinstance(name, str) or not name):
        errs.append(invalid(path.child("highestTierName"), name, "must be a non-empty tier name"))
    if tier is not None and name:
        errs.append(forbidden(path, "highestTierAllowed and highestTierName are exclusive: set one"))
    if spec.get("mode", "hard") == "hard" and tier is None and not name:
        errs.append(required(path, "hard mode needs highestTierAllowed or highestTierName; without one the "
                                   "Volcano scheduler silently does not enforce it"))
    return errs


def validate_partition_topology_mode(topology: Any, path: Path) -> list[FieldError]:
    """Rule V5: a partition policy does not support a soft network topology."""
    if not is_soft(topology):
        return []
    return [forbidden(as_path(path).child("mode"), "soft mode is not supported with a partition policy")]


#: Volcano releases whose job admission requires a task's minAvailable to equal minPartitions *
#: partitionSize even when minPartitions is omitted (0); later ones check it only for minPartitions > 0
#: (volcano issue 5401, fixed in v1.14.3 and v1.15.1).
STRICT_MIN_PARTITIONS = ("v1.14.0", "v1.14.1", "v1.14.2", "v1.15.0")
DEFAULT_VOLCANO_VERSION = VOLCANO_VERSION


def strict_min_partitions(version: str) -> bool:
    return version in STRICT_MIN_PARTITIONS


def partition_tier_name_enforced(version: str) -> bool:
    """Rule V20: whether Volcano's scheduler honours a partition's ``networkTopology.highestTierName``: from
    v1.15.0 (volcano issue 5189). Before, a partition bounded only by a tier name is not constrained at all
    (seen on vc-scheduler v1.14.1: a partition's two pods bound in two tier-1 HyperNodes)."""
    major, minor, _ = (int(x) for x in version.lstrip("v").split("."))
    return (major, minor) >= (1, 15)


def unenforced_partition_tier_name(policy: object, version: str) -> str | None:
    """Rule V20: the tier name a partitionPolicy is bounded by that ``version``'s scheduler ignores, or None."""
    topo = policy.get("networkTopology") if isinstance(policy, dict) else None
    if not isinstance(topo, dict) or partition_tier_name_enforced(version):
        return None
    if topo.get("highestTierName") and topo.get("highestTierAllowed") is None:
        return str(topo["highestTierName"])
    return None


def validate_partition_policy(task: dict[str, Any], path: Path, version: str = DEFAULT_VOLCANO_VERSION) -> list[FieldError]:
    """Rule V6: replicas == totalPartitions * partitionSize; minPartitions <= totalPartitions; a task
    minAvailable equals minPartitions * partitionSize when minPartitions > 0 (always, in the releases
    of :data:`STRICT_MIN_PARTITIONS`) (admit_job.go validatePartitionPolicy)."""
    pp = task.get("partitionPolicy")
    if pp is None:
        return []
    path = as_path(path)
    p = path.child("partitionPolicy")
    if not isinstance(pp, dict):
        return [invalid(p, pp, "must be an object")]
    errs = []
    total, size, min_parts = pp.get("totalPartitions"), pp.get("partitionSize"), pp.get("minPartitions", 0)
    for key, value in (("totalPartitions", total), ("partitionSize", size)):
        if not is_int(value) or value < 1:
            errs.append(invalid(p.child(key), value, "must be an integer >= 1"))
    if not is_int(min_parts) or min_parts < 0:
        errs.append(invalid(p.child("minPartitions"), min_parts, "must be an integer >= 0"))
    if errs:
        return errs
    assert isinstance(total, int) and isinstance(size, int) and isinstance(min_parts, int)  # checked above
    replicas = task.get("replicas", 0)
    if replicas != total * size:
        errs.append(invalid(path.child("replicas"), replicas, "must equal totalPartitions * partitionSize "
                                                              f"({total} * {size} = {total * size})"))
    if min_parts > total:
        errs.append(invalid(p.child("minPartitions"), min_parts, f"must be <= totalPartitions {total}"))
    if task.get("minAvailable") is not None and (min_parts > 0 or strict_min_partitions(version)) \
            and task["minAvailable"] != min_parts * size:
        errs.append(invalid(path.child("minAvailable"), task["minAvailable"],
                            f"must equal minPartitions * partitionSize ({min_parts} * {size} = {min_parts * size})"))
    errs += validate_network_topology(pp.get("networkTopology"), p.child("networkTopology"))
    errs += validate_partition_topology_mode(pp.get("networkTopology"), p.child("networkTopology"))
    return errs


def validate_task_topology_policy(task: dict[str, Any], path: Path) -> list[FieldError]:
    """Rule V7: a task with a topologyPolicy (other than none) needs a whole number of CPUs requested
    by every container and init container; a container without requests uses its limits
    (admit_job.go validateTaskTopoPolicy, guaranteedCPUs)."""
    policy = task.get("topologyPolicy")
    if not policy or policy == "none":
        return []
    pod = ((task.get("template") or {}).get("spec") or {}) if isinstance(task.get("template"), dict) else {}
    containers = [("containers", i, c) for i, c in enumerate(pod.get("containers") or [])] + \
        [("initContainers", i, c) for i, c in enumerate(pod.get("initContainers") or [])]
    for group, i, container in containers:
        resources = container.get("resources") or {} if isinstance(container, dict) else {}
        requests = resources.get("requests") or resources.get("limits") or {}
        if not whole_units(requests.get("cpu")):
            return [invalid(as_path(path).child("template", "spec", group).index(i).child("resources", "requests", "cpu"),
                            requests.get("cpu"),
                            f"the cpu request isn't an integer (topologyPolicy {policy} needs whole CPUs)")]
    return []


def count_errors(value: Any, path: Path, minimum: int | None = 0) -> list[FieldError]:
    """Rule V22: a count of the API's (replicas, minAvailable): an int32 of at least ``minimum`` (None:
    its lower bound is checked where its rule is). Nothing derived from a count past int32 (partitions,
    minimums) could be written, so the count itself is refused."""
    if not is_int(value) or (minimum is not None and value < minimum):
        return [invalid(path, value, "must be an integer" + (f" >= {minimum}" if minimum is not None else ""))]
    if value > INT32_MAX:
        return [invalid(path, value, f"must be less than or equal to {INT32_MAX} (int32)")]
    return []


def _int32_errors(value: Any, path: Path) -> list[FieldError]:
    """An integer field, when set."""
    return [] if value is None else count_errors(value, path, minimum=None)


def depends_on_errors(depends_on: Any, path: FieldPath) -> list[FieldError]:
    """Rule V23: a task's ``dependsOn`` is an object whose ``name`` is a list of task names (strings)."""
    if depends_on is None:
        return []
    if not isinstance(depends_on, dict):
        return [invalid(path, depends_on, "must be an object")]
    names = depends_on.get("name")
    if names is None:
        return []
    if not isinstance(names, list):
        return [invalid(path.child("name"), names, "must be a list of task names")]
    return [invalid(path.child("name").index(i), n, "must be a string") for i, n in enumerate(names)
            if not isinstance(n, str)]


def validate_task_shape(task: Any, path: FieldPath) -> list[FieldError]:
    """Rule V1: the types of the task fields the Volcano policy reads."""
    if not isinstance(task, dict):
        return [invalid(path, task, "must be an object")]
    errs: list[FieldError] = count_errors(task.get("replicas", 0), path.child("replicas"))
    if task.get("name") is not None and not isinstance(task["name"], str):
        errs.append(invalid(path.child("name"), task["name"], "must be a string"))
    errs += validate_policy_shape(task.get("policies"), path.child("policies"))
    errs += _int32_errors(task.get("minAvailable"), path.child("minAvailable"))
    if task.get("partitionPolicy") is not None and not isinstance(task["partitionPolicy"], dict):
        errs.append(invalid(path.child("partitionPolicy"), task["partitionPolicy"], "must be an object"))
    errs += depends_on_errors(task.get("dependsOn"), path.child("dependsOn"))
    return errs


#: What the Volcano policy's budget counts (rule P7), for the message.
VOLCANO_SCOPE = ("the Volcano policy reads of the tasks (but their pod templates), the job's policies, volumes and "
                 "plugins together")


def _walked_fields(spec: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """The fields the Volcano policy walks entry by entry (rule P7), in the order they are counted: the tasks (their
    templates skipped), the job's policies, volumes and plugins, and the containers of each task with a
    topologyPolicy (rule V7 reads their CPUs)."""
    tasks = spec.get("tasks")
    yield "spec.tasks", tasks
    for key in ("policies", "volumes", "plugins"):
        yield f"spec.{key}", spec.get(key)
    for i, task in enumerate(tasks if isinstance(tasks, list) else ()):
        if isinstance(task, dict) and task.get("topologyPolicy") not in (None, "", "none"):
            template = task.get("template")
            pod = template.get("spec") if isinstance(template, dict) else None
            for key in ("containers", "initContainers"):
                yield f"spec.tasks[{i}].template.spec.{key}", pod.get(key) if isinstance(pod, dict) else None


def validate_volcano_job_shape(job: dict[str, Any], entries: int = VOLCANO_ENTRIES) -> list[FieldError]:
    """Rule V1: the types of every field the Volcano policy reads, all errors at once; past ``entries``, the budget
    of the fields it walks, that error alone (rule P7: counted before any task is read)."""
    meta = job.get("metadata")
    errs = map_errors(meta, FieldPath("metadata"))
    for key in ("labels", "annotations"):
        errs += map_errors((meta if isinstance(meta, dict) else {}).get(key), FieldPath("metadata", key))
    spec = job.get("spec")
    if not isinstance(spec, dict):
        return errs + [required("spec", "a Volcano Job needs a spec")]
    tasks = spec.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        return errs + [required("spec.tasks", "a Volcano Job needs at least one task")]
    too_many = budget_errors(_walked_fields(spec), entries, VOLCANO_SCOPE, skip=frozenset({"template"}))
    if too_many:
        return errs + too_many
    errs += validate_policy_shape(spec.get("policies"), FieldPath("spec", "policies"))
    for i, task in enumerate(tasks):
        errs += validate_task_shape(task, FieldPath("spec", "tasks").index(i))
    errs += _int32_errors(spec.get("minAvailable"), FieldPath("spec", "minAvailable"))
    return errs


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


def validate_job_restart_partition(policies: Any, path: Path = "spec.policies") -> list[FieldError]:
    """Rule V12: RestartPartition is denied at job level (Volcano's ValidatingAdmissionPolicy)."""
    path = as_path(path)
    return [forbidden(path.index(i).child("action"), "RestartPartition is denied at job level (Volcano's "
                                                     "ValidatingAdmissionPolicy); use task policies")
            for i, policy in enumerate(policies if isinstance(policies, list) else [])
            if isinstance(policy, dict) and policy.get("action") == RESTART_PARTITION]


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

