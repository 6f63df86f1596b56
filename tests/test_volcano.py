"""Seed 001 "Pod Rescheduling by Partition": partitions, RestartPartition, validation, feasibility."""
import copy
import glob
import os
from pathlib import Path

import jsonpatch
import pytest
import yaml

from policylib import load_config, mutate
from policylib.errors import ConfigError, PolicyError
from policylib.facts import ClusterFacts
from policylib.volcano.mutation import PARTITION_SIZE_ANNOTATION, restart_partition_policies
from policylib.volcano_api.admission import validate_volcano_job
from policylib.volcano_api.policies import validate_volcano_policies
from tests.crd import assert_valid
from tests.helpers import shared_path

JOB_CRD = ("schemas", "volcano", "batch.volcano.sh_jobs.yaml")
RP = "RestartPartition"


def job(*tasks, name="network-topology-job", annotations=None, **spec):
    meta = {"name": name, "namespace": "default"}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": meta,
            "spec": {"schedulerName": "volcano", **spec, "tasks": list(tasks)}}


def task(name="t0", replicas=4, npu=16, **extra):
    res = {"huawei.com/ascend-1980": npu}
    return {"replicas": replicas, "name": name, **extra, "template": {"spec": {"containers": [
        {"name": "container1", "image": "nginx:latest", "resources": {"requests": dict(res), "limits": dict(res)}}]}}}


#: The seed's label discovery (its three-tier topology): what gives the scheduler HyperNodes (rule V25).
DISCOVERY = [{"source": "label", "enabled": True, "config": {"networkTopologyTypes": {"testtopology": [
    {"nodeLabel": "test-tier-3"}, {"nodeLabel": "test-tier-2"}, {"nodeLabel": "test-tier-1"},
    {"nodeLabel": "kubernetes.io/hostname"}]}}}]


def cfg(**volcano):
    """Partitions of 2 over the seed's label discovery."""
    return load_config({"volcano": {"partitionSize": 2, "networkTopologyDiscovery": DISCOVERY, **volcano}})


def tasks_of(obj):
    return obj["spec"]["tasks"]


# --- the seed's job ---------------------------------------------------------------------

def test_seed_four_pod_job_gets_two_partitions_and_restart_partition():
    seed_job = job(task(), minAvailable=4)
    r = mutate(seed_job, cfg(restartPartitionEvents=["PodEvicted"]))
    t0 = tasks_of(r.object)[0]
    assert t0["partitionPolicy"] == {"totalPartitions": 2, "partitionSize": 2, "minPartitions": 2,
                                     "networkTopology": {"mode": "hard", "highestTierAllowed": 1}}
    assert t0["policies"] == [{"event": "PodEvicted", "action": RP}]
    assert "policies" not in r.object["spec"]  # job level untouched: RestartPartition belongs to tasks
    assert r.object["spec"]["minAvailable"] == 4
    assert r.patch == [
        {"op": "add", "path": "/spec/tasks/0/partitionPolicy", "value": t0["partitionPolicy"]},
        {"op": "add", "path": "/spec/tasks/0/policies", "value": t0["policies"]},
    ]
    assert jsonpatch.apply_patch(seed_job, r.patch) == r.object
    assert validate_volcano_job(r.object) == []
    assert_valid(r.object, *JOB_CRD)


def test_default_events_are_the_seeds_pod_evicted_and_pod_failed():
    t0 = tasks_of(mutate(job(task()), cfg()).object)[0]
    assert t0["policies"] == [{"event": "PodEvicted", "action": RP}, {"event": "PodFailed", "action": RP}]


