"""Ported upstream validation rules; every finding carries its field path.

``validate_topology_spread_constraints`` follows kubernetes
``pkg/apis/core/validation/validation.go``, ``validateTopologySpreadConstraints``
and the helpers it calls (ValidateMaxSkew, ValidateTopologyKey,
ValidateWhenUnsatisfiable, ValidateSpreadConstraintNotRepeat,
validateMinDomains, validateNodeInclusionPolicy,
validateMatchLabelKeysInTopologySpread, ValidateLabelSelector). Errors are
collected, not raised one at a time.
"""
from __future__ import annotations

from typing import Any

from .errors import FieldError
from .quantity import whole_units
from .labels import (dns1123_label_errors, dns1123_subdomain_errors, qualified_name_errors, selector_keys,
                     validate_label_selector)

TEMPLATE_CONSTRAINTS_PATH = "spec.template.spec.topologySpreadConstraints"
NODE_INCLUSION_POLICIES = ("Honor", "Ignore")
WHEN_UNSATISFIABLE = ("DoNotSchedule", "ScheduleAnyway")
_INT32_MAX = 2**31 - 1


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def validate_max_skew(value: Any, path: str) -> list[FieldError]:
    """ValidateMaxSkew: must be greater than zero."""
    if not _is_int(value) or value > _INT32_MAX:
        return [FieldError(path, f"Invalid value: {value!r}: must be a 32-bit integer")]
    if value <= 0:
        return [FieldError(path, f"Invalid value: {value}: must be greater than zero")]
    return []


def validate_topology_key(value: Any, path: str) -> list[FieldError]:
    """ValidateTopologyKey: must not be empty (syntax is checked by label rules)."""
    if not isinstance(value, str) or not value:
        return [FieldError(path, "Required value: can not be empty")]
    return []


def validate_when_unsatisfiable(value: Any, path: str) -> list[FieldError]:
    """ValidateWhenUnsatisfiable: DoNotSchedule or ScheduleAnyway."""
    if value not in WHEN_UNSATISFIABLE:
        return [FieldError(path, f'Unsupported value: {value!r}: supported values: "DoNotSchedule", "ScheduleAnyway"')]
    return []


def validate_not_repeated(constraint: dict, rest: list, path: str) -> list[FieldError]:
    """ValidateSpreadConstraintNotRepeat: one entry per (topologyKey, whenUnsatisfiable)."""
    pair = (constraint.get("topologyKey"), constraint.get("whenUnsatisfiable"))
    for other in rest:
        if isinstance(other, dict) and (other.get("topologyKey"), other.get("whenUnsatisfiable")) == pair:
            return [FieldError(path, f"Duplicate value: \"{{{pair[0]}, {pair[1]}}}\"")]
    return []


def validate_min_domains(value: Any, when: Any, path: str) -> list[FieldError]:
    """validateMinDomains: positive, and only with whenUnsatisfiable=DoNotSchedule."""
    if value is None:
        return []
    errs = []
    if not _is_int(value) or value <= 0:
        errs.append(FieldError(path, f"Invalid value: {value!r}: must be greater than zero"))
    if when != "DoNotSchedule":
        errs.append(FieldError(path, f"Invalid value: {value!r}: can only use minDomains if "
                                     f"whenUnsatisfiable=DoNotSchedule, not {when}"))
    return errs


def validate_node_inclusion_policy(value: Any, path: str) -> list[FieldError]:
    """validateNodeInclusionPolicy: Honor or Ignore when set."""
    if value is None or value in NODE_INCLUSION_POLICIES:
        return []
    return [FieldError(path, f'Unsupported value: {value!r}: supported values: "Honor", "Ignore"')]


