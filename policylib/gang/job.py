"""Reading a Kubeflow job: what the gang depends on, checked (rule G7)."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..constants import KUBEFLOW_GROUP
from ..errors import (
    INT32_MAX,
    FieldError,
    FieldPath,
    Path,
    PolicyError,
    cut,
    duplicate,
    int32_errors,
    invalid,
    map_errors,
    object_ref,
    raise_if_any,
    required,
)
from ..facts import namespace_of
from ..limits import KUBEFLOW_ENTRIES, MAX_REPLICA_TYPES, budget, budget_errors, limit_errors
from .keys import REPLICA_SPECS


@dataclass(frozen=True)
class ReplicaType:
    """One replica spec: its key as written, pod count, priority class and field path."""

    key: str
    replicas: int
    priority_class: str | None
    path: str
    #: The template's ``schedulerName`` (None: the default scheduler); rule G21 reads it.
    scheduler_name: str | None = None


@dataclass(frozen=True)
class KubeflowJob:
    """What the gang depends on, read from a job and checked (a JobSet is read into one too:
    :meth:`policylib.jobset.read.JobSet.gang_view`)."""

    kind: str
    name: str
    namespace: str
    specs_key: str
    types: tuple[ReplicaType, ...]
    min_available: int | None
    schedule_timeout: int | None
    #: ``runPolicy.schedulingPolicy.queue``: the Volcano queue of its PodGroup (rule G21).
    queue: str | None = None
    #: The job's API group (the Workload's ``controllerRef``, rule G18).
    api_group: str = KUBEFLOW_GROUP

    @property
    def total(self) -> int:
        return sum(t.replicas for t in self.types)

    def shape(self) -> tuple[Any, ...]:
        """What the minimum is computed from: replicas per type (case-insensitive) and minAvailable."""
        return tuple(sorted((t.key.lower(), t.replicas) for t in self.types)), self.min_available

    def template_path(self, key: str) -> tuple[str, ...]:
        return ("spec", self.specs_key, key, "template")


def _mapping(value: Any, path: Path, errs: list[FieldError]) -> dict[str, Any]:
    """``value`` when it is a map (None reads as empty); else ``{}`` and an error in ``errs``."""
    errs += map_errors(value, path)
    return value if isinstance(value, dict) else {}


def read_gang_object(obj: dict[str, Any], namespace: str | None, what: str,
                     errs: list[FieldError]) -> tuple[str, str, dict[str, Any], Any, dict[str, Any]]:
    """What reading every gang object starts with (rule G7): its namespace, reference, metadata, name and spec.
    A missing name is an error added to ``errs`` (the gang is named after the ``what``, and a name from
    generateName is not known at admission); an object without a spec raises at once, with ``errs``."""
    namespace = namespace or namespace_of(obj)
    ref = object_ref(obj, namespace)
    meta = _mapping(obj.get("metadata"), FieldPath("metadata"), errs)
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        errs.append(required("metadata.name", f"the gang is named after the {what}, and a name from generateName "
                                              "is not known at admission"))
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise PolicyError.from_errors(ref, errs + [required("spec", f"a {obj.get('kind')} needs a spec")])
    return namespace, ref, meta, name, spec


def named_by_generate_name_only(obj: dict[str, Any]) -> bool:
    """The object has a generateName and no name: its gang, named after it, cannot be named at admission."""
    meta = obj.get("metadata")
    return isinstance(meta, dict) and not meta.get("name") and bool(meta.get("generateName"))


#: The warning for :func:`named_by_generate_name_only`, of a ``what``.
GENERATE_NAME_WARNING = ("the {what} has only generateName: its gang is named after the {what}, whose name is not "
                         "known at admission, so no gang metadata was written (set metadata.name)")


def replica_count(spec: dict[str, Any], path: FieldPath, errs: list[FieldError]) -> int:
    """``replicas`` of a replica spec; absent means 1 (training-operator setDefaultReplicas)."""
    value = spec.get("replicas")
    if value is None:
        return 1
    found = int32_errors(value, path.child("replicas"), 0)
    errs += found
    return 0 if found else value


def _replica_type(key: Any, rspec: Any, path: FieldPath, errs: list[FieldError]) -> ReplicaType | None:
    """One replica spec, read and checked (rule G7); None when it cannot be read."""
    if not isinstance(rspec, dict):
        errs.append(invalid(path, rspec, "must be a replica spec (replicas, template)"))
        return None
    template = rspec.get("template")
    count = replica_count(rspec, path, errs)
    if not isinstance(template, dict):
        errs.append(required(path.child("template"), "a replica spec needs a pod template"))
        return None
    meta = _mapping(template.get("metadata"), path.child("template", "metadata"), errs)
    for part in ("labels", "annotations"):
        _mapping(meta.get(part), path.child("template", "metadata", part), errs)
    pod_spec = _mapping(template.get("spec"), path.child("template", "spec"), errs)
    priority = pod_spec.get("priorityClassName") or None
    if priority is not None and not isinstance(priority, str):
        errs.append(invalid(path.child("template", "spec", "priorityClassName"), priority, "must be a string"))
    scheduler = pod_spec.get("schedulerName") or None
    if scheduler is not None and not isinstance(scheduler, str):
        errs.append(invalid(path.child("template", "spec", "schedulerName"), scheduler, "must be a string"))
        scheduler = None
    return ReplicaType(key, count, priority, str(path), scheduler)


#: What the gang policy's budget counts (rule P7), for the message.
KUBEFLOW_SCOPE = "the gang policy reads of the replica templates' metadata together"


def _walked_metadata(specs: dict[Any, Any], path: FieldPath) -> Iterator[tuple[str, Any]]:
    """The template metadata of each replica spec (its labels and annotations are read key by key: rule P7)."""
    for key, rspec in specs.items():
        template = rspec.get("template") if isinstance(rspec, dict) else None
        if isinstance(template, dict):
            yield str(path.child(cut(str(key)), "template", "metadata")), template.get("metadata")


def read_job(obj: dict[str, Any], namespace: str | None = None, update: bool = False) -> KubeflowJob:
    """Read and check what the gang depends on (rule G7); bad input raises one :class:`PolicyError`
    listing every error.

    Replica-type keys are matched case-insensitively, as training-operator does
    when it applies its defaults after admission, so ``Worker`` and ``worker``
    in one job are one type written twice.
    """
    errs: list[FieldError] = []
    namespace, ref, _, name, spec = read_gang_object(obj, namespace, "job", errs)
    specs_key = REPLICA_SPECS[obj["kind"]]
    specs_path = FieldPath("spec", specs_key)
    specs = spec.get(specs_key)
    if not isinstance(specs, dict):
        errs.append(required(specs_path, "a mapping of replica type to replica spec"))
        specs = {}
    too_many = limit_errors(specs, str(specs_path), MAX_REPLICA_TYPES) or \
        budget_errors(_walked_metadata(specs, specs_path), budget(KUBEFLOW_ENTRIES, update), KUBEFLOW_SCOPE)
    if too_many:  # rule P7: no replica spec is read
        raise PolicyError.from_errors(ref, errs + too_many)
    types = _replica_types(specs, specs_path, errs)
    policy_path = FieldPath("spec", "runPolicy", "schedulingPolicy")
    policy = _mapping(_mapping(spec.get("runPolicy"), FieldPath("spec", "runPolicy"), errs).get("schedulingPolicy"),
                      policy_path, errs)
    min_available = policy.get("minAvailable")
    if min_available is not None:
        errs += int32_errors(min_available, policy_path.child("minAvailable"), 1)
    timeout = policy.get("scheduleTimeoutSeconds")
    if timeout is not None:
        errs += int32_errors(timeout, policy_path.child("scheduleTimeoutSeconds"), 1)
    queue = policy.get("queue") or None
    if queue is not None and not isinstance(queue, str):
        errs.append(invalid(policy_path.child("queue"), queue, "must be a string"))
        queue = None
    raise_if_any(ref, errs)
    assert isinstance(name, str)  # a missing name is an error raised above
    job = KubeflowJob(obj["kind"], name, namespace, specs_key, tuple(types), min_available, timeout, queue)
    if min_available is None and job.total > INT32_MAX:
        # the gang's minimum (minMember, min-available) is an int32 field
        raise_if_any(ref, [invalid(specs_path, job.total, f"the replicas add up to more than the {INT32_MAX} a "
                                                          "gang's minimum can hold (int32)")])
    return job


def _replica_types(specs: dict[Any, Any], specs_path: FieldPath, errs: list[FieldError]) -> list[ReplicaType]:
    """Each replica type of ``specs`` read (rule G7); a key that repeats another in a different case is an error, as
    training-operator matches replica types case-insensitively; the errors are added to ``errs``."""
    types: list[ReplicaType] = []
    seen: dict[str, str] = {}
    for key, rspec in specs.items():
        path = specs_path.child(cut(str(key)))
        if not isinstance(key, str) or not key:
            errs.append(invalid(path, key, "a replica type must be a non-empty string such as Worker"))
            continue
        if key.lower() in seen:
            errs.append(duplicate(specs_path, key, f"the same replica type as {cut(repr(seen[key.lower()]))}: "
                                                   "training-operator matches replica types case-insensitively"))
            continue
        seen[key.lower()] = key
        rtype = _replica_type(key, rspec, path, errs)
        if rtype is not None:
            types.append(rtype)
    return types


def has_scheduling_policy(obj: dict[str, Any]) -> bool:
    run_policy = (obj.get("spec") or {}).get("runPolicy")
    return isinstance(run_policy, dict) and run_policy.get("schedulingPolicy") is not None
