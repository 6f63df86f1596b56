"""JobSets (jobset.x-k8s.io/v1alpha2): rules J1-J6, the gang of each start wave in every gang method, written on
the ReplicatedJobs' pod templates, JobSet's exclusive placement where it cannot deadlock, and the CRD's schema."""
import copy
import io
from pathlib import Path

import jsonpatch
import pytest
import yaml

from policylib import ConfigError, PolicyError, load_config, mutate
from policylib.cli import main
from policylib.jobset import EXCLUSIVE_TOPOLOGY, plan_jobset_gangs, read_jobset
from policylib.plan import PLANNERS, plan
from tests.crd import file_validator

JOBSET_CRD = Path("/root/go/pkg/mod/sigs.k8s.io/jobset@v0.12.0/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml")


def rjob(name, replicas=1, parallelism=None, completions=None, depends_on=None, pod_meta=None, pod_spec=None,
         job_meta=None):
    spec = {}
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if completions is not None:
        spec["completions"] = completions
    pod = {"spec": {"containers": [{"name": "c", "image": "trainer"}], **(pod_spec or {})}}
    if pod_meta is not None:
        pod["metadata"] = pod_meta
    spec["template"] = pod
    out = {"name": name, "replicas": replicas, "template": {"spec": spec}}
    if job_meta is not None:
        out["template"]["metadata"] = job_meta
    if depends_on:
        out["dependsOn"] = [{"name": d, "status": "Ready"} for d in depends_on]
    return out


def jobset(*rjobs, name="train", startup=None, meta=None):
    spec = {"replicatedJobs": list(rjobs)}
    if startup:
        spec["startupPolicy"] = {"startupPolicyOrder": startup}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": "ml", **(meta or {})}, "spec": spec}


WORKERS = jobset(rjob("workers", replicas=2, parallelism=2, completions=2))
LAUNCHED = jobset(rjob("launcher"), rjob("workers", replicas=1, parallelism=4, depends_on=["launcher"]))


def pod_metadata(obj, i=0):
    return obj["spec"]["replicatedJobs"][i]["template"]["spec"]["template"].get("metadata")


def gangs(obj):
    plan = plan_jobset_gangs(read_jobset(obj))
    return [(g.name, g.min_available, g.replica_types) for g in plan.gangs] if plan else None


def test_each_start_wave_with_more_than_one_pod_is_one_gang():
    """Rule J1: pods = replicas x min(parallelism, completions); dependsOn and InOrder make waves; a wave of one
    pod is no gang; one gang is named after the JobSet, several after their wave's first ReplicatedJob."""
    assert gangs(WORKERS) == [("train", 4, ("workers",))]
    assert gangs(jobset(rjob("w", parallelism=4, completions=2))) == [("train", 2, ("w",))]
    assert gangs(jobset(rjob("w", replicas=3))) == [("train", 3, ("w",))]
    assert gangs(LAUNCHED) == [("train", 4, ("workers",))]      # the launcher alone is no gang
    both = jobset(rjob("init", parallelism=2), rjob("node", replicas=2, parallelism=3, depends_on=["init"]))
    assert gangs(both) == [("train-init", 2, ("init",)), ("train-node", 6, ("node",))]
    ordered = jobset(rjob("a", parallelism=2), rjob("b", parallelism=2), startup="InOrder")
    assert gangs(ordered) == [("train-a", 2, ("a",)), ("train-b", 2, ("b",))]
    together = jobset(rjob("driver"), rjob("workers", parallelism=3))
    assert gangs(together) == [("train", 4, ("driver", "workers"))]
    assert gangs(jobset(rjob("one"))) is None
    result = mutate(jobset(rjob("one")), {"gang": {"method": "podgroup", "scheduler": "scheduler-plugins"}})
    assert (result.patch, result.extra_objects, result.unhandled) == ([], [], None)
    assert result.reasons == ["start waves (no dependsOn: all start together): 1: one (1 pod, no gang)",
                              "no start wave has more than one pod: nothing to gang"]


