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

from policylib.constants import API_REQUEST_BYTES

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
    operation: str = "CREATE"
    old: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        return f"{self.family} {self.field}"

    def size(self) -> int:
        return len(orjson.dumps(self.obj))

    def body(self) -> bytes:
        """The AdmissionReview the API server sends for this case."""
        return orjson.dumps(review(self.obj, self.operation, self.old))


#: One configuration under which every family's policy does the most it does: Volcano partitions (size 2 divides
#: the tasks' 4 replicas) and gang method workload (it writes the Kubeflow templates' gang metadata and a gang
#: pod's schedulingGroup). The benchmark's server runs it; the in-process app too.
CONFIG = {"volcano": {"partitionSize": 2}, "gang": {"method": "workload", "scheduler": "kube-scheduler"}}
VOLCANO_CONFIG = GANG_CONFIG = POD_CONFIG = CONFIG


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


def labels(i: int) -> tuple[str, str]:
    return f"example.com/l{i}", "v"


def fill_labels(budget: int, base: dict[str, str] | None = None) -> dict[str, str]:
    """Distinct valid labels (key ``example.com/l<i>``, value ``v``) adding up to ``budget`` bytes, after ``base``."""
    out = dict(base or {})
    used = len(orjson.dumps(out))
    i = 0
    while True:
        key, value = labels(i)
        size = len(key) + len(value) + 6
        if used + size > budget:
            return out
        out[key] = value
        used += size
        i += 1


def strings(prefix: str) -> Callable[[int], str]:
    return lambda i: f"{prefix}{i}"