def test_docs_eight_pod_job_keeps_its_partition_policy_and_gains_restart_partition():
    path = shared_path("examples", "volcano", "network-topology-job-partition.from-docs.yaml")
    if not path.exists():
        pytest.skip(f"{path} not found: upstream examples live in ../shared beside the project")
    docs_job = yaml.safe_load(path.read_text())
    r = mutate(docs_job, cfg())
    t0 = tasks_of(r.object)[0]
    assert t0["partitionPolicy"] == tasks_of(docs_job)[0]["partitionPolicy"]
    assert t0["policies"] == [{"event": "PodEvicted", "action": RP}, {"event": "PodFailed", "action": RP}]
    assert r.object["spec"]["networkTopology"] == {"mode": "hard", "highestTierAllowed": 2}
    assert any("volcano issue 5401" in w for w in r.warnings)  # its own policy has no minPartitions
    assert_valid(r.object, *JOB_CRD)


# --- when a partitionPolicy is added ------------------------------------------------------

@pytest.mark.parametrize("replicas,size,expected", [
    (8, 2, (4, 2)), (8, 4, (2, 4)), (6, 3, (2, 3)), (4, 2, (2, 2)),
])
def test_partition_size_dividing_replicas_adds_a_policy(replicas, size, expected):
    pp = tasks_of(mutate(job(task(replicas=replicas)), cfg(partitionSize=size)).object)[0]["partitionPolicy"]
    assert (pp["totalPartitions"], pp["partitionSize"], pp["minPartitions"]) == expected + (expected[0],)


def test_not_dividing_leaves_the_task_alone_with_a_warning():
    j = job(task(replicas=5))
    r = mutate(j, cfg())
    assert r.patch == [] and r.object is j
    assert r.warnings == ["task t0: partitionSize 2 does not divide its 5 replicas: not partitioned"]


@pytest.mark.parametrize("replicas", [1, 2])
def test_replicas_not_above_partition_size_are_not_partitioned(replicas):
    r = mutate(job(task(replicas=replicas)), cfg())
    assert r.patch == [] and r.warnings == []
    assert f"task t0: {replicas} replicas <= partitionSize 2: not partitioned" in r.reasons


def test_no_partition_size_adds_nothing():
    j = job(task())
    assert mutate(j, load_config({"volcano": {}})).patch == []


@pytest.mark.parametrize("min_available,expected", [(4, 2), (2, 1), (0, 0)])
def test_task_min_available_sets_min_partitions_consistently(min_available, expected):
    r = mutate(job(task(minAvailable=min_available)), cfg())
    t0 = tasks_of(r.object)[0]
    assert t0["minAvailable"] == min_available
    assert t0["partitionPolicy"]["minPartitions"] == expected
    assert validate_volcano_job(r.object) == []


def test_task_min_available_not_a_multiple_is_not_partitioned():
    r = mutate(job(task(minAvailable=3)), cfg())
    assert r.patch == []
    assert r.warnings == ["task t0: minAvailable 3 is not a multiple of partitionSize 2 (Volcano requires "
                          "minAvailable == minPartitions * partitionSize): not partitioned"]


def test_network_topology_tier_name_and_none():
    by_name = load_config({"volcano": {"partitionSize": 2, "networkTopology": {"highestTierName": "volcano.sh/tor"},
                                       "networkTopologyDiscovery": DISCOVERY}})
    pp = tasks_of(mutate(job(task()), by_name).object)[0]["partitionPolicy"]
    assert pp["networkTopology"] == {"mode": "hard", "highestTierName": "volcano.sh/tor"}
    none = load_config({"volcano": {"partitionSize": 2, "networkTopology": None}})
    assert "networkTopology" not in tasks_of(mutate(job(task()), none).object)[0]["partitionPolicy"]


def test_annotation_overrides_partition_size_or_turns_it_off():
    over = mutate(job(task(replicas=8), annotations={PARTITION_SIZE_ANNOTATION: "4"}), cfg())
    assert tasks_of(over.object)[0]["partitionPolicy"]["partitionSize"] == 4
    off = mutate(job(task(replicas=8), annotations={PARTITION_SIZE_ANNOTATION: "none"}), cfg())
    assert off.patch == []
    on = mutate(job(task(replicas=8), annotations={PARTITION_SIZE_ANNOTATION: "2"}), load_config(None))
    assert tasks_of(on.object)[0]["partitionPolicy"]["totalPartitions"] == 4


