"""The largest objects of each workload family the API server accepts, one list filled at a time.

The API server reads a request body of at most 3 MiB (``MaxRequestBodyBytes``, k8s.io/apiserver
pkg/server/config.go), so an object sent by ``kubectl create`` (``--dry-run=server`` too: nothing is
stored, so etcd's 1.5 MiB never applies) can spend about 3 MiB on one list. Each object here is valid
as the API server validates it (distinct names where the API wants them, distinct (topologyKey,
whenUnsatisfiable) pairs, ...): what a tenant can send, not what the API server refuses first. Entries
are as small as the API allows, so each list holds as many entries as fit.

Used by ``bench/bench_review_size.py`` (time per review against the size) and by the largest-review
memory test (tests/test_webhook_server.py).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import orjson

#: The API server's request body limit (MaxRequestBodyBytes): the largest object a client can send.
API_REQUEST_BYTES = 3 * 1024 * 1024
#: What each list is filled to: the limit less room for the rest of the object.
LIST_BUDGET = API_REQUEST_BYTES - 8 * 1024

LABELS = {"app": "big"}
CONTAINER = {"name": "main", "image": "registry.example.com/app:1"}


def deployment(pod_spec: dict[str, Any] | None = None, replicas: int = 6) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "big", "namespace": "tenant-a", "labels": dict(LABELS)},
            "spec": {"replicas": replicas, "selector": {"matchLabels": dict(LABELS)},
                     "template": {"metadata": {"labels": dict(LABELS)},
                                  "spec": pod_spec or {"containers": [dict(CONTAINER)]}}}}


def volcano_job(tasks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "big", "namespace": "tenant-a", "annotations": {"policylib.io/partition-size": "2"}},
            "spec": {"minAvailable": 4, "schedulerName": "volcano", "queue": "default",
                     "policies": [{"event": "PodEvicted", "action": "RestartJob"}],
                     "tasks": tasks if tasks is not None else [volcano_task(0)]}}


def volcano_task(i: int, pod_spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": f"t{i}", "replicas": 4,
            "template": {"spec": pod_spec or {"containers": [dict(CONTAINER)], "restartPolicy": "OnFailure"}}}


def replica_spec(pod_spec: dict[str, Any] | None = None, replicas: int = 2) -> dict[str, Any]:
    return {"replicas": replicas, "restartPolicy": "OnFailure",
            "template": {"spec": pod_spec or {"containers": [{"name": "pytorch", "image": "pytorch:2"}]}}}


def pytorch_job(specs: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "big", "namespace": "tenant-a"},
            "spec": {"pytorchReplicaSpecs": specs if specs is not None else
                     {"Master": replica_spec(replicas=1), "Worker": replica_spec()}}}


def gang_pod(pod_spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "big", "namespace": "tenant-a", "labels": {"policylib.io/scheduling-group": "g1"}},
            "spec": pod_spec or {"containers": [dict(CONTAINER)]}}


# --- the entries of each list, as small as the API server accepts them --------------------------------

def constraints(i: int) -> dict[str, Any]:
    """Distinct (topologyKey, whenUnsatisfiable) pairs (the API server refuses a repeated pair)."""
    return {"maxSkew": 1, "topologyKey": f"k{i // 2}", "whenUnsatisfiable": ("DoNotSchedule", "ScheduleAnyway")[i % 2]}


def constraints_with_selector(i: int) -> dict[str, Any]:
    """The shape a user writes: with a labelSelector (about 140 bytes each)."""
    return {"maxSkew": 1, "topologyKey": f"example.com/rack-{i}", "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": dict(LABELS)}}


def containers(i: int) -> dict[str, Any]:
    return {"name": f"c{i}", "image": "x"}


def env(i: int) -> dict[str, Any]:
    return {"name": f"E{i}"}


def volumes(i: int) -> dict[str, Any]:
    return {"name": f"v{i}", "emptyDir": {}}


def tolerations(i: int) -> dict[str, Any]:
    return {"operator": "Exists"}


def own_anti_affinity(i: int) -> dict[str, Any]:
    """Preferred pod anti-affinity terms selecting the Deployment's own pods (the ones the spread replaces)."""
    return {"weight": 1, "podAffinityTerm": {"labelSelector": {"matchLabels": dict(LABELS)},
                                             "topologyKey": f"k{i}"}}


def other_anti_affinity(i: int) -> dict[str, Any]:
    """Required pod anti-affinity terms selecting other pods (kept by the spread)."""
    return {"labelSelector": {"matchLabels": {"other": f"o{i}"}}, "topologyKey": "kubernetes.io/hostname"}


def node_terms(i: int) -> dict[str, Any]:
    return {"matchExpressions": [{"key": f"k{i}", "operator": "Exists"}]}


def tasks(i: int) -> dict[str, Any]:
    return volcano_task(i, {"containers": [{"name": "c", "image": "x"}]})


def task_policies(i: int) -> dict[str, Any]:
    return {"event": "PodFailed", "action": "RestartJob"}


def replica_specs(i: int) -> dict[str, Any]:
    return replica_spec({"containers": [{"name": "c", "image": "x"}]}, replicas=1)


def fill(entry: Callable[[int], Any], budget: int) -> list[Any]:
    """Entries ``entry(0), entry(1), ...`` whose JSON (with commas) adds up to at most ``budget`` bytes."""
    out, used = [], 2
    i = 0
    while True:
        item = entry(i)
        size = len(orjson.dumps(item)) + 1
        if used + size > budget:
            return out
        out.append(item)
        used += size
        i += 1