def validate_match_label_keys(keys: Any, selector: Any, path: str) -> list[FieldError]:
    """validateMatchLabelKeysInTopologySpread: needs a labelSelector, valid keys, no overlap."""
    if not keys:
        return []
    if not isinstance(keys, list):
        return [FieldError(path, "must be a list of label keys")]
    errs = []
    if selector is None:
        errs.append(FieldError(path, "Forbidden: must not be specified when labelSelector is not set"))
    in_selector = selector_keys(selector) if isinstance(selector, dict) else set()
    for i, key in enumerate(keys):
        errs += [FieldError(f"{path}[{i}]", f"Invalid value: {key!r}: {m}") for m in qualified_name_errors(key)]
        if key in in_selector:
            errs.append(FieldError(f"{path}[{i}]", f"Invalid value: {key!r}: exists in both matchLabelKeys and labelSelector"))
    return errs


def validate_topology_spread_constraints(constraints: Any,
                                         path: str = TEMPLATE_CONSTRAINTS_PATH) -> list[FieldError]:
    """Every rule the API server applies to ``topologySpreadConstraints``.

    Returns a list of :class:`FieldError` (empty when valid), each with a path
    like ``spec.template.spec.topologySpreadConstraints[1].minDomains``.
    """
    if constraints is None:
        return []
    if not isinstance(constraints, list):
        return [FieldError(path, "must be a list")]
    errs: list[FieldError] = []
    for i, c in enumerate(constraints):
        p = f"{path}[{i}]"
        if not isinstance(c, dict):
            errs.append(FieldError(p, "must be an object"))
            continue
        errs += validate_max_skew(c.get("maxSkew"), f"{p}.maxSkew")
        errs += validate_topology_key(c.get("topologyKey"), f"{p}.topologyKey")
        errs += validate_when_unsatisfiable(c.get("whenUnsatisfiable"), f"{p}.whenUnsatisfiable")
        errs += validate_not_repeated(c, constraints[i + 1:], f"{p}.{{topologyKey, whenUnsatisfiable}}")
        errs += validate_min_domains(c.get("minDomains"), c.get("whenUnsatisfiable"), f"{p}.minDomains")
        errs += validate_node_inclusion_policy(c.get("nodeAffinityPolicy"), f"{p}.nodeAffinityPolicy")
        errs += validate_node_inclusion_policy(c.get("nodeTaintsPolicy"), f"{p}.nodeTaintsPolicy")
        errs += validate_match_label_keys(c.get("matchLabelKeys"), c.get("labelSelector"), f"{p}.matchLabelKeys")
        errs += validate_label_selector(c.get("labelSelector"), f"{p}.labelSelector")
    return errs


# --- Volcano Job admission rules ---------------------------------------------
# Ported from volcano-sh/volcano pkg/webhooks/admission/jobs/validate
# (admit_job.go validateJobCreate, util.go validatePolicies) and the v1.14+
# partitionPolicy rules; RestartPartition at job level is what Volcano's
# optional ValidatingAdmissionPolicy denies.

VOLCANO_POLICY_EVENTS = ("*", "PodFailed", "PodEvicted", "PodPending", "Unknown", "TaskCompleted", "TaskFailed",
                         "JobUpdated")
VOLCANO_POLICY_ACTIONS = ("AbortJob", "RestartJob", "RestartTask", "RestartPod", "RestartPartition",
                          "TerminateJob", "CompleteJob", "ResumeJob")
RESTART_PARTITION = "RestartPartition"


def policy_events(policy: dict) -> list[str]:
    """``event`` and ``events`` merged, duplicates removed (util.go getEventList)."""
    events = policy.get("events") or []
    events = list(events) if isinstance(events, list) else [events]
    if policy.get("event"):
        events.append(policy["event"])
    return list(dict.fromkeys(e if isinstance(e, str) else repr(e) for e in events))


