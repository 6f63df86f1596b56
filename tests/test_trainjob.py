"""Kubeflow Trainer v2 TrainJobs (trainer.kubeflow.org/v1alpha1): rules T1-T5, the gang of each start wave of the
JobSet Trainer makes, in policylib's own spec.runtimePatches entry, with Trainer v2.3.0's shipped runtimes."""
import copy
import io
from pathlib import Path

import pytest
import yaml

from policylib import PolicyError, mutate
from policylib.cli import main
from policylib.facts import ClusterFacts
from policylib.plan import PLANNERS, plan
from tests.crd import file_validator

TRAINER = Path("/root/go/pkg/mod/github.com/kubeflow/trainer/v2@v2.3.0/manifests/base")
TRAINJOB_CRD = TRAINER / "crds" / "trainer.kubeflow.org_trainjobs.yaml"
PODGROUP = {"gang": {"method": "podgroup", "scheduler": "scheduler-plugins"}}


def shipped(name: str) -> dict:
    path = TRAINER / "runtimes" / name
    if not path.exists():
        pytest.skip(f"{path} not found: Trainer's runtimes come from its Go module (go mod download)")
    return yaml.safe_load(path.read_text())


#: Trainer's torch runtime, as shipped (one replicated job, node, the trainer step).
TORCH = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
         "metadata": {"name": "torch-distributed"},
         "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [
             {"name": "node", "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step":
                                                                   "trainer"}},
                                           "spec": {"template": {"spec": {"containers": [
                                               {"name": "node", "image": "pytorch/pytorch",
                                                "resources": {"requests": {"cpu": "1"}}}]}}}}}]}}}}


def trainjob(runtime="torch-distributed", num_nodes=4, kind=None, patches=None):
    ref = {"name": runtime, **({"kind": kind} if kind else {})}
    spec = {"runtimeRef": ref, "trainer": {"numNodes": num_nodes} if num_nodes is not None else {}}
    if patches is not None:
        spec["runtimePatches"] = patches
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "llama", "namespace": "ml"}, "spec": spec}


