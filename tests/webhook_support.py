"""Shared builders for the webhook tests: real AdmissionReview JSON from webhook/samples."""
from __future__ import annotations

import base64
import copy
import json
from pathlib import Path

import jsonpatch

SAMPLES = Path(__file__).resolve().parent.parent / "webhook" / "samples"
SAMPLE_NAMES = sorted(p.name for p in SAMPLES.glob("*.json"))
SVC_HOST = "policylib-webhook.policylib-system.svc"


def sample(name: str) -> dict:
    return json.loads((SAMPLES / name).read_text())


def review_of(obj: dict | None, operation: str = "CREATE", old: dict | None = None, uid: str = "uid-1",
              namespace: str | None = None, dry_run: bool = False) -> dict:
    """An admission.k8s.io/v1 AdmissionReview for ``obj`` (kind taken from its apiVersion/kind)."""
    source = obj or old or {"apiVersion": "v1", "kind": "ConfigMap"}
    group, _, version = source["apiVersion"].rpartition("/")
    meta = source.get("metadata") or {}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": group, "version": version, "kind": source["kind"]},
        "resource": {"group": group, "version": version, "resource": source["kind"].lower() + "s"},
        "name": meta.get("name"), "namespace": namespace or meta.get("namespace"), "operation": operation,
        "userInfo": {"username": "tester"}, "object": copy.deepcopy(obj), "oldObject": copy.deepcopy(old),
        "dryRun": dry_run}}


