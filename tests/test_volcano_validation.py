"""Volcano's job admission rules (pkg/webhooks/admission/jobs/validate), ported."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policylib.volcano_api.admission import _startable, validate_task_dependencies, validate_volcano_job
from policylib.volcano_api.policies import validate_volcano_policies


def job(tasks, **spec):
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "j"},
            "spec": {**spec, "tasks": tasks}}


def t(**kw):
    return {"name": "t0", "replicas": 4, "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}, **kw}


def fields(errors):
    return [(e.field, e.message) for e in errors]


@pytest.mark.parametrize("policies,path,fragment", [
    ([{"event": "PodFailed", "exitCode": 1, "action": "RestartJob"}], "p[0]", "must not specify event and exitCode"),
    ([{"action": "RestartJob"}], "p[0]", "either event or exitCode"),
    ([{"event": "PodKilled", "action": "RestartJob"}], "p[0].event", 'Unsupported value: "PodKilled"'),
    ([{"event": "OutOfSync", "action": "RestartJob"}], "p[0].event", "Unsupported value"),
    ([{"event": "PodFailed", "action": "Explode"}], "p[0].action", 'Unsupported value: "Explode"'),
    ([{"event": "PodFailed", "action": "RestartJob"}, {"events": ["PodEvicted", "PodFailed"], "action": "AbortJob"}],
     "p[1]", "duplicate event PodFailed"),
    ([{"event": "*", "action": "RestartJob"}, {"event": "PodFailed", "action": "AbortJob"}], "p",
     "if there's * here, no other policy should be here"),
    ([{"exitCode": 0, "action": "RestartJob"}], "p[0].exitCode", "0 is not a valid error code"),
    ([{"exitCode": 2, "action": "RestartJob"}, {"exitCode": 2, "action": "AbortJob"}], "p[1].exitCode", "Duplicate value: 2"),
])
def test_policy_rules(policies, path, fragment):
    errors = validate_volcano_policies(policies, "p")
    assert any(f == path and fragment in m for f, m in fields(errors)), fields(errors)


def test_valid_policies_including_restart_partition_and_event_list():
    assert validate_volcano_policies([{"events": ["PodEvicted", "PodFailed"], "action": "RestartPartition"},
                                      {"event": "TaskCompleted", "action": "CompleteJob"},
                                      {"exitCode": 137, "action": "RestartTask"}], "p") == []
    # event and events naming the same event once are merged, not a duplicate
    assert validate_volcano_policies([{"event": "PodFailed", "events": ["PodFailed"], "action": "RestartJob"}], "p") == []


@pytest.mark.parametrize("task,path,fragment", [
    (t(partitionPolicy={"totalPartitions": 3, "partitionSize": 2}), "spec.tasks[0].replicas",
     "Invalid value: 4: must equal totalPartitions * partitionSize (3 * 2 = 6)"),
    (t(minAvailable=3, partitionPolicy={"totalPartitions": 2, "partitionSize": 2, "minPartitions": 2}),
     "spec.tasks[0].minAvailable", "Invalid value: 3: must equal minPartitions * partitionSize (2 * 2 = 4)"),
    (t(partitionPolicy={"totalPartitions": 2, "partitionSize": 2, "minPartitions": 3}),
     "spec.tasks[0].partitionPolicy.minPartitions", "must be <= totalPartitions 2"),
    (t(partitionPolicy={"totalPartitions": 0, "partitionSize": 2}), "spec.tasks[0].partitionPolicy.totalPartitions",
     "must be an integer >= 1"),
    (t(partitionPolicy={"totalPartitions": 2, "partitionSize": 2,
                        "networkTopology": {"mode": "hard", "highestTierAllowed": 1, "highestTierName": "x"}}),
     "spec.tasks[0].partitionPolicy.networkTopology", "exclusive"),
    (t(partitionPolicy={"totalPartitions": 2, "partitionSize": 2, "networkTopology": {"mode": "hard"}}),
     "spec.tasks[0].partitionPolicy.networkTopology", "silently does not enforce"),
    (t(policies=[{"event": "PodFailed", "action": "RestartPartition"}]), "spec.tasks[0].policies",
     "no effect on a task without a partitionPolicy"),
    (t(minAvailable=5), "spec.tasks[0].minAvailable", "greater than 'replicas'"),
    (t(name="T0"), "spec.tasks[0].name", "RFC 1123"),
])
def test_task_rules(task, path, fragment):
    errors = validate_volcano_job(job([task]))
    assert any(f == path and fragment in m for f, m in fields(errors)), fields(errors)


def test_job_rules():
    assert fields(validate_volcano_job(job([]))) == [("spec.tasks", "Required value: No task specified in job spec")]
    errors = fields(validate_volcano_job(job([t(), t()], minAvailable=9,
                                             policies=[{"event": "PodEvicted", "action": "RestartPartition"}])))
    assert ("spec.tasks[1].name", 'Duplicate value: "t0"') in errors
    assert any(f == "spec.minAvailable" and "greater than total replicas" in m for f, m in errors)
    assert any(f == "spec.policies[0].action" and "denied at job level" in m for f, m in errors)


def test_valid_partitioned_job():
    assert validate_volcano_job(job([t(minAvailable=4, partitionPolicy={
        "totalPartitions": 2, "partitionSize": 2, "minPartitions": 2,
        "networkTopology": {"mode": "hard", "highestTierAllowed": 1}},
        policies=[{"event": "PodEvicted", "action": "RestartPartition"}])], minAvailable=4)) == []


# --- rules ported from admit_job.go / util.go that the first port lacked ---------------------------

def test_exit_code_policy_needs_no_action():
    """Upstream checks the action of event policies only."""
    assert validate_volcano_policies([{"exitCode": 3}], "p") == []
    assert fields(validate_volcano_policies([{"event": "PodFailed"}], "p")) == [
        ("p[0].action", 'Unsupported value: null: supported values: "AbortJob", "RestartJob", "RestartTask", '
                        '"RestartPod", "RestartPartition", "TerminateJob", "CompleteJob", "ResumeJob"')]


@pytest.mark.parametrize("version,denied", [("v1.14.0", True), ("v1.14.2", True), ("v1.14.3", False),
                                            ("v1.15.0", True), ("v1.15.1", False)])
def test_min_partitions_omitted_depends_on_the_volcano_release(version, denied):
    """volcano issue 5401: minAvailable 4 with minPartitions omitted is denied only by the releases that
    compared minAvailable with 0 * partitionSize."""
    task = t(minAvailable=4, partitionPolicy={"totalPartitions": 2, "partitionSize": 2})
    errors = fields(validate_volcano_job(job([task]), version))
    assert errors == ([("spec.tasks[0].minAvailable", "Invalid value: 4: must equal minPartitions * partitionSize (0 * 2 = 0)")]
                      if denied else [])
    # with minPartitions set, every release compares
    task["partitionPolicy"]["minPartitions"] = 1
    assert fields(validate_volcano_job(job([task]), version)) == [
        ("spec.tasks[0].minAvailable", "Invalid value: 4: must equal minPartitions * partitionSize (1 * 2 = 2)")]


def test_job_plugins_must_exist_and_mpi_master_must_be_a_task():
    assert fields(validate_volcano_job(job([t()], plugins={"ssh": [], "svc": [], "gpu-share": []}))) == [
        ("spec.plugins[gpu-share]", 'Unsupported value: "gpu-share": supported values: "ssh", "env", "svc", '
                                    '"tensorflow", "mpi", "pytorch", "hcclrank", "ray"')]
    assert fields(validate_volcano_job(job([t(name="launcher")], plugins={"mpi": ["--master=mpimaster"]}))) == [
        ("spec.plugins[mpi]", 'Invalid value: "mpimaster": the specified mpi master task was not found')]
    assert fields(validate_volcano_job(job([t(name="master")], plugins={"mpi": []}))) == []   # default: master
    assert validate_volcano_job(job([t(name="mpimaster")], plugins={"mpi": ["--master=mpimaster"]})) == []


@pytest.mark.parametrize("volumes,expected", [
    ([{"volumeClaimName": "data"}], [("spec.volumes[0].mountPath", "Required value: mountPath is required")]),
    ([{"mountPath": "/d", "volumeClaimName": "a"}, {"mountPath": "/d", "volumeClaimName": "b"}],
     [("spec.volumes[1].mountPath", 'Duplicate value: "/d"')]),
    ([{"mountPath": "/d"}], [("spec.volumes[0]", "Required value: either volumeClaim or volumeClaimName must be specified")]),
    ([{"mountPath": "/d", "volumeClaimName": "a", "volumeClaim": {"accessModes": ["ReadWriteOnce"]}}],
     [("spec.volumes[0]", "Forbidden: volumeClaimName names an existing claim; volumeClaim describes a new one: "
                          "not both")]),
    ([{"mountPath": "/d", "volumeClaimName": "Bad_Name"}], None),
    ([{"mountPath": "/d", "volumeClaim": {"accessModes": ["ReadWriteOnce"]}}], []),
])
def test_volumes(volumes, expected):
    got = fields(validate_volcano_job(job([t()], volumes=volumes)))
    if expected is None:
        assert [f for f, _ in got] == ["spec.volumes[0].volumeClaimName"] and "Bad_Name" in got[0][1]
    else:
        assert got == expected


def test_task_dependencies_form_a_dag_over_existing_tasks():
    a, b = t(name="a", dependsOn={"name": ["b"]}), t(name="b", dependsOn={"name": ["a"]})
    assert fields(validate_volcano_job(job([a, b]))) == [("spec.tasks", 'Invalid value: ["a", "b"]: job has dependencies '
                                                          "between tasks, but doesn't form a directed acyclic graph "
                                                          "(DAG) over its tasks: these can never start")]
    assert [f for f, _ in fields(validate_volcano_job(job([t(name="a", dependsOn={"name": ["ghost"]})])))] == ["spec.tasks"]
    assert validate_volcano_job(job([t(name="a"), t(name="b", dependsOn={"name": ["a"]})])) == []


def test_topology_policy_needs_whole_cpus():
    def task(resources):
        return t(topologyPolicy="restricted", template={"spec": {"containers": [
            {"name": "c", "image": "x", "resources": resources}]}})
    assert validate_volcano_job(job([task({"limits": {"cpu": "1", "memory": "2000"}})])) == []   # limits stand in
    assert fields(validate_volcano_job(job([task({"limits": {"cpu": "500m"}})]))) == [
        ("spec.tasks[0].template.spec.containers[0].resources.requests.cpu",
         'Invalid value: "500m": the cpu request isn\'t an integer (topologyPolicy restricted needs whole CPUs)')]
    assert len(validate_volcano_job(job([task({})]))) == 1   # no CPU at all is not a whole number of CPUs
    assert validate_volcano_job(job([t(topologyPolicy="none")])) == []


def test_job_and_pod_names_are_qualified_names():
    long = job([t(name="w" * 40)])
    long["metadata"]["name"] = "j" * 30
    [(path, message)] = fields(validate_volcano_job(long))
    assert path == "spec.tasks[0].name" and message.startswith(f'Invalid value: "{"w" * 40}": pod name {"j" * 30}-{"w" * 40}-0: ')


# --- every field error at once; wrong types and int32 (issue: layers a reader can trust) -----------

def _job(**spec):
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "j", "namespace": "ml"},
            "spec": spec}


def _task(name, replicas, **more):
    return {"name": name, "replicas": replicas, "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}},
            **more}


def test_a_bad_job_minimum_is_reported_with_the_bad_task_replicas():
    from policylib import PolicyError, mutate
    with pytest.raises(PolicyError) as e:
        mutate(_job(minAvailable="x", tasks=[_task("a", "y"), _task("b", -1)]))
    assert [(x.field, x.value) for x in e.value.errors] == [
        ("spec.tasks[0].replicas", "y"), ("spec.tasks[1].replicas", -1), ("spec.minAvailable", "x")]


@pytest.mark.parametrize("task,field", [
    (_task("a", 1, dependsOn={"name": [["b"]]}), "spec.tasks[0].dependsOn.name[0]"),
    (_task("a", 1, dependsOn={"name": [{"b": 1}]}), "spec.tasks[0].dependsOn.name[0]"),
    (_task("a", 1, dependsOn={"name": "b"}), "spec.tasks[0].dependsOn.name"),
    (_task(["a"], 1), "spec.tasks[0].name"),
])
def test_wrong_typed_task_names_and_depends_on_are_field_errors(task, field):
    from policylib import PolicyError, mutate
    job = _job(tasks=[task, _task("b", 1)])
    assert field in [e.field for e in validate_volcano_job(job)]   # no TypeError on the way
    with pytest.raises(PolicyError) as e:
        mutate(job)
    assert e.value.errors[0].field == field


def test_task_replicas_past_int32_are_refused_and_no_partition_overflows():
    from policylib import PolicyError, load_config, mutate
    job = _job(tasks=[_task("a", 2**31)])
    with pytest.raises(PolicyError) as e:
        mutate(job, load_config({"volcano": {"partitionSize": 2}}))
    assert str(e.value) == ("Job ml/j: spec.tasks[0].replicas: Invalid value: 2147483648: must be less than or "
                            "equal to 2147483647 (int32)")
    assert [e.field for e in validate_volcano_job(job)] == ["spec.tasks[0].replicas"]


def fixpoint_startable(names, deps):
    """Rule V10's set of tasks that can start, as first written: rounds over every name until none is added (the
    reference for the topological sort, which visits each name and dependency once)."""
    done = set()
    progress = True
    while progress:
        progress = False
        for name in names:
            if name not in done and all(d in done for d in deps.get(name, [])):
                done.add(name)
                progress = True
    return done


NAMES = st.sampled_from(["a", "b", "c", "d", "e", None])


@settings(max_examples=400, deadline=None)
@given(st.lists(NAMES, max_size=6), st.dictionaries(NAMES, st.lists(st.sampled_from(["a", "b", "c", "d", "x"]),
                                                                     max_size=3), max_size=6))
def test_the_tasks_that_can_start_are_those_the_rounds_found(names, deps):
    """Cycles, self-dependencies, dependencies on no task, repeated names and a nameless task (None): the same set."""
    assert _startable(set(names), deps) == fixpoint_startable(names, deps)


def test_a_long_chain_of_dependencies_in_reverse_order_is_one_pass():
    """The worst order for rounds (each round starting one task: quadratic); every task starts."""
    tasks = [{"name": f"t{i}", "replicas": 1, "dependsOn": {"name": [f"t{i + 1}"]}} for i in range(999)]
    tasks.append({"name": "t999", "replicas": 1})
    assert validate_task_dependencies(tasks) == []
    tasks[-1]["dependsOn"] = {"name": ["t0"]}   # now a cycle through all of them
    (error,) = validate_task_dependencies(tasks)
    assert error.value == [f"t{i}" for i in range(1000)]