def entry(labels=None, annotations=None, name="node"):
    meta = {**({"labels": labels} if labels else {}), **({"annotations": annotations} if annotations else {})}
    return {"manager": "policylib.io/gang", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": name, "template": {"spec": {"template": {"metadata": meta}}}}]}}}}


def test_the_gang_is_one_runtime_patch_entry_of_policylibs_own():
    """Rule T3: the pod label of gang.method on the trainer's replicated job, in the entry of manager
    policylib.io/gang; the PodGroup beside it; a second admission is an empty patch."""
    facts = ClusterFacts.from_objects([TORCH])
    result = mutate(trainjob(), PODGROUP, facts=facts)
    assert result.patch == [{"op": "add", "path": "/spec/runtimePatches",
                             "value": [entry({"scheduling.x-k8s.io/pod-group": "llama"})]}]
    assert [(o["kind"], o["metadata"], o["spec"]) for o in result.extra_objects] == [
        ("PodGroup", {"name": "llama", "namespace": "ml"}, {"scheduleTimeoutSeconds": 10, "minMember": 4})]
    assert result.reasons == [
        "runtime ClusterTrainingRuntime torch-distributed: start waves (no dependsOn: all start together): 1: node "
        "(4 pods, gang llama)",
        "runtime patch policylib.io/gang: method podgroup, scheduler scheduler-plugins: gang llama (min-available 4 "
        "of 4 pods: node)"]
    assert mutate(result.object, PODGROUP, facts=facts).patch == []
    # the user's own entries stay, in their place; ours goes last
    kueue = {"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {}}
    with_kueue = mutate(trainjob(patches=[kueue]), PODGROUP, facts=facts)
    assert with_kueue.object["spec"]["runtimePatches"] == [kueue, entry({"scheduling.x-k8s.io/pod-group": "llama"})]


@pytest.mark.parametrize("runtime,num_nodes,gangs", [
    ("torch_distributed.yaml", 4, [("llama", 4, ("node",))]),
    ("torch_distributed.yaml", None, None),                           # mlPolicy.numNodes 1: one pod, no gang
    ("jax_distributed.yaml", 3, [("llama", 3, ("node",))]),
    ("deepspeed_distributed.yaml", 4, [("llama", 3, ("node",))]),     # runLauncherAsNode: node N-1, the launcher after
    ("mlx_distributed.yaml", 2, None),                                # node 1 pod, then the launcher: no wave of two
])
def test_the_minimum_is_per_start_wave_of_the_shipped_runtimes(runtime, num_nodes, gangs):
    """Rule T1: Trainer's pod counts (the trainer step gets numNodes; MPI's node job numNodes, one less with
    runLauncherAsNode) and JobSet's start waves (rule J1): the launcher that waits for its nodes is no gang."""
    from policylib.jobset import plan_jobset_gangs
    from policylib.trainer import read_trainjob, runtime_jobset
    tj = read_trainjob(trainjob(shipped(runtime)["metadata"]["name"], num_nodes))
    plan = plan_jobset_gangs(runtime_jobset(tj, shipped(runtime)))
    assert ([(g.name, g.min_available, g.replica_types) for g in plan.gangs] if plan else None) == gangs


def test_a_runtime_with_podgroup_policy_or_unknown_gets_no_entry_and_says_why():
    """Rule T3: Trainer makes its own PodGroup for a runtime with podGroupPolicy (a warning when the runtime starts
    in waves: that PodGroup counts every pod and can never fill); a runtime not known here decides nothing."""
    own = copy.deepcopy(shipped("deepspeed_distributed.yaml"))
    own["spec"]["podGroupPolicy"] = {"coscheduling": {"scheduleTimeoutSeconds": 60}}
    result = mutate(trainjob("deepspeed-distributed"), PODGROUP, facts=ClusterFacts.from_objects([own]))
    assert (result.patch, result.extra_objects) == ([], [])
    assert result.reasons[1] == ("runtime ClusterTrainingRuntime deepspeed-distributed has podGroupPolicy.coscheduling: "
                                 "Trainer makes the PodGroup llama and labels the pods itself: no gang written (rule T3)")
    assert result.warnings == [
        "runtime ClusterTrainingRuntime deepspeed-distributed starts its replicated jobs in 2 waves, but Trainer's "
        "PodGroup counts every pod of all of them: it can never fill (remove podGroupPolicy to have policylib gang "
        "each wave)"]
    unknown = mutate(trainjob("elsewhere", kind="TrainingRuntime"), PODGROUP)
    assert (unknown.patch, unknown.unhandled) == ([], None)
    assert unknown.warnings == [
        "runtime TrainingRuntime elsewhere not found (not in the input or the cluster): no gang written (its "
        "replicated jobs, its node count and whether it has podGroupPolicy decide the gang: give it with -f "
        "or use --cluster; in a cluster, create it before its TrainJobs)"]
    # a namespaced runtime is found in the TrainJob's namespace only
    local = dict(TORCH, kind="TrainingRuntime", metadata={"name": "mine", "namespace": "ml"})
    found = mutate(trainjob("mine", kind="TrainingRuntime"), PODGROUP, facts=ClusterFacts.from_objects([local]))
    assert found.patch and mutate(dict(trainjob("mine", kind="TrainingRuntime"), metadata={
        "name": "llama", "namespace": "other"}), PODGROUP, facts=ClusterFacts.from_objects([local])).patch == []


def test_gang_keys_from_another_manager_or_the_runtime_are_left_alone():
    """Rule T3 with rule G10: gang keys the TrainJob already gets are not doubled."""
    theirs = {"manager": "acme.io/gang", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"metadata": {"labels": {
            "scheduling.x-k8s.io/pod-group": "mine"}}}}}}]}}}}
    result = mutate(trainjob(patches=[theirs]), PODGROUP, facts=ClusterFacts.from_objects([TORCH]))
    assert result.patch == [] and result.reasons[-1] == (
        "already carries gang metadata (runtime patch acme.io/gang on node: scheduling.x-k8s.io/pod-group): left "
        "untouched")