def patch_of(response: dict) -> list[dict]:
    """The decoded JSON patch of an AdmissionReview response (``[]`` when there is none)."""
    if "patch" not in response:
        assert "patchType" not in response
        return []
    assert response["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(response["patch"]))


def patched(obj: dict, response: dict) -> dict:
    """``obj`` with the response's patch applied by the jsonpatch library."""
    return jsonpatch.apply_patch(obj, patch_of(response))


# --- hypothesis strategies: Kubeflow and Volcano objects of any shape ---------------------------

from hypothesis import strategies as st  # noqa: E402 -- only the fuzz tests use these

#: Field names policylib reads, so that arbitrary objects often have the right keys in odd places.
FIELD_NAMES = ["apiVersion", "kind", "metadata", "spec", "name", "namespace", "labels", "annotations", "template",
               "replicas", "minAvailable", "tasks", "policies", "event", "events", "action", "exitCode",
               "partitionPolicy", "totalPartitions", "partitionSize", "minPartitions", "networkTopology", "mode",
               "highestTierAllowed", "highestTierName", "runPolicy", "schedulingPolicy", "minMember", "queue",
               "priorityClass", "priorityClassName", "schedulerName", "scheduleTimeoutSeconds", "elasticPolicy",
               "containers", "resources", "requests", "limits", "affinity", "topologySpreadConstraints"]
#: Label and annotation keys policylib reads or writes.
META_KEYS = ["policylib.io/skip", "policylib.io/partition-size", "scheduling.x-k8s.io/pod-group",
             "scheduling.k8s.io/group-name", "pod-group.scheduling.sigs.k8s.io",
             "pod-group.scheduling.sigs.k8s.io/name", "pod-group.scheduling.sigs.k8s.io/min-available",
             "pod-group.scheduling.sigs.k8s.io/groups", "gang.scheduling.koordinator.sh/name",
             "gang.scheduling.koordinator.sh/min-available", "gang.scheduling.koordinator.sh/total-number",
             "gang.scheduling.koordinator.sh/mode", "gang.scheduling.koordinator.sh/groups",
             "volcano.sh/network-topology-source", "app"]
WORDS = ["Worker", "Master", "Chief", "PS", "Launcher", "Evaluator", "true", "false", "none", "0", "1", "-1", "2",
         "PodEvicted", "PodFailed", "TaskCompleted", "*", "RestartPartition", "RestartTask", "RestartJob", "AbortJob",
         "hard", "soft", "Strict", "NonStrict", "volcano", "default-scheduler", "high", "[\"a\",\"b\"]", "", " "]

leaves = (st.none() | st.booleans() | st.integers(-2, 12) | st.integers() | st.sampled_from(WORDS)
          | st.text(max_size=8) | st.floats(allow_nan=False, allow_infinity=False))
anything = st.recursive(leaves, lambda children: st.lists(children, max_size=3) | st.dictionaries(
    st.sampled_from(FIELD_NAMES + META_KEYS) | st.text(max_size=6), children, max_size=4), max_leaves=16)


def maybe(strategy):
    """Mostly ``strategy``, sometimes any JSON value in its place."""
    return st.one_of(strategy, strategy, strategy, anything)


def fields(**optional):
    return maybe(st.fixed_dictionaries({}, optional=optional))


meta_maps = maybe(st.dictionaries(st.sampled_from(META_KEYS) | st.text(max_size=8),
                                  st.sampled_from(WORDS) | st.text(max_size=8) | leaves, max_size=4))
metadata = fields(name=maybe(st.sampled_from(["job", "a" * 70, ""]) | st.text(max_size=8)),
                  namespace=maybe(st.sampled_from(["ml", ""])), labels=meta_maps, annotations=meta_maps,
                  generateName=maybe(st.text(max_size=8)))
pod_template = fields(metadata=metadata, spec=fields(
    containers=maybe(st.lists(fields(name=leaves, image=leaves, resources=anything), max_size=2)),
    priorityClassName=maybe(st.sampled_from(WORDS)), schedulerName=maybe(st.sampled_from(WORDS)),
    affinity=anything, topologySpreadConstraints=anything))
#: Counts, including the int32 bound and past it (the API refuses those; nothing derived may overflow).
counts = maybe(st.integers(-2, 12) | st.sampled_from(["1", "x", 1.5, True, None, 2**31 - 1, 2**31, 2**40]))
replica_spec = fields(replicas=counts, template=pod_template, restartPolicy=maybe(st.sampled_from(WORDS)))
KUBEFLOW_SPECS = {"TFJob": "tfReplicaSpecs", "PyTorchJob": "pytorchReplicaSpecs", "MPIJob": "mpiReplicaSpecs"}


@st.composite
def kubeflow_jobs(draw) -> dict:
    """A ``kubeflow.org/v1`` TFJob, PyTorchJob or MPIJob with arbitrary replica specs."""
    kind = draw(st.sampled_from(sorted(KUBEFLOW_SPECS)))
    specs = maybe(st.dictionaries(st.sampled_from(WORDS[:6]) | st.text(max_size=6), replica_spec, max_size=3))
    spec = draw(fields(**{KUBEFLOW_SPECS[kind]: specs}, runPolicy=fields(schedulingPolicy=fields(
        minAvailable=counts, queue=maybe(st.sampled_from(WORDS)), priorityClass=maybe(st.sampled_from(WORDS)),
        scheduleTimeoutSeconds=counts)), elasticPolicy=fields(minReplicas=counts, maxReplicas=counts)))
    return {"apiVersion": "kubeflow.org/v1", "kind": kind, "metadata": draw(metadata), "spec": spec}


volcano_policies = maybe(st.lists(fields(event=maybe(st.sampled_from(WORDS)), events=maybe(st.lists(
    st.sampled_from(WORDS), max_size=2)), action=maybe(st.sampled_from(WORDS)), exitCode=counts), max_size=3))
network_topology = fields(mode=maybe(st.sampled_from(WORDS)), highestTierAllowed=counts,
                          highestTierName=maybe(st.sampled_from(WORDS)))
task_names = maybe(st.sampled_from(WORDS[:6]) | st.text(max_size=6))
#: ``dependsOn.name``: task names, and entries of any JSON type (lists and maps are unhashable).
depends_on = fields(name=maybe(st.lists(task_names, max_size=3)), iteration=maybe(st.sampled_from(WORDS)))
volcano_task = fields(name=task_names, replicas=counts, dependsOn=depends_on,
                      minAvailable=counts, template=pod_template, policies=volcano_policies,
                      partitionPolicy=fields(totalPartitions=counts, partitionSize=counts, minPartitions=counts,
                                             networkTopology=network_topology))


@st.composite
def volcano_jobs(draw) -> dict:
    """A ``batch.volcano.sh/v1alpha1`` Job with arbitrary tasks."""
    spec = draw(fields(tasks=maybe(st.lists(volcano_task, max_size=3)), minAvailable=counts,
                       queue=maybe(st.sampled_from(WORDS)), schedulerName=maybe(st.sampled_from(WORDS)),
                       policies=volcano_policies, networkTopology=network_topology, plugins=anything))
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": draw(metadata), "spec": spec}


def request_kind(obj: dict) -> dict:
    """``request.kind`` for an object: group, version and kind from its apiVersion and kind."""
    group, _, version = obj["apiVersion"].rpartition("/")
    return {"group": group, "version": version, "kind": obj["kind"]}
