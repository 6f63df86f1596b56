"""Seed 002 (gang scheduling, ACK) and rules G1-G20, rule by rule, with the seed's tf-smoke-gpu job as the case."""
import copy
import json
import re

import jsonpatch
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from policylib import PolicyError, load_config, mutate, mutate_kubeflow_job, validate_gang_labels
from policylib.gang import (
    ACK_GROUPS,
    ACK_MATCH_POLICY,
    KOORD_GROUPS,
    KOORD_MATCH_POLICY,
    KOORD_MIN_AVAILABLE,
    KOORD_MODE,
    KOORD_NAME,
    KOORD_TOTAL_NUMBER,
    KOORD_WAITING_TIME,
    LEGACY_POD_GROUP_LABEL,
    MIN_AVAILABLE_LABEL,
    NAME_LABEL,
    POD_GROUP_LABEL,
    VOLCANO_GROUP_NAME,
    gang_name,
    is_kubeflow_job,
    role_gang_name,
)
from policylib.labels import dns1123_subdomain_errors, label_value_errors
from policylib.spread import SKIP_KEY
from tests.helpers import shared_path

# The seed's "Contoh: pekerjaan TensorFlow terdistribusi", step 2, verbatim (1 PS + 4 workers, min-available 5).
SEED_TFJOB = yaml.safe_load('''
apiVersion: "kubeflow.org/v1"
kind: "TFJob"
metadata:
  name: "tf-smoke-gpu"
spec:
  tfReplicaSpecs:
    PS:
      replicas: 1
      template:
        metadata:
          creationTimestamp: null
          labels:
            pod-group.scheduling.sigs.k8s.io/name: tf-smoke-gpu
            pod-group.scheduling.sigs.k8s.io/min-available: "5"
        spec:
          containers:
          - args:
            - python
            - tf_cnn_benchmarks.py
            - --batch_size=32
            - --model=resnet50
            - --variable_update=parameter_server
            - --flush_stdout=true
            - --num_gpus=1
            - --local_parameter_device=cpu
            - --device=cpu
            - --data_format=NHWC
            image: registry.cn-hangzhou.aliyuncs.com/kubeflow-images-public/tf-benchmarks-cpu:v20171202-bdab599-dirty-284af3
            name: tensorflow
            ports:
            - containerPort: 2222
              name: tfjob-port
            resources:
              limits:
                cpu: '1'
            workingDir: /opt/tf-benchmarks/scripts/tf_cnn_benchmarks
          restartPolicy: OnFailure
    Worker:
      replicas: 4
      template:
        metadata:
          creationTimestamp: null
          labels:
            pod-group.scheduling.sigs.k8s.io/name: tf-smoke-gpu
            pod-group.scheduling.sigs.k8s.io/min-available: "5"
        spec:
          containers:
          - args:
            - python
            - tf_cnn_benchmarks.py
            - --batch_size=32
            - --model=resnet50
            - --variable_update=parameter_server
            - --flush_stdout=true
            - --num_gpus=1
            - --local_parameter_device=cpu
            - --device=gpu
            - --data_format=NHWC
            image: registry.cn-hangzhou.aliyuncs.com/kubeflow-images-public/tf-benchmarks-gpu:v20171202-bdab599-dirty-284af3
            name: tensorflow
            ports:
            - containerPort: 2222
              name: tfjob-port
            resources:
              limits:
                nvidia.com/gpu: 2
            workingDir: /opt/tf-benchmarks/scripts/tf_cnn_benchmarks
          restartPolicy: OnFailure
''')
SEED_FILE = ("seeds", "002_554a93da35a9ca66.txt")
TYPES = ("PS", "Worker")
#: Every method x scheduler combination the config accepts (check_gang rejects the rest).
COMBINATIONS = [("labels", "ack"), ("labels", "koordinator"), ("podgroup", "ack"), ("podgroup", "koordinator"),
                ("podgroup", "scheduler-plugins"), ("koordinator", "ack"), ("koordinator", "koordinator")]


def bare_seed_job() -> dict:
    """The seed's job as a user submits it: no gang labels (the template keeps creationTimestamp: null)."""
    job = copy.deepcopy(SEED_TFJOB)
    for spec in job["spec"]["tfReplicaSpecs"].values():
        del spec["template"]["metadata"]["labels"]
    return job


def cfg(**gang):
    return load_config({"gang": gang})


def templates(obj: dict) -> dict:
    key = {"TFJob": "tfReplicaSpecs", "PyTorchJob": "pytorchReplicaSpecs", "MPIJob": "mpiReplicaSpecs"}[obj["kind"]]
    return {k: v["template"] for k, v in obj["spec"][key].items()}


def labels_of(obj, rtype):
    return (templates(obj)[rtype].get("metadata") or {}).get("labels") or {}