def validate_volcano_policies(policies: Any, path: str) -> list[FieldError]:
    """validatePolicies: event xor exitCode, known events and actions, each event once, ``*`` alone."""
    if policies is None:
        return []
    if not isinstance(policies, list):
        return [FieldError(path, "must be a list")]
    errs: list[FieldError] = []
    seen_events: dict[str, int] = {}
    seen_codes: set = set()
    for i, policy in enumerate(policies):
        p = f"{path}[{i}]"
        if not isinstance(policy, dict):
            errs.append(FieldError(p, "must be an object"))
            continue
        events = policy_events(policy)
        has_code = policy.get("exitCode") is not None
        if events and has_code:
            errs.append(FieldError(p, "must not specify event and exitCode simultaneously"))
            continue
        if not events and not has_code:
            errs.append(FieldError(p, "either event or exitCode should be specified"))
            continue
        # Volcano checks the action of event policies only (util.go validatePolicies): an exitCode
        # policy with any action is admitted.
        if events and policy.get("action") not in VOLCANO_POLICY_ACTIONS:
            errs.append(FieldError(f"{p}.action", f"invalid policy action {policy.get('action')!r}"))
        for event in events:
            if event not in VOLCANO_POLICY_EVENTS:
                errs.append(FieldError(f"{p}.event", f"invalid policy event {event!r}"))
            elif event in seen_events:
                errs.append(FieldError(p, f"duplicate event {event} across different policy "
                                          f"(also in {path}[{seen_events[event]}])"))
            else:
                seen_events[event] = i
        if has_code:
            code = policy["exitCode"]
            if not _is_int(code):
                errs.append(FieldError(f"{p}.exitCode", f"must be an integer, got {code!r}"))
            elif code == 0:
                errs.append(FieldError(f"{p}.exitCode", "0 is not a valid error code"))
            elif code in seen_codes:
                errs.append(FieldError(f"{p}.exitCode", f"duplicate exitCode {code}"))
            seen_codes.add(code)
    if "*" in seen_events and len(seen_events) > 1:
        errs.append(FieldError(path, "if there's * here, no other policy should be here"))
    return errs


def validate_network_topology(spec: Any, path: str) -> list[FieldError]:
    """highestTierAllowed and highestTierName are exclusive; a hard mode without either is not enforced."""
    if spec is None:
        return []
    if not isinstance(spec, dict):
        return [FieldError(path, "must be an object")]
    errs = []
    if spec.get("mode", "hard") not in ("hard", "soft"):
        errs.append(FieldError(f"{path}.mode", f"Unsupported value: {spec.get('mode')!r}: supported values: \"hard\", \"soft\""))
    if spec.get("highestTierAllowed") is not None and spec.get("highestTierName"):
        errs.append(FieldError(path, "highestTierAllowed and highestTierName are exclusive"))
    if spec.get("mode", "hard") == "hard" and spec.get("highestTierAllowed") is None and not spec.get("highestTierName"):
        errs.append(FieldError(path, "hard mode without highestTierAllowed or highestTierName: the scheduler "
                                     "silently does not enforce it"))
    return errs


#: Volcano releases whose job admission requires a task's minAvailable to equal minPartitions *
#: partitionSize even when minPartitions is omitted (0); later ones check it only for minPartitions > 0
#: (volcano issue 5401, fixed in v1.14.3 and v1.15.1).
STRICT_MIN_PARTITIONS = ("v1.14.0", "v1.14.1", "v1.14.2", "v1.15.0")
DEFAULT_VOLCANO_VERSION = "v1.15.1"


def strict_min_partitions(version: str) -> bool:
    return version in STRICT_MIN_PARTITIONS


def partition_tier_name_enforced(version: str) -> bool:
    """Whether Volcano's scheduler honours a partition's ``networkTopology.highestTierName``: from v1.15.0
    (volcano issue 5189). Before, a partition bounded only by a tier name is not constrained at all (seen
    on vc-scheduler v1.14.1: a partition's two pods bound in two tier-1 HyperNodes)."""
    major, minor, _ = (int(x) for x in version.lstrip("v").split("."))
    return (major, minor) >= (1, 15)


def unenforced_partition_tier_name(policy: object, version: str) -> str | None:
    """The tier name a partitionPolicy is bounded by that ``version``'s scheduler ignores, or None."""
    topo = policy.get("networkTopology") if isinstance(policy, dict) else None
    if not isinstance(topo, dict) or partition_tier_name_enforced(version):
        return None
    if topo.get("highestTierName") and topo.get("highestTierAllowed") is None:
        return str(topo["highestTierName"])
    return None