def test_an_update_reproduces_the_stored_entry_with_its_time_and_place():
    """Rule T4: Trainer refuses any change to spec.runtimePatches of a running TrainJob: an UPDATE gets the stored
    entry back exactly (Trainer's stamped time, its position), and a TrainJob stored without one gets none."""
    facts = ClusterFacts.from_objects([TORCH])
    kueue = {"manager": "kueue.x-k8s.io/manager", "time": "2026-12-07T10:00:00Z", "trainingRuntimeSpec": {}}
    stored = mutate(trainjob(), PODGROUP, facts=facts).object
    stored["spec"]["runtimePatches"][0]["time"] = "2026-12-07T10:00:00Z"
    stored["spec"]["runtimePatches"].append(kueue)
    reapplied = copy.deepcopy(stored)
    del reapplied["spec"]["runtimePatches"][0]
    result = mutate(reapplied, PODGROUP, facts=facts, old=stored)
    assert result.object["spec"]["runtimePatches"] == stored["spec"]["runtimePatches"]
    assert mutate(stored, PODGROUP, facts=facts, old=stored).patch == []
    changed = copy.deepcopy(stored)
    changed["spec"]["runtimePatches"][0] = entry({"scheduling.x-k8s.io/pod-group": "other"})
    assert mutate(changed, PODGROUP, facts=facts, old=stored).object["spec"]["runtimePatches"] == \
        stored["spec"]["runtimePatches"]
    never = mutate(trainjob(), PODGROUP, facts=facts, old=trainjob())
    assert never.patch == [] and never.reasons == [
        "UPDATE: the stored TrainJob has no policylib runtime patch, and Trainer refuses changes to "
        "spec.runtimePatches while it runs: none added (rule T4)"]


def test_bad_trainjobs_are_refused_with_every_error_and_its_field_path():
    """Rule T2: all errors at once, each with its field path."""
    bad = trainjob(runtime="", num_nodes=0, kind="Runtime",
                   patches=[{"manager": "policylib"}, {"manager": "acme.io/x"}, {"manager": "acme.io/x"}, "x"])
    with pytest.raises(PolicyError) as err:
        mutate(bad, PODGROUP)
    assert [str(e) for e in err.value.errors] == [
        "spec.runtimeRef.name: Required value: the runtime the TrainJob runs",
        'spec.runtimeRef.kind: Unsupported value: "Runtime": supported values: "ClusterTrainingRuntime", '
        '"TrainingRuntime"',
        "spec.trainer.numNodes: Invalid value: 0: must be greater than or equal to 1",
        'spec.runtimePatches[0].manager: Invalid value: "policylib": must be a domain-prefixed path (such as '
        '"acme.io/foo")',
        'spec.runtimePatches[2].manager: Invalid value: "acme.io/x": a manager has one entry (listMapKey)',
        'spec.runtimePatches[3]: Invalid value: "x": must be a runtime patch (manager, trainingRuntimeSpec)']


def test_the_mutated_trainjob_is_valid_against_trainers_crd():
    """What the webhook returns is a TrainJob the API server (Trainer v2.3.0's CRD) accepts, in every method."""
    validator = file_validator(TRAINJOB_CRD, "v1alpha1")
    facts = ClusterFacts.from_objects([TORCH])
    for gang in ({"method": "labels"}, PODGROUP["gang"], {"method": "podgroup", "scheduler": "volcano"},
                 {"method": "koordinator", "scheduler": "koordinator"},
                 {"method": "workload", "scheduler": "kube-scheduler"}):
        mutated = mutate(trainjob(), {"gang": gang}, facts=facts).object
        assert mutated["spec"]["runtimePatches"]
        assert [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(mutated)] == []


def test_the_controller_creates_the_podgroup_owned_by_the_trainjob_when_it_knows_the_runtime():
    """Rule T3: the gang planners run on TrainJobs whose runtime is among the facts."""
    stored = mutate(trainjob(), PODGROUP, facts=ClusterFacts.from_objects([TORCH])).object
    stored["metadata"]["uid"] = "tj-uid"
    [write] = plan([stored, TORCH], PODGROUP, planners=PLANNERS)
    assert (write.kind, write.action, write.name, write.object["spec"]["minMember"]) == ("PodGroup", "create", "llama",
                                                                                          4)
    assert write.object["metadata"]["ownerReferences"][0]["kind"] == "TrainJob"
    assert plan([stored], PODGROUP, planners=PLANNERS) == []   # without the runtime: nothing made