def annotations_of(obj, rtype):
    return (templates(obj)[rtype].get("metadata") or {}).get("annotations") or {}


def tfjob(name="mnist", namespace="ml", run_policy=None, **replicas) -> dict:
    """A TFJob with one container per replica type; ``replicas`` maps type -> count, None for absent,
    or a dict of extra replica-spec fields (``{"replicas": 2, "priorityClassName": "high"}``)."""
    specs = {}
    for rtype, spec in replicas.items():
        spec = spec if isinstance(spec, dict) else {"replicas": spec}
        pod_spec = {"containers": [{"name": "tensorflow", "image": "registry.example/tf:2"}]}
        if "priorityClassName" in spec:
            pod_spec = {"priorityClassName": spec["priorityClassName"], **pod_spec}
        rs = {"template": {"spec": pod_spec}}
        if spec.get("replicas") is not None:
            rs = {"replicas": spec["replicas"], **rs}
        specs[rtype] = rs
    body = {"tfReplicaSpecs": specs}
    if run_policy is not None:
        body = {"runPolicy": run_policy, **body}
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": name, "namespace": namespace},
            "spec": body}


def with_replicas(obj, rtype, n):
    out = copy.deepcopy(obj)
    out["spec"]["tfReplicaSpecs"][rtype]["replicas"] = n
    return out


# --- the seed's job, exactly, for every method and scheduler ------------------------------

def test_embedded_seed_job_is_the_one_in_the_seed_file():
    path = shared_path(*SEED_FILE)
    if not path.exists():
        pytest.skip(f"{path} not found: the seeds live in ../shared beside the project")
    text = path.read_text(encoding="utf-8")
    start = text.index('apiVersion: "kubeflow.org/v1"')
    end = text.index("Tanpa gang scheduling diaktifkan")
    assert yaml.safe_load(text[start:end]) == SEED_TFJOB


@pytest.mark.parametrize("scheduler", ["ack", "koordinator"])
def test_labels_method_turns_the_bare_seed_job_into_the_seed_job(scheduler):
    bare = bare_seed_job()
    r = mutate(bare, cfg(method="labels", scheduler=scheduler))
    assert r.object == SEED_TFJOB
    assert r.patch == [
        {"op": "add", "path": f"/spec/tfReplicaSpecs/{t}/template/metadata/labels",
         "value": {NAME_LABEL: "tf-smoke-gpu", MIN_AVAILABLE_LABEL: "5"}} for t in TYPES]
    assert jsonpatch.apply_patch(bare, r.patch) == SEED_TFJOB
    assert (r.warnings, r.denial, r.extra_objects) == ([], None, [])
    assert list(templates(r.object)["PS"]["metadata"]) == ["creationTimestamp", "labels"]  # nothing reordered


@pytest.mark.parametrize("scheduler,label,api_version", [
    ("ack", NAME_LABEL, "scheduling.x-k8s.io/v1alpha1"),            # seed "Metode 2"; ACK >= 1.31 group
    ("koordinator", LEGACY_POD_GROUP_LABEL, "scheduling.sigs.k8s.io/v1alpha1"),
    ("scheduler-plugins", POD_GROUP_LABEL, "scheduling.x-k8s.io/v1alpha1"),
])
def test_podgroup_method_labels_every_template_and_returns_the_podgroup(scheduler, label, api_version):
    r = mutate(bare_seed_job(), cfg(method="podgroup", scheduler=scheduler))
    for t in TYPES:
        assert templates(r.object)[t]["metadata"] == {"creationTimestamp": None, "labels": {label: "tf-smoke-gpu"}}
    assert r.extra_objects == [{
        "apiVersion": api_version, "kind": "PodGroup",
        "metadata": {"name": "tf-smoke-gpu", "namespace": "default"},
        "spec": {"scheduleTimeoutSeconds": 10, "minMember": 5}}]
    assert r.warnings == []


def test_koordinator_method_on_ack_writes_only_name_and_min_available():
    r = mutate(bare_seed_job(), cfg(method="koordinator", scheduler="ack"))
    for t in TYPES:
        assert templates(r.object)[t]["metadata"] == {"creationTimestamp": None, "annotations": {
            KOORD_NAME: "tf-smoke-gpu", KOORD_MIN_AVAILABLE: "5"}}


def test_koordinator_method_on_koordinator_adds_total_number_and_mode():
    r = mutate(bare_seed_job(), cfg(method="koordinator", scheduler="koordinator"))
    for t in TYPES:
        assert annotations_of(r.object, t) == {KOORD_NAME: "tf-smoke-gpu", KOORD_MIN_AVAILABLE: "5",
                                               KOORD_TOTAL_NUMBER: "5", KOORD_MODE: "Strict",
                                                  KOORD_WAITING_TIME: "10s"}
        assert "labels" not in templates(r.object)[t]["metadata"]