METHODS = {
    "labels-ack": ({"method": "labels", "scheduler": "ack"},
                   {"labels": {"pod-group.scheduling.sigs.k8s.io/name": "train",
                               "pod-group.scheduling.sigs.k8s.io/min-available": "4"}}, []),
    "podgroup-scheduler-plugins": ({"method": "podgroup", "scheduler": "scheduler-plugins"},
                                   {"labels": {"scheduling.x-k8s.io/pod-group": "train"}},
                                   [("scheduling.x-k8s.io/v1alpha1", "PodGroup",
                                     {"scheduleTimeoutSeconds": 10, "minMember": 4})]),
    "podgroup-volcano": ({"method": "podgroup", "scheduler": "volcano"},
                         {"annotations": {"scheduling.k8s.io/group-name": "train"}},
                         [("scheduling.volcano.sh/v1beta1", "PodGroup", {"minMember": 4})]),
    "koordinator": ({"method": "koordinator", "scheduler": "koordinator"},
                    {"annotations": {"gang.scheduling.koordinator.sh/name": "train",
                                     "gang.scheduling.koordinator.sh/min-available": "4",
                                     "gang.scheduling.koordinator.sh/total-number": "4",
                                     "gang.scheduling.koordinator.sh/mode": "Strict",
                                     "gang.scheduling.koordinator.sh/waiting-time": "10s"}}, []),
    "koordinator-ack": ({"method": "koordinator", "scheduler": "ack"},
                        {"annotations": {"gang.scheduling.koordinator.sh/name": "train",
                                         "gang.scheduling.koordinator.sh/min-available": "4"}}, []),
    "workload": ({"method": "workload", "scheduler": "kube-scheduler"},
                 {"labels": {"policylib.io/scheduling-group": "train"}},
                 [("scheduling.k8s.io/v1beta1", "Workload",
                   {"controllerRef": {"apiGroup": "jobset.x-k8s.io", "kind": "JobSet", "name": "train"},
                    "podGroupTemplates": [{"name": "gang", "schedulingPolicy": {"gang": {"minCount": 4}}}]}),
                  ("scheduling.k8s.io/v1beta1", "PodGroup",
                   {"workloadRef": {"workloadName": "train", "templateName": "gang"},
                    "schedulingPolicy": {"gang": {"minCount": 4}}})]),
}


@pytest.mark.parametrize("method", METHODS)
def test_every_gang_method_writes_its_keys_on_the_pod_templates_once(method):
    """Rule J3: the keys of gang.method and gang.scheduler (rule G4) on the pod template, the PodGroup or the
    Workload and PodGroup beside the JobSet; a second admission of the result is an empty patch (rule P3)."""
    settings, meta, extra = METHODS[method]
    result = mutate(WORKERS, {"gang": settings})
    assert result.unhandled is None and result.denial is None
    assert result.patch == [{"op": "add", "path": "/spec/replicatedJobs/0/template/spec/template/metadata",
                             "value": meta}]
    assert jsonpatch.apply_patch(WORKERS, result.patch) == result.object
    assert [(o["apiVersion"], o["kind"], o["spec"]) for o in result.extra_objects] == extra
    assert all(o["metadata"] == {"name": "train", "namespace": "ml"} for o in result.extra_objects)
    assert f"method {settings['method']}, scheduler {settings['scheduler']}: gang train (min-available 4 of 4 pods: " \
           "workers)" in result.reasons
    again = mutate(result.object, {"gang": settings})
    assert again.patch == [] and again.extra_objects == result.extra_objects
    assert jobset(rjob("workers", replicas=2, parallelism=2, completions=2)) == WORKERS   # the input is untouched


def test_gang_keys_join_the_users_labels_and_other_templates_are_left_alone():
    """Rule J3: only the pod templates of a gang's wave get keys; the user's labels stay in place."""
    obj = jobset(rjob("launcher", pod_meta={"labels": {"app": "x"}}),
                 rjob("workers", parallelism=3, depends_on=["launcher"], pod_meta={"labels": {"app": "x"}}))
    result = mutate(obj, {"gang": {"method": "podgroup", "scheduler": "scheduler-plugins"}})
    assert result.patch == [{"op": "add", "path": "/spec/replicatedJobs/1/template/spec/template/metadata/labels/"
                                                  "scheduling.x-k8s.io~1pod-group", "value": "train"}]
    assert result.reasons[0] == ("start waves (dependsOn): 1: launcher (1 pod, no gang); "
                                 "2: workers (3 pods, gang train)")


