"""Rule P7: each family's budget of entries in the fields its policy walks, counted before the policy reads any
of them; past it, one PolicyError naming the field and the budget (the webhook answers it by its failure mode)."""
from __future__ import annotations

import pytest

import policylib
from bench.review_objects import (
    CONFIG,
    at_budget_cases,
    constraints,
    deployment,
    named_cases,
    pytorch_job,
    replica_spec,
    volcano_job,
    volcano_task,
)
from policylib.limits import (
    KUBEFLOW_ENTRIES,
    MAX_REPLICA_TYPES,
    SPREAD_ENTRIES,
    UPDATE_FACTOR,
    VOLCANO_ENTRIES,
    entries_left,
)


class Untouchable(list):
    """A list whose entries must not be read (only its length)."""

    def __iter__(self):
        raise AssertionError("an entry was read")


def test_counting_stops_at_the_budget_whatever_the_size():
    assert entries_left(Untouchable(range(10**6)), 100) < 0   # its length alone is past the budget
    assert entries_left({"a": [1, {"b": [2, 3]}], "c": {}}, 10) == 10 - 7   # 2 keys, 2 items, 1 key, 2 items
    assert entries_left({"template": {"x": 1, "y": 2}, "n": 1}, 10, skip=frozenset({"template"})) == 8
    assert entries_left("a string", 1) == 1 and entries_left(None, 0) == 0


def test_the_deployment_of_20000_constraints_is_refused_naming_the_field_and_the_budget():
    """The value is the entries counted when the count stopped: the selector's 2 and the 20,000 constraints."""
    case = named_cases()[0]
    with pytest.raises(policylib.PolicyError) as e:
        policylib.mutate(case.obj, CONFIG)
    assert str(e.value) == (
        "Deployment tenant-a/big: spec.template.spec.topologySpreadConstraints: Too many: 20002: the spread reads of "
        "the selector, the topologySpreadConstraints and the pod anti-affinity together at most "
        f"{SPREAD_ENTRIES} entries (list items and map keys, at any depth)")
    assert e.value.errors[0].type.reason == "FieldValueTooMany"


def test_the_volcano_job_of_3000_tasks_is_refused_before_any_task_is_read():
    job = volcano_job(Untouchable(volcano_task(i) for i in range(3000)))
    with pytest.raises(policylib.PolicyError) as e:
        policylib.mutate(job, CONFIG)
    assert str(e.value).startswith("Job tenant-a/big: spec.tasks: Too many: 3000: the Volcano policy reads of the "
                                   "tasks (but their pod templates)")
    assert f"at most {VOLCANO_ENTRIES} entries" in str(e.value)


def test_a_kubeflow_job_has_at_most_8_replica_types_and_a_budget_of_template_metadata():
    specs = {f"R{i}": replica_spec() for i in range(MAX_REPLICA_TYPES + 1)}
    with pytest.raises(policylib.PolicyError, match=r"spec.pytorchReplicaSpecs: Too many: 9: must have at most 8 "
                                                    r"items$"):
        policylib.mutate(pytorch_job(specs), CONFIG)
    worker = replica_spec()
    worker["template"]["metadata"] = {"labels": {f"example.com/l{i}": "v" for i in range(KUBEFLOW_ENTRIES)}}
    with pytest.raises(policylib.PolicyError, match=r"spec.pytorchReplicaSpecs.Worker.template.metadata: Too many: "
                                                    r"2001: the gang policy reads"):
        policylib.mutate(pytorch_job({"Master": replica_spec(replicas=1), "Worker": worker}), CONFIG)


def test_the_budget_counts_nested_entries_a_selector_inside_each_constraint_included():
    selector = {"matchLabels": {f"example.com/l{i}": "v" for i in range(SPREAD_ENTRIES // 3)}}
    obj = deployment({"containers": [{"name": "c", "image": "x"}], "topologySpreadConstraints": [
        dict(constraints(i), labelSelector=selector) for i in range(3)]})
    with pytest.raises(policylib.PolicyError, match=r"topologySpreadConstraints: Too many: 2519: "):
        policylib.mutate(obj, CONFIG)


@pytest.mark.parametrize("case", at_budget_cases(), ids=lambda c: c.name)
def test_what_a_policy_admits_at_its_budget_stays_within_the_update_budget_once_written(case):
    """An object just under its CREATE budget is mutated, and what the policy wrote into it (the spread's two
    constraints carry the selector; Volcano tasks get their partitions and policies) keeps it within the UPDATE
    budget (UPDATE_FACTOR times): the stored object, and a change of it sent back whole (``kubectl edit``), are
    read, never refused."""
    result = policylib.mutate(case.obj, CONFIG, old=case.old)
    assert result.patch and not [w for w in result.warnings if "Too many" in w]
    created = result.object
    again = policylib.mutate(created, CONFIG, old=created)
    assert "Too many" not in " ".join(again.warnings + again.reasons)
    assert UPDATE_FACTOR >= 2
