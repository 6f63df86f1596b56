"""Valid objects of every kind with fields swapped for values of the wrong type (as a reliability probe
sends them): every call ends in a Result whose patch applies, or a PolicylibError naming the field —
never another exception. Fixed seed, a few thousand examples; ``FUZZ_MUTATIONS=N`` runs more."""
from __future__ import annotations

import copy
import os
import random

import jsonpatch
import pytest

from policylib import PolicylibError, load_config, mutate
from tests.helpers import deployment, legacy_anti_affinity
from tests.test_plan import tfjob
from tests.test_volcano import job, task

#: Values of every JSON type, and a few that are the right type with the wrong sense.
ODD = [None, 1.5, -1, 0, True, "x", "", [], [1, "a"], {}, {"a": 1}, 2**40, "3", [[{}]]]
CONFIGS = [load_config(c) for c in (
    None,
    {"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule"}, "volcano": {"partitionSize": 2},
     "gang": {"method": "podgroup", "scheduler": "scheduler-plugins"}},
    {"gang": {"method": "koordinator", "scheduler": "koordinator", "groupByRole": True}},
)]


def bases() -> list[dict]:
    legacy = deployment(replicas=4, pod_spec={
        "containers": [{"name": "a", "image": "x", "resources": {"requests": {"cpu": "1"}}}],
        "affinity": legacy_anti_affinity({"app": "web"}), "tolerations": [{"key": "k", "operator": "Exists"}],
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "rack", "whenUnsatisfiable": "ScheduleAnyway",
                                       "labelSelector": {"matchLabels": {"app": "web"}}}]})
    legacy["metadata"]["annotations"] = {"policylib.io/autoscaling-min-replicas": "5",
                                         "policylib.io/spread-effective-replicas": "4"}
    volcano = job(task(replicas=4), task(name="ps", replicas=1))
    volcano["spec"]["policies"] = [{"event": "PodFailed", "action": "RestartPartition"}]
    volcano["metadata"]["annotations"] = {"policylib.io/partition-size": "2"}
    return [legacy, tfjob(), volcano]


def paths(node, path=()):
    yield path
    if isinstance(node, dict):
        for k, v in node.items():
            yield from paths(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from paths(v, path + (i,))


def swap(obj, path, value) -> None:
    for key in path[:-1]:
        obj = obj[key]
    obj[path[-1]] = value


@pytest.mark.parametrize("seed", [1, 2])
def test_wrong_types_anywhere_are_a_result_or_a_policylib_error(seed):
    rng = random.Random(seed)
    originals = bases()
    results = 0
    for _ in range(int(os.environ.get("FUZZ_MUTATIONS", "2500"))):
        obj = copy.deepcopy(rng.choice(originals))
        for _ in range(rng.randint(1, 3)):   # each swap on the object as the previous one left it
            swap(obj, rng.choice([p for p in paths(obj) if p]), copy.deepcopy(rng.choice(ODD)))
        old = copy.deepcopy(rng.choice(originals)) if rng.random() < 0.3 else None
        sent = copy.deepcopy(obj)
        try:
            result = mutate(obj, rng.choice(CONFIGS), old=old)
        except PolicylibError:
            continue
        assert obj == sent, "mutate changed its input"
        assert jsonpatch.apply_patch(obj, result.patch) == result.object, obj
        results += 1
    assert results > 0, "every mutation was refused: nothing was checked"