@pytest.mark.parametrize("method,scheduler", COMBINATIONS)
def test_second_run_is_a_no_op_and_still_returns_the_podgroups(method, scheduler):
    config = cfg(method=method, scheduler=scheduler, groupByRole=scheduler != "scheduler-plugins")
    first = mutate(bare_seed_job(), config)
    again = mutate(first.object, config)
    assert again.patch == [] and again.object is first.object
    assert again.extra_objects == first.extra_objects
    assert again.warnings == []
    assert validate_gang_labels(first.object) == []


def test_namespace_comes_from_the_request_when_the_object_has_none():
    r = mutate(bare_seed_job(), cfg(method="podgroup", groupByRole=True), namespace="team-a")
    assert {pg["metadata"]["namespace"] for pg in r.extra_objects} == {"team-a"}
    assert json.loads(r.extra_objects[0]["metadata"]["annotations"][ACK_GROUPS]) == [
        "team-a/tf-smoke-gpu-ps", "team-a/tf-smoke-gpu-worker"]


# --- the minimum (training-operator ReconcileJobs) ---------------------------------------------

def test_absent_replicas_count_as_one_and_evaluator_counts():
    r = mutate(tfjob(Chief=None, Worker=3, Evaluator=1), cfg())
    assert {labels_of(r.object, t)[MIN_AVAILABLE_LABEL] for t in ("Chief", "Worker", "Evaluator")} == {"5"}


def test_replica_type_keys_in_any_case():
    r = mutate(tfjob(ps=1, worker=2), cfg())
    assert labels_of(r.object, "worker") == {NAME_LABEL: "mnist", MIN_AVAILABLE_LABEL: "3"}


def test_min_available_from_the_scheduling_policy_wins():
    r = mutate(tfjob(run_policy={"schedulingPolicy": {"minAvailable": 3}}, PS=1, Worker=4),
               cfg(method="koordinator", scheduler="koordinator"))
    assert annotations_of(r.object, "Worker") == {KOORD_NAME: "mnist", KOORD_MIN_AVAILABLE: "3",
                                                  KOORD_TOTAL_NUMBER: "5", KOORD_MODE: "Strict",
                                                  KOORD_WAITING_TIME: "10s"}


def test_min_available_above_the_pod_count_warns():
    r = mutate(tfjob(run_policy={"schedulingPolicy": {"minAvailable": 9}}, Worker=4), cfg())
    assert labels_of(r.object, "Worker")[MIN_AVAILABLE_LABEL] == "9"
    assert r.warnings == ["runPolicy.schedulingPolicy.minAvailable 9 exceeds the 4 pods the job creates: "
                          "the gang can never be satisfied"]


def test_podgroup_takes_the_jobs_schedule_timeout_else_the_setting():
    job = tfjob(run_policy={"schedulingPolicy": {"scheduleTimeoutSeconds": 300}}, Worker=2)
    assert mutate(job, cfg(method="podgroup")).extra_objects[0]["spec"] == {"scheduleTimeoutSeconds": 300,
                                                                            "minMember": 2}
    assert mutate(tfjob(Worker=2), cfg(method="podgroup", scheduleTimeoutSeconds=60)).extra_objects[0]["spec"] == \
        {"scheduleTimeoutSeconds": 60, "minMember": 2}


def test_a_job_without_pods_is_left_alone():
    job = tfjob(Worker=0)
    r = mutate(job, cfg())
    assert (r.patch, r.object is job) == ([], True)
    assert r.reasons == ["the job has no pods (every replica type has 0 replicas): nothing to gang"]