def test_bad_jobsets_are_refused_with_every_error_and_its_field_path():
    """Rule J2: all errors at once, each with its field path."""
    bad = jobset(rjob("w", replicas=-1, parallelism="2"), rjob("w", depends_on=["nope"]),
                 {"name": "Bad_Name", "template": {"spec": {}}}, startup="Sometimes")
    bad["spec"]["replicatedJobs"][0]["dependsOn"] = [{"name": "x", "status": "Ready"}]
    with pytest.raises(PolicyError) as err:
        mutate(bad, {"gang": {"method": "labels"}})
    assert [str(e) for e in err.value.errors] == [
        "spec.replicatedJobs[0].replicas: Invalid value: -1: must be greater than or equal to 0",
        "spec.replicatedJobs[0].template.spec.parallelism: Invalid value: \"2\": must be an integer",
        "spec.replicatedJobs[0].dependsOn: Forbidden: the first ReplicatedJob cannot use dependsOn (JobSet's "
        "validation)",
        "spec.replicatedJobs[1].name: Duplicate value: \"w\"",
        "spec.replicatedJobs[1].dependsOn[0].name: Invalid value: \"nope\": must name a ReplicatedJob listed before "
        "this one",
        "spec.replicatedJobs[2].name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 label must consist of lower "
        "case alphanumeric characters or '-', and must start and end with an alphanumeric character",
        "spec.replicatedJobs[2].template.spec.template: Required value: a Job template needs a pod template",
        "spec.startupPolicy.startupPolicyOrder: Unsupported value: \"Sometimes\": supported values: \"AnyOrder\", "
        "\"InOrder\"",
    ]
    both = jobset(rjob("a"), rjob("b", depends_on=["a"]), startup="InOrder")
    with pytest.raises(PolicyError, match="spec.startupPolicy: Forbidden: StartupPolicy and DependsOn APIs are "
                                          "mutually exclusive"):
        mutate(both, {"gang": {"method": "labels"}})
    with pytest.raises(PolicyError, match=r"spec.replicatedJobs: Too many: 9: must have at most 8 items"):
        mutate(jobset(*(rjob(f"r{i}") for i in range(9))), None)
    unnamed = jobset(rjob("w", parallelism=2))
    unnamed["metadata"] = {"generateName": "train-", "namespace": "ml"}
    result = mutate(unnamed, None)
    assert result.patch == [] and result.warnings[0].startswith("the JobSet has only generateName")


def test_an_update_keeps_the_stored_gang_metadata():
    """Rule J4: JobSet's validation refuses changes to a running JobSet's ReplicatedJobs, so an UPDATE gets the
    stored gang keys back (a re-applied manifest that lacks them) and never new ones."""
    config = {"gang": {"method": "podgroup", "scheduler": "scheduler-plugins"}}
    stored = mutate(WORKERS, config).object
    reapplied = mutate(WORKERS, config, old=stored)
    assert reapplied.object == stored
    assert mutate(stored, config, old=stored).patch == []
    exclusive = mutate(jobset(rjob("w", replicas=4)), {**RACKS, "gang": {**config["gang"],
                                                                        "jobSetExclusiveTopology": "tier-1"}}).object
    assert mutate(jobset(rjob("w", replicas=4)), config, old=exclusive).object == exclusive
    # admitted before policylib was installed: an UPDATE adds nothing the validator would refuse
    later = mutate(WORKERS, config, old=WORKERS)
    assert later.patch == [] and later.extra_objects == []
    assert "UPDATE: JobSet's validation refuses changes to a running JobSet's ReplicatedJobs, so the pod templates " \
           "keep the gang metadata stored (rule J4)" in later.reasons


def test_existing_gang_metadata_is_left_as_the_user_wrote_it():
    """Rule J3 with rule G10: a JobSet whose templates carry other gang keys is left untouched."""
    obj = jobset(rjob("w", parallelism=3, pod_meta={"labels": {"scheduling.x-k8s.io/pod-group": "mine"}}))
    result = mutate(obj, {"gang": {"method": "podgroup", "scheduler": "scheduler-plugins"}})
    assert result.patch == [] and result.object is obj
    assert "already carries gang metadata (scheduling.x-k8s.io/pod-group): left untouched" in result.reasons