def test_bad_annotation_is_a_policy_error():
    from policylib import PolicyError
    with pytest.raises(PolicyError) as e:
        mutate(job(task(), annotations={PARTITION_SIZE_ANNOTATION: "two"}), cfg())
    assert e.value.field == f"metadata.annotations[{PARTITION_SIZE_ANNOTATION}]"


def test_mixed_tasks_only_the_dividing_ones_change():
    j = job(task("master", replicas=1), task("worker", replicas=8))
    r = mutate(j, cfg())
    master, worker = tasks_of(r.object)
    assert master is tasks_of(j)[0]
    assert worker["partitionPolicy"]["totalPartitions"] == 4
    assert [op["path"] for op in r.patch] == ["/spec/tasks/1/partitionPolicy", "/spec/tasks/1/policies"]


# --- RestartPartition policies ------------------------------------------------------------

@pytest.mark.parametrize("own,added", [
    ([], [("PodEvicted", RP), ("PodFailed", RP)]),
    ([{"event": "PodEvicted", "action": "RestartJob"}], [("PodFailed", RP)]),
    ([{"events": ["PodEvicted", "PodFailed"], "action": "RestartTask"}], []),
    ([{"event": "*", "action": "RestartJob"}], []),
    ([{"exitCode": 3, "action": "RestartJob"}], [("PodEvicted", RP), ("PodFailed", RP)]),
    ([{"event": "TaskCompleted", "action": "CompleteJob"}], [("PodEvicted", RP), ("PodFailed", RP)]),
])
def test_events_the_task_already_handles_are_left_alone(own, added):
    t = task(policies=copy.deepcopy(own))
    out = tasks_of(mutate(job(t), cfg()).object)[0]
    assert out["policies"] == own + [{"event": e, "action": a} for e, a in added]
    assert validate_volcano_policies(out["policies"], "p") == []


def test_star_event_is_added_alone_or_not_at_all():
    assert restart_partition_policies([], ("*",)) == ([{"event": "*", "action": RP}], None)
    added, warning = restart_partition_policies([{"event": "PodFailed", "action": "RestartJob"}], ("*",))
    assert added == [] and "must stand alone" in warning


def test_existing_partition_policy_gets_restart_partition_even_without_partition_size():
    t = task(replicas=4, partitionPolicy={"totalPartitions": 2, "partitionSize": 2, "minPartitions": 2})
    out = tasks_of(mutate(job(t), load_config(None)).object)[0]
    assert [p["event"] for p in out["policies"]] == ["PodEvicted", "PodFailed"]


def test_empty_event_list_disables_restart_partition():
    out = tasks_of(mutate(job(task()), cfg(restartPartitionEvents=[])).object)[0]
    assert "partitionPolicy" in out and "policies" not in out


def test_job_level_policies_are_never_touched():
    job_policies = [{"event": "PodEvicted", "action": "RestartJob"}]
    r = mutate(job(task(), policies=copy.deepcopy(job_policies)), cfg())
    assert r.object["spec"]["policies"] == job_policies
    assert [p["event"] for p in tasks_of(r.object)[0]["policies"]] == ["PodEvicted", "PodFailed"]


# --- lifecycle and kinds ------------------------------------------------------------------

def test_update_is_never_patched():
    j = job(task())
    r = mutate(j, cfg(), old=copy.deepcopy(j))
    assert r.patch == [] and r.object is j


def test_second_mutation_is_a_no_op():
    first = mutate(job(task(replicas=8)), cfg()).object
    assert mutate(first, cfg()).patch == []


def test_opt_out():
    j = job(task())
    j["metadata"]["labels"] = {"policylib.io/skip": "true"}
    assert mutate(j, cfg()).patch == []