def validate_partition_policy(task: dict, path: str, version: str = DEFAULT_VOLCANO_VERSION) -> list[FieldError]:
    """replicas == totalPartitions * partitionSize; minPartitions <= totalPartitions; a task
    minAvailable equals minPartitions * partitionSize when minPartitions > 0 (always, in the releases
    of :data:`STRICT_MIN_PARTITIONS`) (admit_job.go validatePartitionPolicy)."""
    pp = task.get("partitionPolicy")
    if pp is None:
        return []
    p = f"{path}.partitionPolicy"
    if not isinstance(pp, dict):
        return [FieldError(p, "must be an object")]
    errs = []
    total, size, min_parts = pp.get("totalPartitions"), pp.get("partitionSize"), pp.get("minPartitions", 0)
    for key, value in (("totalPartitions", total), ("partitionSize", size)):
        if not _is_int(value) or value < 1:
            errs.append(FieldError(f"{p}.{key}", f"must be an integer >= 1, got {value!r}"))
    if not _is_int(min_parts) or min_parts < 0:
        errs.append(FieldError(f"{p}.minPartitions", f"must be an integer >= 0, got {min_parts!r}"))
    if errs:
        return errs
    replicas = task.get("replicas", 0)
    if replicas != total * size:
        errs.append(FieldError(f"{path}.replicas", f"must equal totalPartitions * partitionSize "
                                                   f"({total} * {size} = {total * size}), got {replicas}"))
    if min_parts > total:
        errs.append(FieldError(f"{p}.minPartitions", f"must be <= totalPartitions {total}, got {min_parts}"))
    if task.get("minAvailable") is not None and (min_parts > 0 or strict_min_partitions(version)) \
            and task["minAvailable"] != min_parts * size:
        errs.append(FieldError(f"{path}.minAvailable", f"must equal minPartitions * partitionSize "
                                                       f"({min_parts} * {size} = {min_parts * size}), "
                                                       f"got {task['minAvailable']}"))
    errs += validate_network_topology(pp.get("networkTopology"), f"{p}.networkTopology")
    if isinstance(pp.get("networkTopology"), dict) and pp["networkTopology"].get("mode") == "soft":
        errs.append(FieldError(f"{p}.networkTopology.mode", "soft mode is not supported with a partition policy "
                                                             "(seed 001 \"Constraints\")"))
    return errs


def validate_task_topology_policy(task: dict, path: str) -> list[FieldError]:
    """A task with a topologyPolicy (other than none) needs a whole number of CPUs requested by every
    container and init container; a container without requests uses its limits
    (admit_job.go validateTaskTopoPolicy, guaranteedCPUs)."""
    policy = task.get("topologyPolicy")
    if not policy or policy == "none":
        return []
    pod = ((task.get("template") or {}).get("spec") or {}) if isinstance(task.get("template"), dict) else {}
    containers = [("containers", i, c) for i, c in enumerate(pod.get("containers") or [])] + \
        [("initContainers", i, c) for i, c in enumerate(pod.get("initContainers") or [])]
    for n, (group, i, container) in enumerate(containers):
        resources = container.get("resources") or {} if isinstance(container, dict) else {}
        requests = resources.get("requests") or resources.get("limits") or {}
        if not whole_units(requests.get("cpu")):
            return [FieldError(f"{path}.template.spec.{group}[{i}].resources.requests.cpu",
                               f"the cpu request isn't an integer (topologyPolicy {policy} needs whole CPUs), "
                               f"got {requests.get('cpu')!r}")]
    return []