def fill_map(entry: Callable[[int], Any], budget: int) -> dict[str, Any]:
    """A map of replica types ``R0, R1, ...`` (replica specs are a map keyed by type)."""
    out, used = {}, 2
    i = 0
    while True:
        key, item = f"R{i}", entry(i)
        size = len(orjson.dumps({key: item})) - 1
        if used + size > budget:
            return out
        out[key] = item
        used += size
        i += 1


@dataclass(frozen=True)
class Case:
    """One object: a family, the list filled, its entries and a config that makes the policy do the most."""

    family: str
    field: str
    obj: dict[str, Any]
    entries: int
    config: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        return f"{self.family} {self.field}"

    def size(self) -> int:
        return len(orjson.dumps(self.obj))


VOLCANO_CONFIG = {"volcano": {"partitionSize": 2}}
GANG_CONFIG = {"gang": {"method": "podgroup", "scheduler": "scheduler-plugins"}}
POD_CONFIG = {"gang": {"method": "workload", "scheduler": "kube-scheduler"}}


def _pod_spec_cases(family: str, build: Callable[[dict[str, Any]], dict[str, Any]], budget: int,
                    config: dict[str, Any] | None) -> Iterator[Case]:
    """The lists of a pod spec, each filled in turn, inside the family's object."""
    for name, make in (("containers", containers), ("initContainers", containers), ("env", env),
                       ("volumes", volumes), ("tolerations", tolerations)):
        items = fill(make, budget)
        spec: dict[str, Any] = {"containers": [dict(CONTAINER)]}
        if name == "env":
            spec["containers"] = [dict(CONTAINER, env=items)]
        elif name == "containers":
            spec["containers"] = items
        else:
            spec[name] = items
        yield Case(family, name, build(spec), len(items), config)
    terms = fill(node_terms, budget)
    yield Case(family, "nodeAffinity terms", build({"containers": [dict(CONTAINER)], "affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}}), len(terms), config)
    own = fill(own_anti_affinity, budget // 2)
    other = fill(other_anti_affinity, budget // 2)
    yield Case(family, "podAntiAffinity terms", build({"containers": [dict(CONTAINER)], "affinity": {"podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": own,
        "requiredDuringSchedulingIgnoredDuringExecution": other}}}), len(own) + len(other), config)


def cases(budget: int = LIST_BUDGET) -> list[Case]:
    """Every family's largest objects, one filled list each, at ``budget`` bytes per list."""
    out: list[Case] = []
    spread = fill(constraints, budget)
    out.append(Case("Deployment", "topologySpreadConstraints", deployment(
        {"containers": [dict(CONTAINER)], "topologySpreadConstraints": spread}), len(spread)))
    out += _pod_spec_cases("Deployment", deployment, budget, None)
    job_tasks = fill(tasks, budget)
    out.append(Case("Volcano Job", "tasks", volcano_job(job_tasks), len(job_tasks), VOLCANO_CONFIG))
    policies = fill(task_policies, budget)
    with_policies = volcano_job([dict(volcano_task(0), policies=policies)])
    out.append(Case("Volcano Job", "task policies", with_policies, len(policies), VOLCANO_CONFIG))
    job_policies = volcano_job()
    job_policies["spec"]["policies"] = fill(task_policies, budget)
    out.append(Case("Volcano Job", "job policies", job_policies, len(job_policies["spec"]["policies"]),
                    VOLCANO_CONFIG))
    out += _pod_spec_cases("Volcano Job", lambda spec: volcano_job([volcano_task(0, spec)]), budget, VOLCANO_CONFIG)
    specs = fill_map(replica_specs, budget)
    out.append(Case("PyTorchJob", "replica specs", pytorch_job(specs), len(specs), GANG_CONFIG))
    out += _pod_spec_cases("PyTorchJob", lambda spec: pytorch_job({"Master": replica_spec(spec, 1),
                                                                   "Worker": replica_spec()}), budget, GANG_CONFIG)
    out += _pod_spec_cases("Pod", gang_pod, budget, POD_CONFIG)
    return out


def named_cases() -> list[Case]:
    """The two objects named in the project's performance target, at their own sizes: 20,000 topology spread
    constraints as users write them (with a labelSelector) and a Volcano Job of 3,000 tasks."""
    spread = [constraints_with_selector(i) for i in range(20000)]
    job_tasks = [volcano_task(i) for i in range(3000)]
    return [Case("Deployment", "20,000 topologySpreadConstraints", deployment(
                {"containers": [dict(CONTAINER)], "topologySpreadConstraints": spread}), len(spread)),
            Case("Volcano Job", "3,000 tasks", volcano_job(job_tasks), len(job_tasks), VOLCANO_CONFIG)]


def review(obj: dict[str, Any], operation: str = "CREATE", old: dict[str, Any] | None = None,
           uid: str = "big") -> dict[str, Any]:
    """The AdmissionReview the API server sends for ``obj``."""
    group, _, version = obj["apiVersion"].rpartition("/")
    meta = obj.get("metadata") or {}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": uid, "kind": {"group": group, "version": version, "kind": obj["kind"]},
                        "resource": {"group": group, "version": version, "resource": obj["kind"].lower() + "s"},
                        "operation": operation, "namespace": meta.get("namespace"), "name": meta.get("name"),
                        "userInfo": {"username": "tenant"}, "object": obj, "oldObject": old,
                        "dryRun": True}}


def updated(obj: dict[str, Any]) -> dict[str, Any]:
    """The same object with a changed label: an UPDATE's new object beside ``obj`` as the old one."""
    new = copy.deepcopy(obj)
    new["metadata"].setdefault("labels", {})["changed"] = "yes"
    return new