def test_hyperjob_with_network_topology_is_unchanged_with_a_warning():
    hj = {"apiVersion": "training.volcano.sh/v1alpha1", "kind": "HyperJob", "metadata": {"name": "h"},
          "spec": {"replicatedJobs": [{"template": {"networkTopology": {"mode": "hard", "highestTierAllowed": 1}}}]}}
    r = mutate(hj, cfg())
    assert r.patch == [] and r.object is hj
    assert r.warnings == ["HyperJob workloads ignore networkTopology and partition policies: they will not take effect"]
    plain = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "q"}, "spec": {}}
    assert mutate(plain, cfg()).warnings == []


def test_invalid_user_job_is_reported_not_made_worse():
    bad = job(task(policies=[{"event": "PodFailed", "action": "RestartJob"},
                             {"event": "PodFailed", "action": "AbortJob"}]))
    r = mutate(bad, cfg())
    assert any('as submitted: spec.tasks[0].policies[1]: Invalid value: "PodFailed": duplicate event PodFailed' in x
               for x in r.reasons)
    out = tasks_of(r.object)[0]
    assert [p for p in out["policies"] if p["action"] == RP] == [{"event": "PodEvicted", "action": RP}]


@pytest.mark.parametrize("mutator,field", [
    (lambda j: j["spec"].pop("tasks"), "spec.tasks"),
    (lambda j: j["spec"]["tasks"][0].update(replicas="4"), "spec.tasks[0].replicas"),
    (lambda j: j["spec"]["tasks"][0].update(policies={"event": "PodFailed"}), "spec.tasks[0].policies"),
])
def test_malformed_jobs_raise_policy_errors(mutator, field):
    from policylib import PolicyError
    j = job(task())
    mutator(j)
    with pytest.raises(PolicyError) as e:
        mutate(j, cfg())
    assert e.value.field == field and e.value.obj_ref == "Job default/network-topology-job"


# --- every upstream example ---------------------------------------------------------------

EXAMPLES = sorted(p for p in glob.glob(str(shared_path("examples", "volcano", "*.yaml")))
                  if any(doc and doc.get("kind") == "Job" for doc in yaml.safe_load_all(Path(p).read_text(encoding="utf-8"))))


@pytest.mark.skipif(not EXAMPLES, reason="upstream Volcano examples live in ../shared/examples/volcano")
@pytest.mark.parametrize("path", EXAMPLES, ids=[os.path.basename(p) for p in EXAMPLES])
@pytest.mark.parametrize("size", [None, 1, 2, 4])
def test_upstream_examples_emit_valid_jobs(path, size):
    config = load_config({"volcano": {"partitionSize": size}})
    jobs = [doc for doc in yaml.safe_load_all(Path(path).read_text(encoding="utf-8")) if doc and doc.get("kind") == "Job"]
    assert jobs, f"{path}: no Volcano Job"
    for doc in jobs:
        before = validate_volcano_job(doc)
        r = mutate(doc, config)
        assert_valid(r.object, *JOB_CRD)
        after = validate_volcano_job(r.object)
        assert all(e in before for e in after), f"introduced: {[e for e in after if e not in before]}"
        assert mutate(r.object, config).patch == []
        assert jsonpatch.apply_patch(doc, r.patch) == r.object


# --- feasibility with Nodes ------------------------------------------------------------------

def seed_nodes(allocatable=None):
    rows = [("192.168.5.17", 6, 4, 0), ("192.168.5.224", 6, 4, 0), ("192.168.5.235", 6, 4, 1),
            ("192.168.5.239", 6, 4, 1), ("192.168.5.240", 6, 5, 2), ("192.168.5.251", 6, 5, 2),
            ("192.168.5.83", 6, 5, 3), ("192.168.5.95", 6, 5, 3)]
    nodes = []
    for name, t3, t2, t1 in rows:
        n = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
            "test-tier-3": f"HyperNode{t3}", "test-tier-2": f"HyperNode{t2}", "test-tier-1": f"HyperNode{t1}"}}}
        if allocatable:
            n["status"] = {"allocatable": dict(allocatable)}
        nodes.append(n)
    return nodes