def _validate_task(task: Any, path: str, version: str = DEFAULT_VOLCANO_VERSION) -> list[FieldError]:
    if not isinstance(task, dict):
        return [FieldError(path, "must be an object")]
    errs: list[FieldError] = []
    name = task.get("name")
    if not isinstance(name, str):
        errs.append(FieldError(f"{path}.name", "Required value"))
    else:
        errs += [FieldError(f"{path}.name", m) for m in dns1123_label_errors(name)]
    replicas = task.get("replicas", 0)
    if not _is_int(replicas) or replicas < 0:
        errs.append(FieldError(f"{path}.replicas", f"must be an integer >= 0, got {replicas!r}"))
        replicas = 0
    min_available = task.get("minAvailable")
    if min_available is not None:
        if not _is_int(min_available) or min_available < 0:
            errs.append(FieldError(f"{path}.minAvailable", f"must be an integer >= 0, got {min_available!r}"))
        elif min_available > replicas:
            errs.append(FieldError(f"{path}.minAvailable", "'minAvailable' is greater than 'replicas'"))
    errs += validate_volcano_policies(task.get("policies"), f"{path}.policies")
    task_policies = task.get("policies") if isinstance(task.get("policies"), list) else []
    has_restart_partition = any(isinstance(pol, dict) and pol.get("action") == RESTART_PARTITION
                                for pol in task_policies)
    if has_restart_partition and task.get("partitionPolicy") is None:
        errs.append(FieldError(f"{path}.policies", "RestartPartition has no effect on a task without a partitionPolicy"))
    errs += validate_partition_policy(task, path, version)
    errs += validate_task_topology_policy(task, path)
    return errs


#: Job plugins Volcano's job controller registers (pkg/controllers/job/plugins/factory.go).
VOLCANO_JOB_PLUGINS = ("ssh", "env", "svc", "tensorflow", "mpi", "pytorch", "hcclrank", "ray")


def validate_job_plugins(plugins: Any, tasks: list, path: str = "spec.plugins") -> list[FieldError]:
    """Every plugin is one the job controller knows; the mpi plugin's ``--master`` (default ``master``)
    names a task of the job (admit_job.go validateJobCreate)."""
    if not isinstance(plugins, dict):
        return []
    errs = [FieldError(f"{path}[{name}]", f"unable to find job plugin: {name}")
            for name in plugins if name not in VOLCANO_JOB_PLUGINS]
    if "mpi" in plugins:
        master = "master"
        for arg in plugins.get("mpi") or []:
            if isinstance(arg, str) and arg.lstrip("-").startswith("master="):
                master = arg.split("=", 1)[1]
        names = [t.get("name") for t in tasks if isinstance(t, dict)]
        if master not in names:
            errs.append(FieldError(f"{path}[mpi]", f"the specified mpi master task {master!r} was not found"))
    return errs


def validate_job_volumes(volumes: Any, path: str = "spec.volumes") -> list[FieldError]:
    """mountPath required and unique; a volume names an existing claim (a valid name) or describes a
    new one, not both (util.go validateIO)."""
    if not isinstance(volumes, list):
        return []
    errs: list[FieldError] = []
    mounts: set = set()
    for i, volume in enumerate(volumes):
        p = f"{path}[{i}]"
        if not isinstance(volume, dict):
            errs.append(FieldError(p, "must be an object"))
            continue
        mount = volume.get("mountPath")
        claim, claim_name = volume.get("volumeClaim"), volume.get("volumeClaimName")
        if not mount:
            errs.append(FieldError(f"{p}.mountPath", "mountPath is required"))
        elif mount in mounts:
            errs.append(FieldError(f"{p}.mountPath", f"duplicated mountPath: {mount}"))
        mounts.add(mount)
        if claim is None and not claim_name:
            errs.append(FieldError(p, "either volumeClaim or volumeClaimName must be specified"))
        elif claim_name and claim is not None:
            errs.append(FieldError(p, "volumeClaimName names an existing claim; volumeClaim describes a new "
                                      "one: not both"))
        elif claim_name:
            errs += [FieldError(f"{p}.volumeClaimName", f"invalid VolumeClaimName {claim_name}: {m}")
                     for m in dns1123_subdomain_errors(str(claim_name))]
    return errs