RACKS = {"volcano": {"networkTopologyDiscovery": [{"source": "label", "config": {"networkTopologyTypes": {
    "racks": [{"nodeLabel": "example.com/rack"}, {"nodeLabel": "kubernetes.io/hostname"}]}}}]}}


def test_exclusive_topology_is_written_only_where_it_cannot_deadlock():
    """Rule J5: with one pod per Job the JobSet gets the annotation; with a gang of multi-pod Jobs it would
    deadlock (JobSet's pod webhook holds the followers until the leader binds), so a warning and nothing."""
    config = {**RACKS, "gang": {"method": "podgroup", "scheduler": "scheduler-plugins",
                                "jobSetExclusiveTopology": "tier-1"}}
    single = jobset(rjob("w", replicas=4))
    result = mutate(single, config)
    assert result.patch[-1] == {"op": "add", "path": "/metadata/annotations",
                                "value": {EXCLUSIVE_TOPOLOGY: "example.com/rack"}}
    assert (f"metadata.annotations {EXCLUSIVE_TOPOLOGY}: example.com/rack: each Job alone in one example.com/rack "
            "domain (gang.jobSetExclusiveTopology tier-1: tier 1 of volcano.networkTopologyDiscovery topology "
            "'racks', node label example.com/rack; enforced by JobSet's pod webhooks)") in result.reasons
    assert mutate(result.object, config).patch == []
    multi = mutate(WORKERS, config)
    assert EXCLUSIVE_TOPOLOGY not in multi.object["metadata"].get("annotations", {})
    assert multi.warnings == [
        "gang.jobSetExclusiveTopology example.com/rack: not written: the Jobs of workers (2 pods per Job) would "
        "deadlock (JobSet's pod webhook creates a Job's other pods only once its first pod is bound, and the gang "
        "binds none until all exist); it is written only where every Job of a gang has one pod"]
    # the user's own annotation stays; with a gang of multi-pod Jobs it is a warning
    mine = jobset(rjob("w", replicas=2, parallelism=2, job_meta={"annotations": {EXCLUSIVE_TOPOLOGY: "zone"}}))
    kept = mutate(mine, config)
    assert kept.object["spec"]["replicatedJobs"][0]["template"]["metadata"] == {"annotations": {EXCLUSIVE_TOPOLOGY:
                                                                                                "zone"}}
    assert kept.warnings[0].startswith(f"{EXCLUSIVE_TOPOLOGY} with a gang deadlocks the Jobs of w (2 pods per Job)")
    with pytest.raises(ConfigError, match="gang.jobSetExclusiveTopology"):
        load_config({"gang": {"jobSetExclusiveTopology": "tier-1"}})


def test_a_jobset_a_trainjob_controls_is_left_to_the_trainjob():
    """Rule J6."""
    owned = copy.deepcopy(WORKERS)
    owned["metadata"]["ownerReferences"] = [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                                             "name": "llama", "uid": "u", "controller": True}]
    result = mutate(owned, {"gang": {"method": "labels"}})
    assert (result.patch, result.reasons) == ([], ["controlled by TrainJob llama: its pods are the TrainJob's gang, "
                                                   "written on the TrainJob (rule J6): left unchanged"])


@pytest.mark.parametrize("method", METHODS)
def test_the_mutated_jobset_is_valid_against_jobsets_crd(method):
    """What the webhook returns is a JobSet the API server (JobSet v0.12.0's CRD) accepts."""
    validator = file_validator(JOBSET_CRD, "v1alpha2")
    config = {**RACKS, "gang": {**METHODS[method][0], "jobSetExclusiveTopology": "tier-1"}}
    for obj in (WORKERS, LAUNCHED, jobset(rjob("w", replicas=4))):
        mutated = mutate(obj, config).object
        errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(mutated)]
        assert errors == []