@pytest.mark.parametrize("job,field,message", [
    (tfjob(Worker="4"), "spec.tfReplicaSpecs.Worker.replicas", 'Invalid value: "4": must be an integer'),
    (tfjob(Worker=-1), "spec.tfReplicaSpecs.Worker.replicas", "Invalid value: -1: must be greater than or equal to 0"),
    (tfjob(run_policy={"schedulingPolicy": {"minAvailable": 0}}, Worker=2),
     "spec.runPolicy.schedulingPolicy.minAvailable", "Invalid value: 0: must be greater than or equal to 1"),
    (tfjob(Worker=1, worker=2), "spec.tfReplicaSpecs",
     'Duplicate value: "worker": the same replica type as \'Worker\': training-operator matches replica types '
     'case-insensitively'),
    ({"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "x"}, "spec": {}},
     "spec.tfReplicaSpecs", "Required value: a mapping of replica type to replica spec"),
    ({"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {},
      "spec": {"tfReplicaSpecs": {}}}, "metadata.name",
     "Required value: the gang is named after the job, and a name from generateName is not known at admission"),
    ({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "p"},
      "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}}}}, "spec.pytorchReplicaSpecs.Master.template",
     "Required value: a replica spec needs a pod template"),
])
def test_bad_input_is_a_policy_error_naming_the_field(job, field, message):
    with pytest.raises(PolicyError) as e:
        mutate(job, cfg())
    assert (e.value.field, e.value.message) == (field, message)


# --- groupByRole: GangGroup (seed 002 "Grup beberapa gang") --------------------------------

GROUPS = '["default/tf-smoke-gpu-ps", "default/tf-smoke-gpu-worker"]'


def test_group_by_role_labels_method_on_ack():
    r = mutate(bare_seed_job(), cfg(method="labels", scheduler="ack", groupByRole=True))
    assert labels_of(r.object, "PS") == {NAME_LABEL: "tf-smoke-gpu-ps", MIN_AVAILABLE_LABEL: "1"}
    assert labels_of(r.object, "Worker") == {NAME_LABEL: "tf-smoke-gpu-worker", MIN_AVAILABLE_LABEL: "4"}
    assert annotations_of(r.object, "PS") == annotations_of(r.object, "Worker") == {ACK_GROUPS: GROUPS}


def test_group_by_role_koordinator_method_on_koordinator():
    r = mutate(bare_seed_job(), cfg(method="koordinator", scheduler="koordinator", groupByRole=True))
    assert annotations_of(r.object, "Worker") == {
        KOORD_NAME: "tf-smoke-gpu-worker", KOORD_MIN_AVAILABLE: "4", KOORD_TOTAL_NUMBER: "4", KOORD_MODE: "Strict",
        KOORD_WAITING_TIME: "10s",
        KOORD_GROUPS: GROUPS}
    assert annotations_of(r.object, "PS")[KOORD_GROUPS] == GROUPS


@pytest.mark.parametrize("scheduler,where,key", [("ack", "annotations", ACK_GROUPS),
                                                 ("koordinator", "annotations", KOORD_GROUPS)])
def test_group_by_role_podgroups_carry_the_groups(scheduler, where, key):
    r = mutate(bare_seed_job(), cfg(method="podgroup", scheduler=scheduler, groupByRole=True))
    assert [(pg["metadata"]["name"], pg["spec"]["minMember"]) for pg in r.extra_objects] == [
        ("tf-smoke-gpu-ps", 1), ("tf-smoke-gpu-worker", 4)]
    assert all(pg["metadata"][where] == {key: GROUPS} for pg in r.extra_objects)
    assert annotations_of(r.object, "PS") == {}  # podgroup method: groups live on the PodGroup
    assert set(labels_of(r.object, "Worker").values()) == {"tf-smoke-gpu-worker"}


def test_group_by_role_skips_roles_without_pods():
    r = mutate(tfjob(Chief=1, Worker=2, Evaluator=0), cfg(groupByRole=True))
    assert labels_of(r.object, "Evaluator") == {} and annotations_of(r.object, "Evaluator") == {}
    assert annotations_of(r.object, "Chief")[ACK_GROUPS] == '["ml/mnist-chief", "ml/mnist-worker"]'


def test_group_by_role_warns_that_a_job_wide_min_available_is_not_split():
    r = mutate(tfjob(run_policy={"schedulingPolicy": {"minAvailable": 2}}, PS=1, Worker=4), cfg(groupByRole=True))
    assert labels_of(r.object, "Worker")[MIN_AVAILABLE_LABEL] == "4"
    assert r.warnings == ["runPolicy.schedulingPolicy.minAvailable 2 is a job-wide minimum and is not used with "
                          "gang.groupByRole: each role's gang needs all its replicas"]


def test_long_role_gang_names_are_shortened_with_a_stable_hash():
    name = "a" * 60
    r = mutate(tfjob(name=name, PS=1, Worker=2), cfg(groupByRole=True))
    ps, worker = labels_of(r.object, "PS")[NAME_LABEL], labels_of(r.object, "Worker")[NAME_LABEL]
    assert len(ps) == len(worker) == 63 and ps != worker
    assert re.fullmatch(r"a{54}-[0-9a-f]{8}", worker)
    assert worker == role_gang_name(name, "Worker") == role_gang_name(name, "worker")
    groups = json.loads(annotations_of(r.object, "PS")[ACK_GROUPS])
    assert groups == sorted([f"ml/{ps}", f"ml/{worker}"])
    assert validate_gang_labels(r.object) == []


def test_short_role_names_are_kept():
    assert role_gang_name("tf-smoke-gpu", "Worker") == "tf-smoke-gpu-worker"
    assert gang_name("tf-smoke-gpu") == "tf-smoke-gpu"


@given(st.text(min_size=1, max_size=300))
def test_gang_names_are_always_dns_subdomains_and_label_values(base):
    name = gang_name(base)
    assert len(name) <= 63 and dns1123_subdomain_errors(name) == [] and label_value_errors(name) == []
    assert gang_name(base) == name


# --- match policy (seed 002 "Konfigurasi kebijakan pencocokan") ----------------------------

@pytest.mark.parametrize("method,scheduler,policy,pod_where,pod_key", [
    ("labels", "ack", "waiting-running-succeed", "labels", ACK_MATCH_POLICY),          # seed: a label on pods
    ("labels", "koordinator", "waiting-and-running", "annotations", KOORD_MATCH_POLICY),  # Koordinator: annotations
    ("koordinator", "ack", "once-satisfied", "annotations", KOORD_MATCH_POLICY),
    ("koordinator", "koordinator", "only-waiting", "annotations", KOORD_MATCH_POLICY),
])
def test_match_policy_on_pods(method, scheduler, policy, pod_where, pod_key):
    r = mutate(bare_seed_job(), cfg(method=method, scheduler=scheduler, matchPolicy=policy))
    for t in TYPES:
        meta = templates(r.object)[t]["metadata"]
        assert meta[pod_where][pod_key] == policy
    assert r.extra_objects == []


@pytest.mark.parametrize("scheduler,where,key", [("ack", "labels", ACK_MATCH_POLICY),
                                                 ("koordinator", "annotations", KOORD_MATCH_POLICY)])
def test_match_policy_of_method_podgroup_goes_on_the_podgroup_only(scheduler, where, key):
    r = mutate(bare_seed_job(), cfg(method="podgroup", scheduler=scheduler, matchPolicy="waiting-and-running"))
    assert r.extra_objects[0]["metadata"][where] == {key: "waiting-and-running"}
    for t in TYPES:
        assert list(templates(r.object)[t]["metadata"]) == ["creationTimestamp", "labels"]
        assert len(labels_of(r.object, t)) == 1


def test_match_policy_none_writes_nothing():
    r = mutate(bare_seed_job(), cfg(method="koordinator", scheduler="koordinator"))
    assert KOORD_MATCH_POLICY not in annotations_of(r.object, "PS")


# --- priorities (seed 002 "Cara kerja": one priority per gang) ------------------------------

def mixed_priorities(**extra):
    return tfjob(PS={"replicas": 1, "priorityClassName": "high"}, Worker={"replicas": 4}, **extra)


MIXED = ("replica types PS and Worker have different priorityClassName (PS: high, Worker: <none: cluster "
         "default>); all pods of gang mnist must share one priority (rule G9), so no gang metadata was written")


def test_mixed_priorities_write_nothing_and_warn_naming_types_and_classes():
    job = mixed_priorities()
    r = mutate(job, cfg())
    assert (r.patch, r.object is job, r.denial, r.warnings) == ([], True, None, [MIXED])


def test_mixed_priorities_with_deny_set_the_denial():
    r = mutate(mixed_priorities(), cfg(onViolation="deny"))
    assert (r.patch, r.denial, r.warnings) == ([], MIXED, [])


def test_group_by_role_gangs_are_bound_together_so_priorities_must_match_too():
    r = mutate(mixed_priorities(), cfg(groupByRole=True))
    assert r.patch == [] and r.warnings == [MIXED.replace("gang mnist", "the gang group")]


def test_one_shared_priority_class_is_fine_and_roles_without_pods_do_not_count():
    job = tfjob(PS={"replicas": 1, "priorityClassName": "high"}, Worker={"replicas": 4, "priorityClassName": "high"},
                Evaluator={"replicas": 0, "priorityClassName": "low"})
    r = mutate(job, cfg())
    assert r.warnings == [] and labels_of(r.object, "Worker")[MIN_AVAILABLE_LABEL] == "5"


# --- gang metadata already present ---------------------------------------------------------

@pytest.mark.parametrize("method,scheduler", COMBINATIONS)
def test_the_seed_job_as_written_is_left_untouched(method, scheduler):
    r = mutate(SEED_TFJOB, cfg(method=method, scheduler=scheduler))
    assert r.patch == [] and r.object is SEED_TFJOB
    if scheduler == "scheduler-plugins":
        assert r.warnings == [
            "existing gang metadata is inconsistent: its gang keys (pod-group.scheduling.sigs.k8s.io/name) are not "
            "read by scheduler scheduler-plugins: these pods are not gang-scheduled by it"]
    else:
        assert r.warnings == []


def test_different_min_available_on_two_templates_warns_and_stays():
    job = copy.deepcopy(SEED_TFJOB)
    templates(job)["Worker"]["metadata"]["labels"][MIN_AVAILABLE_LABEL] = "4"
    r = mutate(job, cfg())
    assert r.patch == []
    assert r.warnings == ["existing gang metadata is inconsistent: gang tf-smoke-gpu has different min-available "
                          "on its templates (PS: 5, Worker: 4)"]


def test_a_template_left_out_of_the_gang_and_a_minimum_above_the_pods_warn():
    job = copy.deepcopy(SEED_TFJOB)
    del templates(job)["Worker"]["metadata"]["labels"]
    r = mutate(job, cfg())
    assert r.patch == []
    assert r.warnings == [
        "existing gang metadata is inconsistent: replica types Worker carry no gang name while PS do: "
        "their pods are in no gang",
        "existing gang metadata is inconsistent: gang tf-smoke-gpu needs min-available 5 but the job creates "
        "only 1 pod(s) for it: it can never start"]


def test_volcano_group_name_annotation_is_gang_metadata_too():
    job = tfjob(Worker=3)
    templates(job)["Worker"]["metadata"] = {"annotations": {VOLCANO_GROUP_NAME: "mnist"}}
    r = mutate(job, cfg(method="koordinator", scheduler="koordinator"))
    assert r.patch == []
    assert r.reasons == ["already carries gang metadata (scheduling.k8s.io/group-name): left untouched"]
    assert r.warnings == ["existing gang metadata is inconsistent: its gang keys (scheduling.k8s.io/group-name) are "
                          "not read by scheduler koordinator: these pods are not gang-scheduled by it"]


def test_existing_gang_that_mixes_priorities_is_a_violation():
    job = mixed_priorities()
    for t in templates(job).values():
        t["metadata"] = {"labels": {NAME_LABEL: "mnist", MIN_AVAILABLE_LABEL: "5"}}
    r = mutate(job, cfg(onViolation="deny"))
    assert r.patch == []
    assert r.denial == ("replica types PS and Worker of gang mnist have different priorityClassName (PS: high, "
                        "Worker: <none: cluster default>); all pods of a gang must share one priority (rule G9)")


def test_update_that_only_mixes_priorities_changes_nothing_but_is_reported():
    old = mutate(tfjob(PS=1, Worker=4), cfg()).object
    new = copy.deepcopy(old)
    templates(new)["PS"]["spec"]["priorityClassName"] = "high"
    r = mutate(new, cfg(onViolation="deny"), old=old)
    assert r.patch == [] and r.denial.startswith("replica types PS and Worker of gang mnist have different")


# --- UPDATE ----------------------------------------------------------------------------------------

def test_update_that_changes_replicas_recomputes_the_minimum_on_every_template():
    old = mutate(bare_seed_job(), cfg()).object
    new = with_replicas(old, "Worker", 6)
    r = mutate(new, cfg(), old=old)
    assert r.patch == [
        {"op": "replace", "path": f"/spec/tfReplicaSpecs/{t}/template/metadata/labels/{MIN_AVAILABLE_LABEL.replace('/', '~1')}",
         "value": "7"} for t in TYPES]
    assert jsonpatch.apply_patch(new, r.patch) == r.object
    assert mutate(r.object, cfg(), old=old).patch == []  # reinvocation is a no-op


def test_update_recomputes_the_podgroup_and_the_koordinator_total():
    for method, scheduler in (("podgroup", "koordinator"), ("koordinator", "koordinator")):
        config = cfg(method=method, scheduler=scheduler)
        old = mutate(bare_seed_job(), config).object
        r = mutate(with_replicas(old, "Worker", 2), config, old=old)
        if method == "podgroup":
            assert r.patch == [] and r.extra_objects[0]["spec"]["minMember"] == 3
        else:
            assert {annotations_of(r.object, t)[KOORD_TOTAL_NUMBER] for t in TYPES} == {"3"}
            assert {annotations_of(r.object, t)[KOORD_MIN_AVAILABLE] for t in TYPES} == {"3"}


def test_update_of_min_available_recomputes_too():
    config = cfg()
    old = mutate(tfjob(PS=1, Worker=4), config).object
    new = copy.deepcopy(old)
    new["spec"] = {"runPolicy": {"schedulingPolicy": {"minAvailable": 3}}, **new["spec"]}
    r = mutate(new, config, old=old)
    assert {labels_of(r.object, t)[MIN_AVAILABLE_LABEL] for t in TYPES} == {"3"}


def test_other_updates_change_nothing():
    config = cfg()
    old = mutate(bare_seed_job(), config).object
    new = copy.deepcopy(old)
    templates(new)["Worker"]["spec"]["containers"][0]["image"] = "registry.example/tf:3"
    del templates(new)["PS"]["metadata"]["labels"]   # even a dropped label is not our business on UPDATE
    r = mutate(new, config, old=old)
    assert (r.patch, r.object is new) == ([], True)
    assert r.reasons == ["replicas and minAvailable unchanged: gang metadata left as it is"]


def test_update_with_renamed_key_case_is_not_a_replica_change():
    config = cfg()
    old = mutate(tfjob(Worker=2), config).object
    new = copy.deepcopy(old)
    new["spec"]["tfReplicaSpecs"] = {"worker": new["spec"]["tfReplicaSpecs"]["Worker"]}
    assert mutate(new, config, old=old).patch == []


def test_update_does_not_add_a_gang_to_a_job_that_had_none():
    old = tfjob(Worker=2)
    r = mutate(with_replicas(old, "Worker", 3), cfg(), old=old)
    assert r.patch == []
    assert r.reasons == ["replicas changed, but the job had no gang metadata before this update: none is added to "
                         "a job whose pods may already run"]


def test_update_keeps_gang_metadata_the_user_wrote_or_changed():
    config = cfg()
    users = copy.deepcopy(SEED_TFJOB)
    templates(users)["PS"]["metadata"]["labels"][MIN_AVAILABLE_LABEL] = "3"
    templates(users)["Worker"]["metadata"]["labels"][MIN_AVAILABLE_LABEL] = "3"
    assert mutate(with_replicas(users, "Worker", 6), config, old=users).patch == []
    ours = mutate(bare_seed_job(), config).object
    edited = with_replicas(ours, "Worker", 6)
    templates(edited)["PS"]["metadata"]["labels"][MIN_AVAILABLE_LABEL] = "2"
    assert mutate(edited, config, old=ours).patch == []


def test_update_that_introduces_mixed_priorities_removes_our_gang():
    config = cfg()
    old = mutate(tfjob(PS=1, Worker=4), config).object
    new = with_replicas(old, "Worker", 5)
    templates(new)["PS"]["spec"]["priorityClassName"] = "high"
    r = mutate(new, config, old=old)
    assert [op["op"] for op in r.patch] == ["remove", "remove"]
    assert labels_of(r.object, "Worker") == {} and "labels" not in templates(r.object)["PS"]["metadata"]
    assert r.warnings and r.warnings[0].startswith("replica types PS and Worker have different priorityClassName")


# --- stepping aside ----------------------------------------------------------------------------------

@pytest.mark.parametrize("run_policy", [{"schedulingPolicy": {"minAvailable": 2}}, None])
def test_training_operator_gang_leaves_jobs_alone(run_policy):
    job = tfjob(run_policy=run_policy, Worker=2)
    r = mutate(job, cfg(trainingOperatorGang=True))
    assert (r.patch, r.object is job, r.warnings) == ([], True, [])
    assert "training-operator gangs" in r.reasons[0]


def test_opt_out_label():
    job = tfjob(Worker=2)
    job["metadata"]["labels"] = {SKIP_KEY: "true"}
    assert mutate(job, cfg()).patch == []


# --- dispatch and validation helper ----------------------------------------------------------------

def test_kubeflow_v1_training_jobs_and_v2beta1_mpijobs_are_handled():
    assert is_kubeflow_job(tfjob(Worker=1))
    v2 = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": "m", "namespace": "ml"},
          "spec": {"mpiReplicaSpecs": {
              "Launcher": {"replicas": 1, "template": {"spec": {"containers": [{"name": "l", "image": "x"}]}}},
              "Worker": {"replicas": 2, "template": {"spec": {"containers": [{"name": "w", "image": "x"}]}}}}}}
    assert is_kubeflow_job(v2)
    r = mutate(v2, cfg())
    for role in ("Launcher", "Worker"):   # the launcher counts (mpi-operator: workers + 1)
        labels = r.object["spec"]["mpiReplicaSpecs"][role]["template"]["metadata"]["labels"]
        assert labels == {"pod-group.scheduling.sigs.k8s.io/name": "m", "pod-group.scheduling.sigs.k8s.io/min-available": "3"}
    other = dict(v2, kind="TFJob")        # v2beta1 serves MPIJob only
    assert not is_kubeflow_job(other) and mutate(other, cfg()).patch == []


