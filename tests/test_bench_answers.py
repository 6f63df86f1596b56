"""bench/bench_apiserver.py judges every arm's answers: the Go floor must write exactly what policylib writes.

No cluster here: the checks themselves, on objects built as the API server would return them.
"""
from __future__ import annotations

import copy

import jsonpatch
import pytest

import policylib
from bench import bench_apiserver as bench


def returned(sent: dict, patch: list[dict]) -> dict:
    """The object a dry-run create returns after a webhook's patch."""
    return jsonpatch.apply_patch(copy.deepcopy(sent), patch)


def policylib_patch(sent: dict) -> list[dict]:
    return list(policylib.mutate(sent, policylib.load_config(None), namespace=sent["metadata"]["namespace"]).patch)


def test_policylib_writes_the_records_and_both_constraints():
    sent = bench.deployment("web", "bench-x")
    records, constraints = bench.policylib_writes(sent)
    assert records == {"policylib.io/spread-effective-replicas": "6",
                       "policylib.io/spread-settings": bench.settings_hash(),
                       "policylib.io/spread-topology-keys": "topology.kubernetes.io/zone,kubernetes.io/hostname"}
    assert [(c["topologyKey"], c["maxSkew"], c["whenUnsatisfiable"], c["matchLabelKeys"]) for c in constraints] == [
        ("topology.kubernetes.io/zone", 1, "ScheduleAnyway", ["pod-template-hash"]),
        ("kubernetes.io/hostname", 1, "ScheduleAnyway", ["pod-template-hash"])]
    assert constraints[0]["labelSelector"] == {"matchLabels": sent["spec"]["selector"]["matchLabels"]}
    assert "spread-settings" not in str(sent)   # computed on a copy


def test_settings_hash_is_twelve_hex_digits():
    value = bench.settings_hash()
    assert len(value) == 12 and int(value, 16) >= 0


def test_exact_check_passes_policylibs_own_answer():
    arm = bench.Arm("go-spread", expect_spread=True, same_as_policylib=True)
    sent = bench.deployment("web", arm.namespace)
    bench.check_answer(arm, sent, returned(sent, policylib_patch(sent)), exact=True)
    assert arm.unpatched == 0


def constraints_only(sent: dict) -> list[dict]:
    """The floor's former answer: the two constraints alone, no records, no matchLabelKeys."""
    selector = {"matchLabels": sent["spec"]["selector"]["matchLabels"]}
    return [{"op": "add", "path": "/spec/template/spec/topologySpreadConstraints", "value": [
        {"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": selector,
         "nodeTaintsPolicy": "Honor"} for key in (bench.ZONE, bench.HOST)]}]


def test_exact_check_rejects_a_smaller_mutation():
    arm = bench.Arm("go-spread", expect_spread=True, same_as_policylib=True)
    sent = bench.deployment("web", arm.namespace)
    obj = returned(sent, constraints_only(sent))
    with pytest.raises(AssertionError, match="arm go-spread: wrote .* policylib writes"):
        bench.check_answer(arm, sent, obj, exact=True)
    bench.check_answer(arm, sent, obj)                       # only the keys are checked while measuring
    bench.check_answer(bench.Arm("go-constraints", expect_spread=True), sent, obj, exact=True)


def test_exact_check_rejects_a_different_record_value():
    arm = bench.Arm("go-spread", expect_spread=True, same_as_policylib=True)
    sent = bench.deployment("web", arm.namespace)
    obj = returned(sent, policylib_patch(sent))
    obj["metadata"]["annotations"]["policylib.io/spread-effective-replicas"] = "5"
    with pytest.raises(AssertionError, match="spread-effective-replicas"):
        bench.check_answer(arm, sent, obj, exact=True)


def test_an_unchanged_answer_is_counted_not_fatal():
    arm = bench.Arm("go-spread", expect_spread=True, same_as_policylib=True)
    sent = bench.deployment("web", arm.namespace)
    bench.check_answer(arm, sent, copy.deepcopy(sent), exact=True)
    assert arm.unpatched == 1