def test_feasibility_reports_a_partition_too_big_for_tier_one():
    config = load_config({"volcano": {"partitionSize": 4, "networkTopologyDiscovery": DISCOVERY}})
    r = mutate(job(task(replicas=8)), config, facts=ClusterFacts.from_objects(seed_nodes()))
    assert ("task t0: 2 partitions of 4 pods each need one tier-1 HyperNode holding 4 pods; the largest holds 2 pods "
            "(counting one pod per node)") in r.warnings


def test_feasibility_counts_pods_by_allocatable_when_known():
    config = load_config({"volcano": {"partitionSize": 2, "networkTopologyDiscovery": DISCOVERY}})
    facts = ClusterFacts.from_objects(seed_nodes({"huawei.com/ascend-1980": "16", "cpu": "64"}))
    r = mutate(job(task(replicas=4)), config, facts=facts)
    assert ("task t0: 2 partitions of 2 pods each fit in one tier-1 HyperNode (2 pods by allocatable); 4 tier-1 "
            "HyperNodes hold 8 pods") in r.reasons
    small = mutate(job(task(replicas=4, npu=32)), config, facts=facts)
    assert ("task t0: 2 partitions of 2 pods each need one tier-1 HyperNode holding 2 pods; the largest holds 0 pods "
            "(by allocatable)") in small.warnings


def test_feasibility_tier_two_allows_bigger_partitions():
    config = load_config({"volcano": {"partitionSize": 4, "networkTopology": {"highestTierAllowed": 2},
                                      "networkTopologyDiscovery": DISCOVERY}})
    r = mutate(job(task(replicas=8)), config, facts=ClusterFacts.from_objects(seed_nodes()))
    assert ("task t0: 2 partitions of 4 pods each fit in one tier-2 HyperNode (4 pods counting one pod per node); "
            "2 tier-2 HyperNodes hold 8 pods") in r.reasons


def test_unknown_tier_name_is_warned():
    config = load_config({"volcano": {"partitionSize": 2, "networkTopology": {"highestTierName": "volcano.sh/tor"},
                                      "networkTopologyDiscovery": DISCOVERY}})
    r = mutate(job(task()), config, facts=ClusterFacts.from_objects(seed_nodes()))
    assert any("highestTierName 'volcano.sh/tor' matches no HyperNode tierName" in w for w in r.warnings)


def test_soft_job_level_topology_gets_no_partitions():
    r = mutate(job(task(), networkTopology={"mode": "soft"}), cfg())
    assert all("partitionPolicy" not in t for t in tasks_of(r.object))
    assert any("soft" in w and "no partitionPolicy added" in w for w in r.warnings)
    bad = job(task(partitionPolicy={"totalPartitions": 2, "partitionSize": 2, "minPartitions": 2}),
              networkTopology={"mode": "soft"})
    assert any(e.field == "spec.networkTopology.mode" for e in validate_volcano_job(bad))


def test_volcano_podgroups_are_not_warned_about():
    pg = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": {"name": "p"},
          "spec": {"minMember": 2, "networkTopology": {"mode": "hard", "highestTierAllowed": 1}}}
    assert mutate(pg, cfg()).warnings == []


@pytest.mark.parametrize("mutator,field", [
    (lambda j: j["spec"]["tasks"][0].update(minAvailable="2"), "spec.tasks[0].minAvailable"),
    (lambda j: j["metadata"].update(annotations={PARTITION_SIZE_ANNOTATION: "²"}),
     f"metadata.annotations[{PARTITION_SIZE_ANNOTATION}]"),
])
def test_odd_types_are_policy_errors(mutator, field):
    from policylib import PolicyError
    j = job(task())
    mutator(j)
    with pytest.raises(PolicyError) as e:
        mutate(j, cfg())
    assert e.value.field == field