def test_mutate_kubeflow_job_is_mutate_for_these_kinds():
    assert mutate_kubeflow_job(bare_seed_job(), cfg()).patch == mutate(bare_seed_job(), cfg()).patch


def test_validate_gang_labels_reports_bad_keys_and_values_with_field_paths():
    job = tfjob(Worker=1)
    templates(job)["Worker"]["metadata"] = {"labels": {NAME_LABEL: "x" * 64, "bad key": "v"},
                                            "annotations": {KOORD_NAME: "Not_A_Subdomain"}}
    errs = [str(e) for e in validate_gang_labels(job)]
    base = "spec.tfReplicaSpecs.Worker.template.metadata"
    assert errs == [
        f'{base}.labels[{NAME_LABEL}]: Invalid value: "{"x" * 64}": must be no more than 63 characters',
        f'{base}.labels[bad key]: Invalid value: "bad key": name part must consist of alphanumeric characters, '
        "'-', '_' or '.', and must start and end with an alphanumeric character",
        f'{base}.annotations[{KOORD_NAME}]: Invalid value: "Not_A_Subdomain": gang name: a lowercase RFC 1123 '
        "subdomain must "
        "consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric "
        "character",
    ]


def test_generate_name_only_is_admitted_unchanged_with_a_warning():
    job = tfjob(Worker=2)
    job["metadata"] = {"generateName": "mnist-", "namespace": "ml"}
    r = mutate(job, cfg())
    assert r.patch == [] and r.object is job and r.denial is None
    assert r.warnings == ["the job has only generateName: its gang is named after the job, whose name is not known "
                          "at admission, so no gang metadata was written (set metadata.name)"]