def test_the_controller_creates_the_jobsets_podgroup_owned_by_it():
    """Rule J3: the gang planners run on JobSets: a missing PodGroup is created, owned by the JobSet."""
    config = load_config({"gang": {"method": "podgroup", "scheduler": "scheduler-plugins"}})
    stored = mutate(WORKERS, config).object
    stored["metadata"]["uid"] = "js-uid"
    [write] = plan([stored], config, planners=PLANNERS)
    assert (write.kind, write.action, write.name, write.api_version) == ("PodGroup", "create", "train",
                                                                          "scheduling.x-k8s.io/v1alpha1")
    assert write.object["spec"] == {"scheduleTimeoutSeconds": 10, "minMember": 4}
    assert write.object["metadata"]["ownerReferences"] == [
        {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "train", "uid": "js-uid",
         "controller": True, "blockOwnerDeletion": True}]
    assert plan([WORKERS], config, planners=PLANNERS) == []   # no gang written yet: nothing to make


def test_preview_shows_the_written_metadata_and_why(tmp_path):
    """preview -o diff -v: the JobSet's diff, its PodGroup and the reasons, never `unchanged` without a word."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"gang": {"method": "podgroup", "scheduler": "scheduler-plugins"}}))
    src = tmp_path / "js.yaml"
    src.write_text(yaml.safe_dump(LAUNCHED))
    out, err = io.StringIO(), io.StringIO()
    assert main(["preview", "--config", str(cfg), "-f", str(src), "-o", "diff", "-v"], stdout=out, stderr=err) == 0
    text = out.getvalue().splitlines()
    assert text[:3] == ["--- a/JobSet ml/train", "+++ b/JobSet ml/train", "@@ -27,3 +27,6 @@"]
    assert text[6:12] == ["+          metadata:", "+            labels:", "+              scheduling.x-k8s.io/pod-group: "
                          "train", "--- /dev/null", "+++ b/PodGroup ml/train", "@@ -0,0 +1,8 @@"]
    assert text[-2:] == ["# start waves (dependsOn): 1: launcher (1 pod, no gang); 2: workers (4 pods, gang train)",
                         "# method podgroup, scheduler scheduler-plugins: gang train (min-available 4 of 4 pods: "
                         "workers)"]
    assert err.getvalue().splitlines() == [f"policylib: {src}: JobSet ml/train: {line[2:]}" for line in text[-2:]]


def node(name, cpu, rack):
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "example.com/rack": rack,
                                                  "topology.kubernetes.io/zone": "z1"}},
            "status": {"allocatable": {"cpu": str(cpu), "memory": "16Gi", "pods": "110"}}}


CPU = {"containers": [{"name": "c", "image": "trainer", "resources": {"requests": {"cpu": "1"}}}]}
WAVES = jobset(rjob("workers", replicas=2, parallelism=2, pod_spec=CPU),
               rjob("launcher", depends_on=["workers"], pod_spec=CPU))


@pytest.mark.parametrize("cpus,placed,reasons", [
    (5, {"n1": 5}, []),
    (4, {"n1": 4}, ["wave 2: launcher: 0/1 nodes are available: 1 Insufficient cpu."]),
    (3, {}, ["wave 1: workers: 0/1 nodes are available: 1 Insufficient cpu.",
             "wave 1 (workers): gang train: 3 of its minimum 4 pods placeable at once: the gang binds nothing",
             "wave 2 (launcher): not started: wave 1 did not start"]),
])
def test_simulate_places_each_wave_as_jobset_starts_it(cpus, placed, reasons):
    """Rule J7: the workers' gang binds all four or none; the launcher starts only once they are placed."""
    from policylib.simulate import simulate
    [p] = simulate([WAVES], [node("n1", cpus, "r1")], {"gang": {"method": "podgroup", "scheduler": "scheduler-plugins"}})
    assert (p.kind, p.name, p.replicas, p.placed, p.pending, p.reasons) == ("JobSet", "train", 5, placed,
                                                                            5 - sum(placed.values()), reasons)