def test_job_level_restart_partition_moves_to_the_partitioned_tasks():
    """The specification's own example puts RestartPartition at job level, where Volcano's
    ValidatingAdmissionPolicy denies it (with the VAP off it works there too: tests/e2e)."""
    j = job(task(replicas=4), task(name="ps", replicas=1))
    j["spec"]["policies"] = [{"events": ["PodEvicted", "PodFailed"], "action": "RestartPartition"},
                             {"event": "TaskCompleted", "action": "CompleteJob"}]
    r = mutate(j, cfg(restartPartitionEvents=[]))
    assert r.object["spec"]["policies"] == [{"event": "TaskCompleted", "action": "CompleteJob"}]
    tasks = r.object["spec"]["tasks"]
    assert tasks[0]["policies"] == [{"event": "PodEvicted", "action": "RestartPartition"},
                                    {"event": "PodFailed", "action": "RestartPartition"}]
    assert "policies" not in tasks[1]   # not partitioned: RestartPartition would do nothing there
    assert r.warnings == ["moved job-level RestartPartition (PodEvicted, PodFailed) to task t0: denied by Volcano's "
                          "VAP at job level"]
    assert validate_volcano_job(r.object) == []
    assert jsonpatch.apply_patch(j, r.patch) == r.object


def test_job_level_restart_partition_without_partitions_is_removed_and_said():
    j = job(task(replicas=3))
    j["spec"]["policies"] = [{"event": "PodFailed", "action": "RestartPartition"}]
    r = mutate(j, load_config(None))
    assert "policies" not in r.object["spec"]
    assert r.warnings == ["moved job-level RestartPartition (PodFailed) away: no task is partitioned: no-op, denied "
                          "by Volcano's VAP at job level"]


def test_partition_tier_name_before_v1_15_is_said_not_enforced():
    """vc-scheduler v1.14.1 bound a partition bounded by highestTierName across two tier-1 HyperNodes
    (tests/e2e): policylib warns, skips feasibility, and refuses such a config for those releases."""
    own = {"totalPartitions": 2, "partitionSize": 2, "minPartitions": 2,
           "networkTopology": {"mode": "hard", "highestTierName": "test-tier-1"}}
    j = job(task(partitionPolicy=own))
    old = mutate(j, load_config({"volcano": {"version": "v1.14.1"}}))
    assert ("task t0: partitionPolicy.networkTopology.highestTierName 'test-tier-1' is not enforced by Volcano "
            "v1.14.1's scheduler (from v1.15.0); use highestTierAllowed") in old.warnings
    new = mutate(j, load_config({"volcano": {"version": "v1.15.0"}}))
    assert not any("not enforced" in w for w in new.warnings)
    with pytest.raises(ConfigError) as e:
        load_config({"volcano": {"version": "v1.14.1", "partitionSize": 2,
                                 "networkTopology": {"mode": "hard", "highestTierName": "test-tier-1"}}})
    assert e.value.path == "volcano.networkTopology.highestTierName"
    assert load_config({"volcano": {"version": "v1.15.0", "partitionSize": 2, "networkTopology": {
        "mode": "hard", "highestTierName": "test-tier-1"}}}).volcano.networkTopology.highestTierName == "test-tier-1"


@pytest.mark.parametrize("old,errors", [
    ({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "j"}, "spec": "str"},
     ["oldObject.spec: Required value: a Volcano Job needs a spec"]),
    ({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "spec": {"tasks": ["x", {"policies": "p"}]}},
     ['oldObject.spec.tasks[0]: Invalid value: "x": must be an object',
      'oldObject.spec.tasks[1].policies: Invalid value: "p": must be a list']),
    ("str", ['oldObject: Invalid value: "str": must be an object']),
])
def test_an_update_over_a_malformed_old_job_is_refused_naming_the_old_objects_fields(old, errors):
    """Rule V1 for the old object: the update rule (V17) reads its tasks and policies, so it is checked as the
    object is, its errors under ``oldObject`` (never an internal error)."""
    with pytest.raises(PolicyError) as e:
        mutate(job(task()), cfg(), old=old)
    assert [str(x) for x in e.value.errors] == errors