def test_non_string_priority_class_is_a_policy_error():
    job = tfjob(PS=1, Worker=2)
    templates(job)["PS"]["spec"]["priorityClassName"] = ["high"]
    with pytest.raises(PolicyError) as e:
        mutate(job, cfg())
    assert e.value.field == "spec.tfReplicaSpecs.PS.template.spec.priorityClassName"


def test_update_that_removes_a_replica_type_recomputes_the_minimum():
    old = mutate(tfjob(PS=1, Worker=2), cfg()).object
    new = copy.deepcopy(old)
    del new["spec"]["tfReplicaSpecs"]["PS"]
    r = mutate(new, cfg(), old=old)
    assert labels_of(r.object, "Worker")[MIN_AVAILABLE_LABEL] == "2"
    assert mutate(r.object, cfg(), old=old).patch == []


def test_update_that_adds_a_replica_type_gangs_it_too():
    old = mutate(tfjob(PS=1, Worker=2), cfg()).object
    new = copy.deepcopy(old)
    new["spec"]["tfReplicaSpecs"]["Evaluator"] = copy.deepcopy(new["spec"]["tfReplicaSpecs"]["Worker"])
    new["spec"]["tfReplicaSpecs"]["Evaluator"]["replicas"] = 1
    del new["spec"]["tfReplicaSpecs"]["Evaluator"]["template"]["metadata"]
    r = mutate(new, cfg(), old=old)
    assert {labels_of(r.object, t)[MIN_AVAILABLE_LABEL] for t in ("PS", "Worker", "Evaluator")} == {"4"}
    assert labels_of(r.object, "Evaluator")[NAME_LABEL] == "mnist"