def test_preview_with_the_runtime_in_the_input(tmp_path):
    """preview -f with the runtime beside the TrainJob: the entry's diff, the PodGroup and the reasons."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(PODGROUP))
    src = tmp_path / "tj.yaml"
    src.write_text(yaml.safe_dump_all([TORCH, trainjob()]))
    out, err = io.StringIO(), io.StringIO()
    assert main(["preview", "--config", str(cfg), "-f", str(src), "-o", "diff"], stdout=out, stderr=err) == 0
    text = out.getvalue().splitlines()
    assert text[:2] == ["--- a/TrainJob ml/llama", "+++ b/TrainJob ml/llama"]
    assert text[6:8] == ["+  runtimePatches:", "+  - manager: policylib.io/gang"]
    assert text[16:20] == ["+                  metadata:", "+                    labels:",
                           "+                      scheduling.x-k8s.io/pod-group: llama", "--- /dev/null"]
    assert "+++ b/PodGroup ml/llama" in text
    assert text[-1] == ("# runtime patch policylib.io/gang: method podgroup, scheduler scheduler-plugins: gang llama "
                        "(min-available 4 of 4 pods: node)")


def test_simulate_places_a_trainjob_whose_runtime_is_in_the_input():
    """Rule T5: the TrainJob's pods as Trainer's JobSet makes them, one gang: all four or none; without its
    runtime in the input it is not placed, and says so."""
    from policylib.simulate import simulate
    from tests.test_jobset import node
    [fits] = simulate([TORCH, trainjob()], [node("n1", 4, "r1")], PODGROUP)
    assert (fits.kind, fits.name, fits.replicas, fits.placed, fits.pending) == ("TrainJob", "llama", 4, {"n1": 4}, 0)
    [short] = simulate([TORCH, trainjob()], [node("n1", 3, "r1")], PODGROUP)
    assert (short.placed, short.pending, short.reasons) == ({}, 4, [
        "wave 1: node: 0/1 nodes are available: 1 Insufficient cpu.",
        "wave 1 (node): gang llama: 3 of its minimum 4 pods placeable at once: the gang binds nothing"])
    [unknown] = simulate([trainjob()], [node("n1", 4, "r1")], PODGROUP)
    assert (unknown.replicas, unknown.pending, unknown.reasons) == (0, 0, [
        "not simulated: runtime ClusterTrainingRuntime torch-distributed is not known (not among the -f objects, nor "
        "the cluster's with --cluster)"])
    waves = copy.deepcopy(shipped("deepspeed_distributed.yaml"))
    waves["spec"]["podGroupPolicy"] = {"coscheduling": {}}
    [never] = simulate([waves, trainjob("deepspeed-distributed")], [node("n1", 16, "r1")], PODGROUP)
    assert (never.placed, never.pending, never.reasons) == ({}, 4, [
        "runtime ClusterTrainingRuntime deepspeed-distributed has podGroupPolicy.coscheduling: Trainer's PodGroup "
        "counts the pods of all 2 start waves, which never exist together: nothing binds"])


def test_simulate_gives_the_trainer_step_the_trainjobs_resources_per_node():
    """Rule T5: ``spec.trainer.resourcesPerNode`` replaces the runtime's requests of the trainer step's ``node``
    container key by key, as Trainer does: 2 CPUs a pod, so a 4-CPU Node holds 2 of the 4 and the gang binds
    nothing; a key the TrainJob does not give (memory) stays the runtime's."""
    from policylib.simulate import simulate
    from policylib.simulate.gangs import trainjob_as_jobset
    from tests.test_jobset import node
    job = trainjob()
    job["spec"]["trainer"]["resourcesPerNode"] = {"requests": {"cpu": "2"}, "limits": {"nvidia.com/gpu": "1"}}
    runtime = copy.deepcopy(TORCH)
    container = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"][0]
    container["resources"] = {"requests": {"cpu": "1", "memory": "1Gi"}}
    made = trainjob_as_jobset(job, runtime)["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert made["containers"][0]["resources"] == {"requests": {"cpu": "2", "memory": "1Gi"},
                                                  "limits": {"nvidia.com/gpu": "1"}}
    job["spec"]["trainer"]["resourcesPerNode"] = {"requests": {"cpu": "2"}}
    [short] = simulate([runtime, job], [node("n1", 4, "r1")], PODGROUP)
    assert (short.placed, short.pending) == ({}, 4)
    [fits] = simulate([runtime, job], [node("n1", 8, "r1")], PODGROUP)
    assert (fits.placed, fits.pending) == ({"n1": 4}, 0)


def test_a_runtime_that_cannot_be_read_is_an_error_naming_it():
    """Rule T2: the runtime's replicated jobs are read as a JobSet's (rule J2), the errors named under the runtime."""
    broken = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
              "metadata": {"name": "torch-distributed"}, "spec": ["not", "a", "map"]}
    with pytest.raises(PolicyError) as err:
        mutate(trainjob(), PODGROUP, facts=ClusterFacts.from_objects([broken]))
    assert (err.value.obj_ref, [str(e) for e in err.value.errors]) == (
        "ClusterTrainingRuntime torch-distributed", ["spec.template.spec: Required value: a JobSet needs a spec"])