def nested_cases(budget: int = LIST_BUDGET) -> list[Case]:
    """Lists and maps inside the entries the policies read: a selector's labels, a term's namespaces, a task's
    dependencies, the labels of a template; and, for Volcano, the policies of as many tasks as the limit allows."""
    out: list[Case] = []
    many = fill_labels(budget // 2, LABELS)
    obj = deployment()
    obj["spec"]["selector"]["matchLabels"] = many
    obj["spec"]["template"]["metadata"]["labels"] = many
    out.append(Case("Deployment", "selector and template labels", obj, len(many)))
    values = fill(strings("v"), budget) + ["big"]
    obj = deployment()
    obj["spec"]["selector"] = {"matchExpressions": [{"key": "app", "operator": "In", "values": values}]}
    out.append(Case("Deployment", "selector expression values", obj, len(values)))
    obj = deployment({"containers": [dict(CONTAINER)], "topologySpreadConstraints": [
        dict(constraints(0), labelSelector={"matchLabels": fill_labels(budget)})]})
    out.append(Case("Deployment", "constraint selector labels", obj,
                    len(obj["spec"]["template"]["spec"]["topologySpreadConstraints"][0]["labelSelector"]["matchLabels"])))
    keys = fill(strings("example.com/k"), budget)
    obj = deployment({"containers": [dict(CONTAINER)], "topologySpreadConstraints": [
        dict(constraints(0), labelSelector={"matchLabels": dict(LABELS)}, matchLabelKeys=keys)]})
    out.append(Case("Deployment", "constraint matchLabelKeys", obj, len(keys)))
    namespaces = fill(strings("ns"), budget)
    obj = deployment({"containers": [dict(CONTAINER)], "affinity": {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": dict(LABELS)}, "topologyKey": "kubernetes.io/hostname",
             "namespaces": namespaces + ["tenant-a"]}]}}})
    out.append(Case("Deployment", "anti-affinity term namespaces", obj, len(namespaces) + 1))
    obj = deployment({"containers": [dict(CONTAINER)], "affinity": {"podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "podAffinityTerm": {"labelSelector": {"matchLabels": fill_labels(budget, LABELS)},
                                              "topologyKey": "kubernetes.io/hostname"}}]}}})
    out.append(Case("Deployment", "anti-affinity term selector labels", obj, len(
        obj["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
        ["podAffinityTerm"]["labelSelector"]["matchLabels"])))
    obj = deployment()
    obj["metadata"]["labels"] = fill_labels(budget, LABELS)
    out.append(Case("Deployment", "metadata labels", obj, len(obj["metadata"]["labels"])))
    per_task = max(1, budget // 500 // 44)
    job = volcano_job([dict(volcano_task(i), policies=[task_policies(j) for j in range(per_task)]) for i in range(500)])
    out.append(Case("Volcano Job", f"500 tasks x {per_task} policies", job, 500 * per_task, VOLCANO_CONFIG))
    job = volcano_job([volcano_task(0), dict(volcano_task(1), dependsOn={"name": fill(strings("t"), budget)})])
    out.append(Case("Volcano Job", "task dependsOn names", job, len(job["spec"]["tasks"][1]["dependsOn"]["name"]),
                    VOLCANO_CONFIG))
    job = volcano_job()
    job["spec"]["volumes"] = fill(lambda i: {"mountPath": f"/m{i}", "volumeClaimName": f"c{i}"}, budget)
    out.append(Case("Volcano Job", "job volumes", job, len(job["spec"]["volumes"]), VOLCANO_CONFIG))
    cpus = fill(lambda i: {"name": f"c{i}", "image": "x", "resources": {"requests": {"cpu": "1"}}}, budget)
    job = volcano_job([dict(volcano_task(0, {"containers": cpus}), topologyPolicy="single-numa-node")])
    out.append(Case("Volcano Job", "topologyPolicy containers", job, len(cpus), VOLCANO_CONFIG))
    job = volcano_job([volcano_task(0, {"containers": [dict(CONTAINER)]})])
    job["spec"]["tasks"][0]["template"]["metadata"] = {"labels": fill_labels(budget)}
    out.append(Case("Volcano Job", "template labels", job, len(job["spec"]["tasks"][0]["template"]["metadata"]["labels"]),
                    VOLCANO_CONFIG))
    specs = {"Master": replica_spec(replicas=1), "Worker": replica_spec()}
    specs["Worker"]["template"]["metadata"] = {"labels": fill_labels(budget)}
    out.append(Case("PyTorchJob", "template labels", pytorch_job(specs), len(specs["Worker"]["template"]["metadata"]["labels"]),
                    GANG_CONFIG))
    pod = gang_pod()
    pod["metadata"]["labels"] = fill_labels(budget, pod["metadata"]["labels"])
    out.append(Case("Pod", "metadata labels", pod, len(pod["metadata"]["labels"]), POD_CONFIG))
    return out


def count_fill(entry: Callable[[int], Any], n: int) -> list[Any]:
    return [entry(i) for i in range(n)]


def at_budget_cases() -> list[Case]:
    """The most each policy reads and still admits (rule P7's budgets, just under them), on CREATE and on the UPDATE
    that makes it read the most: the manifest applied again over what the policy wrote (``kubectl apply``), so it
    compares the new object with the old one entry by entry."""
    from policylib import mutate
    from policylib.limits import KUBEFLOW_ENTRIES, MAX_REPLICA_TYPES, SPREAD_ENTRIES, VOLCANO_ENTRIES
    out: list[Case] = []

    def with_update(case: Case) -> list[Case]:
        created = mutate(case.obj, case.config).object
        return [case, Case(case.family, case.field + " (UPDATE, re-applied)", case.obj, case.entries, case.config,
                           "UPDATE", created)]
    # a constraint with its selector is 7 entries (the item, 4 keys, matchLabels and its label); the spread adds 2
    spread = count_fill(lambda i: dict(constraints(i), labelSelector={"matchLabels": dict(LABELS)}),
                        (SPREAD_ENTRIES - 20) // 7)
    out += with_update(Case("Deployment", f"{len(spread):,} constraints (at the budget)", deployment(
        {"containers": [dict(CONTAINER)], "topologySpreadConstraints": spread}), len(spread), CONFIG))
    own = count_fill(own_anti_affinity, (SPREAD_ENTRIES - 20) // 7)
    out += with_update(Case("Deployment", f"{len(own):,} own anti-affinity terms (at the budget)", deployment(
        {"containers": [dict(CONTAINER)], "affinity": {"podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": own}}}), len(own), CONFIG))
    many = {f"example.com/l{i}": "v" for i in range(SPREAD_ENTRIES - 20)}
    obj = deployment()
    obj["spec"]["selector"]["matchLabels"] = many
    obj["spec"]["template"]["metadata"]["labels"] = many
    out += with_update(Case("Deployment", f"selector of {len(many):,} labels (at the budget)", obj, len(many), CONFIG))
    # a task is 4 entries (the item, name, replicas, template: its pod template is not counted)
    job_tasks = count_fill(volcano_task, (VOLCANO_ENTRIES - 20) // 4)
    out += with_update(Case("Volcano Job", f"{len(job_tasks)} tasks (at the budget)", volcano_job(job_tasks),
                            len(job_tasks), CONFIG))
    policies = [{"exitCode": i + 1, "action": "RestartJob"} for i in range((VOLCANO_ENTRIES - 30) // 3)]
    job = volcano_job([dict(volcano_task(0), policies=policies)])
    out += with_update(Case("Volcano Job", f"task of {len(policies)} policies (at the budget)", job, len(policies),
                            CONFIG))
    per_type = (KUBEFLOW_ENTRIES - 20) // MAX_REPLICA_TYPES
    specs = {}
    for t in range(MAX_REPLICA_TYPES):
        spec = replica_spec()
        spec["template"]["metadata"] = {"labels": {f"example.com/l{i}": "v" for i in range(per_type - 2)}}
        specs[f"R{t}"] = spec
    out += with_update(Case("PyTorchJob", f"{MAX_REPLICA_TYPES} replica types of {per_type - 2} labels (at the budget)",
                            pytorch_job(specs), MAX_REPLICA_TYPES * (per_type - 2), CONFIG))
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


# --- the largest review, for memory ----------------------------------------------------------------------------

def _filled_deployment(filler: bytes, count: int, field: bytes = b'"args"') -> bytes:
    """A Deployment's JSON whose first container's ``field`` is a list of ``count`` copies of ``filler``, written as
    bytes (no Python object of it is built)."""
    head = (b'{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"big","namespace":"tenant-a",'
            b'"labels":{"app":"big"}},"spec":{"replicas":6,"selector":{"matchLabels":{"app":"big"}},'
            b'"template":{"metadata":{"labels":{"app":"big"}},"spec":{"containers":[{"name":"main",'
            b'"image":"x",' + field + b':[')
    tail = b']}]}}}}'
    return head + b",".join([filler] * count) + tail


def _deep(depth: int) -> bytes:
    return b'{"a":' * depth + b'{}' + b'}' * depth


#: The shapes of the largest review: what a list is filled with, as JSON. ``[]`` and ``{"":{}}`` are the most
#: Python objects per byte (a list of 56 bytes per 3; two dicts per 8); ``env`` is the API's own shape (a Deployment's
#: env entries, each a map); ``deep`` nests maps 1,000 deep (legal JSON, under the parsers' depth limits), again and
#: again; ``strings`` is the fewest objects per byte (4 KiB strings).
MEMORY_SHAPES: dict[str, tuple[bytes, bytes]] = {
    "[] entries": (b"[]", b'"args"'),
    '{"":{}} entries': (b'{"":{}}', b'"args"'),
    'env {"name":""}': (b'{"name":""}', b'"env"'),
    "deep maps (1,000 levels)": (_deep(1000), b'"args"'),
    "4 KiB strings": (b'"' + b"x" * 4096 + b'"', b'"args"'),
}


def largest_review(shape: str, object_bytes: int = API_REQUEST_BYTES) -> bytes:
    """The UPDATE review of a Deployment of ``object_bytes`` (its list filled with ``shape``) over an old object as
    large: what the API server sends for the largest objects it accepts (3 MiB each), as bytes."""
    filler, field = MEMORY_SHAPES[shape]
    empty = len(_filled_deployment(b"", 0, field))
    count = max(1, (object_bytes - empty) // (len(filler) + 1))
    obj = _filled_deployment(filler, count, field)
    envelope = (b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"big",'
                b'"kind":{"group":"apps","version":"v1","kind":"Deployment"},'
                b'"resource":{"group":"apps","version":"v1","resource":"deployments"},"operation":"UPDATE",'
                b'"namespace":"tenant-a","name":"big","userInfo":{"username":"tenant"},"dryRun":true,')
    return envelope + b'"object":' + obj + b',"oldObject":' + obj + b"}}"