def test_update_that_drops_our_metadata_gets_it_back():
    old = mutate(tfjob(PS=1, Worker=2), cfg()).object
    replaced = tfjob(PS=1, Worker=2)            # kubectl replace of the original manifest
    r = mutate(replaced, cfg(), old=old)
    assert r.object == old
    assert "the update dropped the gang metadata policylib wrote: restored" in r.reasons
    rescaled = mutate(tfjob(PS=1, Worker=5), cfg(), old=old)
    assert {labels_of(rescaled.object, t)[MIN_AVAILABLE_LABEL] for t in TYPES} == {"6"}


def test_koordinator_waiting_time_follows_the_jobs_timeout_else_the_setting():
    config = cfg(method="koordinator", scheduler="koordinator", scheduleTimeoutSeconds=30)
    assert annotations_of(mutate(tfjob(Worker=2), config).object, "Worker")[KOORD_WAITING_TIME] == "30s"
    own = tfjob(run_policy={"schedulingPolicy": {"scheduleTimeoutSeconds": 120}}, Worker=2)
    assert annotations_of(mutate(own, config).object, "Worker")[KOORD_WAITING_TIME] == "120s"
    on_ack = cfg(method="koordinator", scheduler="ack")
    assert KOORD_WAITING_TIME not in annotations_of(mutate(tfjob(Worker=2), on_ack).object, "Worker")


def test_replicas_adding_up_past_int32_are_a_policy_error():
    from policylib import PolicyError, load_config, mutate
    job = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "big", "namespace": "ml"},
           "spec": {"tfReplicaSpecs": {t: {"replicas": 2**31 - 1, "template": {"spec": {"containers": [
               {"name": "tensorflow", "image": "x"}]}}} for t in ("PS", "Worker")}}}
    with pytest.raises(PolicyError) as e:
        mutate(job, load_config(None))
    assert str(e.value) == ("TFJob ml/big: spec.tfReplicaSpecs: Invalid value: 4294967294: the replicas add up to "
                            "more than the 2147483647 a gang's minimum can hold (int32)")
