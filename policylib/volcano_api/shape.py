"""The types of every field of a Volcano Job the policy reads (rule V1), and the budget of the fields it walks
(rule P7), all errors at once, before any rule reads a value."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..errors import (
    INT32_MAX,
    FieldError,
    FieldPath,
    Path,
    invalid,
    is_int,
    map_errors,
    required,
)
from ..limits import VOLCANO_ENTRIES, budget_errors
from .policies import validate_policy_shape


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