def validate_task_dependencies(tasks: list, path: str = "spec.tasks") -> list[FieldError]:
    """Tasks' ``dependsOn`` names form a directed acyclic graph over the job's tasks (util.go topoSort:
    a name that is no task of the job is never satisfied)."""
    names = [t.get("name") for t in tasks if isinstance(t, dict)]
    deps = {}
    for t in tasks:
        if isinstance(t, dict) and isinstance(t.get("dependsOn"), dict):
            deps[t.get("name")] = [d for d in t["dependsOn"].get("name") or []]
    if not deps:
        return []
    done: set = set()
    progress = True
    while progress:
        progress = False
        for name in names:
            if name not in done and all(d in done for d in deps.get(name, [])):
                done.add(name)
                progress = True
    if len(done) < len(names):
        stuck = [n for n in names if n not in done]
        return [FieldError(path, "job has dependencies between tasks, but doesn't form a directed acyclic graph "
                                 f"(DAG) over its tasks: {', '.join(map(str, stuck))} can never start")]
    return []


def validate_pod_names(job: dict, tasks: list) -> list[FieldError]:
    """The job's name and each pod name ``<job>-<task>-<index>`` are qualified names (at most 63
    characters; admit_job.go validateJobName, validateK8sPodNameLength)."""
    name = (job.get("metadata") or {}).get("name")
    if not isinstance(name, str):
        return []
    errs = [FieldError("metadata.name", f"create job with name {name} validate failed: {m}")
            for m in qualified_name_errors(name)]
    for i, task in enumerate(tasks):
        if isinstance(task, dict) and isinstance(task.get("name"), str):
            pod = f"{name}-{task['name']}-{i}"
            errs += [FieldError(f"spec.tasks[{i}].name", f"create pod with name {pod} validate failed: {m}")
                     for m in qualified_name_errors(pod)]
    return errs


def validate_volcano_job(job: dict, version: str = DEFAULT_VOLCANO_VERSION) -> list[FieldError]:
    """Volcano's job admission rules for tasks, policies, partitionPolicy, plugins, volumes and task
    dependencies, as the given Volcano release applies them, with field paths."""
    spec = job.get("spec")
    if not isinstance(spec, dict):
        return [FieldError("spec", "Required value")]
    errs: list[FieldError] = []
    tasks = spec.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        return [FieldError("spec.tasks", "No task specified in job spec")]
    names: dict = {}
    total = 0
    for i, task in enumerate(tasks):
        errs += _validate_task(task, f"spec.tasks[{i}]", version)
        if isinstance(task, dict):
            name = task.get("name") if isinstance(task.get("name"), str) else None
            if name is not None and name in names:
                errs.append(FieldError(f"spec.tasks[{i}].name", f"duplicated task name {name}"))
            names[name] = i
            replicas = task.get("replicas", 0)
            total += replicas if _is_int(replicas) else 0
    min_available = spec.get("minAvailable")
    if min_available is not None:
        if not _is_int(min_available) or min_available < 0:
            errs.append(FieldError("spec.minAvailable", "job 'minAvailable' must be >= 0"))
        elif min_available > total:
            errs.append(FieldError("spec.minAvailable", "job 'minAvailable' should not be greater than total "
                                                        f"replicas in tasks ({total})"))
    errs += validate_volcano_policies(spec.get("policies"), "spec.policies")
    job_policies = spec.get("policies") if isinstance(spec.get("policies"), list) else []
    for i, policy in enumerate(job_policies):
        if isinstance(policy, dict) and policy.get("action") == RESTART_PARTITION:
            errs.append(FieldError(f"spec.policies[{i}].action", "RestartPartition is denied at job level "
                                                                 "(Volcano's ValidatingAdmissionPolicy); use task policies"))
    errs += validate_network_topology(spec.get("networkTopology"), "spec.networkTopology")
    topology = spec.get("networkTopology")
    if isinstance(topology, dict) and topology.get("mode") == "soft" and \
            any(isinstance(t, dict) and t.get("partitionPolicy") is not None for t in tasks):
        errs.append(FieldError("spec.networkTopology.mode", "soft mode is not supported together with a partition "
                                                            "policy (seed 001 \"Constraints\")"))
    errs += validate_job_plugins(spec.get("plugins"), tasks)
    errs += validate_job_volumes(spec.get("volumes"))
    errs += validate_task_dependencies(tasks)
    errs += validate_pod_names(job, tasks)
    return errs
