"""Volcano's job admission rules (pkg/webhooks/admission/jobs/validate), ported."""
import pytest

from policylib.validation import validate_volcano_job, validate_volcano_policies


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
    ([{"event": "PodKilled", "action": "RestartJob"}], "p[0].event", "invalid policy event 'PodKilled'"),
    ([{"event": "OutOfSync", "action": "RestartJob"}], "p[0].event", "invalid policy event"),
    ([{"event": "PodFailed", "action": "Explode"}], "p[0].action", "invalid policy action"),
    ([{"event": "PodFailed", "action": "RestartJob"}, {"events": ["PodEvicted", "PodFailed"], "action": "AbortJob"}],
     "p[1]", "duplicate event PodFailed"),
    ([{"event": "*", "action": "RestartJob"}, {"event": "PodFailed", "action": "AbortJob"}], "p",
     "if there's * here, no other policy should be here"),
    ([{"exitCode": 0, "action": "RestartJob"}], "p[0].exitCode", "0 is not a valid error code"),
    ([{"exitCode": 2, "action": "RestartJob"}, {"exitCode": 2, "action": "AbortJob"}], "p[1].exitCode", "duplicate"),
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
     "must equal totalPartitions * partitionSize (3 * 2 = 6), got 4"),
    (t(minAvailable=3, partitionPolicy={"totalPartitions": 2, "partitionSize": 2, "minPartitions": 2}),
     "spec.tasks[0].minAvailable", "must equal minPartitions * partitionSize (2 * 2 = 4), got 3"),
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
    assert fields(validate_volcano_job(job([]))) == [("spec.tasks", "No task specified in job spec")]
    errors = fields(validate_volcano_job(job([t(), t()], minAvailable=9,
                                             policies=[{"event": "PodEvicted", "action": "RestartPartition"}])))
    assert ("spec.tasks[1].name", "duplicated task name t0") in errors
    assert any(f == "spec.minAvailable" and "greater than total replicas" in m for f, m in errors)
    assert any(f == "spec.policies[0].action" and "denied at job level" in m for f, m in errors)


def test_valid_partitioned_job():
    assert validate_volcano_job(job([t(minAvailable=4, partitionPolicy={
        "totalPartitions": 2, "partitionSize": 2, "minPartitions": 2,
        "networkTopology": {"mode": "hard", "highestTierAllowed": 1}},
        policies=[{"event": "PodEvicted", "action": "RestartPartition"}])], minAvailable=4)) == []