def test_simulate_keeps_a_native_gang_in_one_rack():
    """Rules J7 and G25: with gang.topology the workers' gang goes to the one rack that holds all four."""
    from policylib.simulate import simulate
    config = {**RACKS, "gang": {"method": "workload", "scheduler": "kube-scheduler", "topology": "tier-1"}}
    nodes = [node("a1", 2, "ra"), node("a2", 1, "ra"), node("b1", 2, "rb"), node("b2", 2, "rb")]
    [p] = simulate([jobset(rjob("workers", replicas=2, parallelism=2, pod_spec=CPU))], nodes, config)
    assert (p.placed, p.pending) == ({"b1": 2, "b2": 2}, 0)
    assert p.reasons == ["wave 1: topology example.com/rack: placed in example.com/rack=rb (1 of 2 domains hold the "
                         "gang; placement score 151)"]
    [stuck] = simulate([jobset(rjob("workers", replicas=3, parallelism=2, pod_spec=CPU))], nodes, config)
    assert (stuck.placed, stuck.pending) == ({}, 6)
    assert stuck.reasons[-1] == ("wave 1 (workers): gang train: 0 of its minimum 6 pods placeable at once: the gang "
                                 "binds nothing")


def test_a_volcano_queue_and_group_by_role():
    """Rule J3: a JobSet's annotation scheduling.volcano.sh/queue-name is its Volcano PodGroup's queue (as Trainer
    reads it on a JobSet template); gang.groupByRole does not split a JobSet (its gangs are its waves), and says so."""
    queued = jobset(rjob("workers", replicas=2, parallelism=2, pod_spec={"schedulerName": "volcano"}),
                    meta={"annotations": {"scheduling.volcano.sh/queue-name": "research"}})
    result = mutate(queued, {"gang": {"method": "podgroup", "scheduler": "volcano"}})
    assert [o["spec"] for o in result.extra_objects] == [{"minMember": 4, "queue": "research"}]
    assert result.warnings == []
    split = mutate(WORKERS, {"gang": {"method": "labels", "groupByRole": True}})
    assert "gang.groupByRole is for Kubeflow jobs' replica types: a JobSet's gangs are its start waves" in split.reasons
    assert pod_metadata(split.object)["labels"]["pod-group.scheduling.sigs.k8s.io/min-available"] == "4"


def test_the_controller_creates_the_workload_and_podgroup_of_a_native_jobset_gang():
    """Rule J3 with rule G18: method workload, the Workload and PodGroup owned by the JobSet, in the served version."""
    config = load_config({"gang": {"method": "workload", "scheduler": "kube-scheduler"}})
    stored = mutate(WORKERS, config).object
    stored["metadata"]["uid"] = "js-uid"
    writes = plan([stored], config, planners=PLANNERS)
    assert [(w.kind, w.action, w.name, w.api_version) for w in writes] == [
        ("Workload", "create", "train", "scheduling.k8s.io/v1beta1"),
        ("PodGroup", "create", "train", "scheduling.k8s.io/v1beta1")]
    assert writes[0].object["spec"]["controllerRef"] == {"apiGroup": "jobset.x-k8s.io", "kind": "JobSet",
                                                         "name": "train"}
    assert all(w.object["metadata"]["ownerReferences"][0]["uid"] == "js-uid" for w in writes)


def test_simulate_names_no_jobset_as_not_simulated(tmp_path):
    """The CLI's "not simulated" note asks the gang models: a JobSet is placed, and not named."""
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(yaml.safe_dump(node("n1", 8, "r1")))
    src = tmp_path / "js.yaml"
    src.write_text(yaml.safe_dump(WAVES))
    out, err = io.StringIO(), io.StringIO()
    assert main(["simulate", "-f", str(src), "--nodes", str(nodes), "-o", "json"], stdout=out, stderr=err) == 0
    assert err.getvalue() == ""
    assert [(p["kind"], p["placed"], p["pending"]) for p in yaml.safe_load(out.getvalue())] == [
        ("JobSet", {"n1": 5}, 0)]


def test_an_update_keeps_stored_keys_policylib_would_not_write():
    """Rule J4: stored gang keys are kept as they are, even a gang name policylib would refuse to write (rule G8)."""
    odd = {"labels": {"pod-group.scheduling.sigs.k8s.io/name": "Odd_Name"}}
    stored = jobset(rjob("w", parallelism=2, pod_meta=odd))
    result = mutate(jobset(rjob("w", parallelism=2)), {"gang": {"method": "labels"}}, old=stored)
    assert result.object == stored and result.denial is None
