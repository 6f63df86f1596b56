"""Arbitrary objects of every kind policylib handles: a Result or a PolicylibError, never a crash.

Where a Result comes back, its patch reproduces it and mutating it again is a no-op.
The strategies are shared with the webhook's fuzz test (tests/webhook_support.py).
"""
import copy

import jsonpatch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policylib import PolicylibError, load_config, mutate
from tests.webhook_support import fields, kubeflow_jobs, maybe, metadata, pod_template, volcano_jobs

CONFIGS = [load_config(c) for c in (
    None,
    {"volcano": {"partitionSize": 2}, "gang": {"method": "podgroup", "scheduler": "koordinator"}},
    {"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule"}, "removePodAntiAffinity": "all",
     "gang": {"method": "koordinator", "scheduler": "koordinator", "groupByRole": True, "onViolation": "deny"}},
)]


@st.composite
def deployments(draw) -> dict:
    selector = maybe(st.fixed_dictionaries({}, optional={"matchLabels": maybe(st.dictionaries(
        st.sampled_from(["app", "tier"]), st.sampled_from(["web", "x"]), max_size=2))}))
    spec = draw(fields(replicas=maybe(st.integers(-1, 12)), selector=selector, template=pod_template))
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": draw(metadata), "spec": spec}


objects = st.one_of(deployments(), kubeflow_jobs(), volcano_jobs())


@settings(max_examples=int(__import__("os").environ.get("FUZZ_EXAMPLES", "600")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(obj=objects, old=st.none() | objects, which=st.integers(0, len(CONFIGS) - 1))
def test_any_object_gets_a_result_or_a_policylib_error(obj, old, which):
    config = CONFIGS[which]
    snapshot = copy.deepcopy(obj)
    try:
        result = mutate(obj, config, old=old)
    except PolicylibError:
        return
    assert obj == snapshot
    assert jsonpatch.apply_patch(obj, result.patch) == result.object
    if old is None:
        assert mutate(result.object, config).patch == []
