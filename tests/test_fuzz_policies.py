"""Arbitrary objects of every kind policylib handles: a Result or a PolicylibError, never a crash.

Where a Result comes back, its patch reproduces it and mutating it again is a no-op.
The strategies are shared with the webhook's fuzz test (tests/webhook_support.py).
"""
import copy

import jsonpatch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policylib import PolicylibError, load_config, mutate
from policylib.errors import INT32_MAX
from policylib.validation import validate_volcano_job
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
    assert not [n for n in written_integers(result.patch) if not -INT32_MAX - 1 <= n <= INT32_MAX]  # the API's int32
    if old is None:
        assert mutate(result.object, config).patch == []


def written_integers(value):
    """Every integer a patch writes (booleans are not integers here)."""
    if isinstance(value, dict):
        return [n for v in value.values() for n in written_integers(v)]
    if isinstance(value, list):
        return [n for v in value for n in written_integers(v)]
    return [value] if isinstance(value, int) and not isinstance(value, bool) else []


@settings(max_examples=int(__import__("os").environ.get("FUZZ_EXAMPLES", "600")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(job=volcano_jobs())
def test_volcano_admission_rules_answer_field_errors_for_any_job(job):
    """What ``policylib preview`` and the webhook's warnings run: field errors, never a TypeError
    (task names and dependsOn entries of any JSON type included)."""
    if not isinstance(job.get("spec"), dict):
        return
    errors = validate_volcano_job(job)
    assert all(str(e) for e in errors)


@settings(max_examples=200, deadline=None)
@given(replicas=st.one_of(st.integers(0, 64), st.integers(2**31 - 64, 2**42)), size=st.integers(1, 8),
       min_available=st.none() | st.integers(0, 2**42))
def test_no_count_past_int32_is_written_whatever_the_task_replicas(replicas, size, min_available):
    """A well-formed task with any replica count: refused past int32, never partitions past it."""
    task = {"name": "w", "replicas": replicas, "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}
    if min_available is not None:
        task["minAvailable"] = min_available
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "j", "namespace": "ml"},
           "spec": {"tasks": [task]}}
    try:
        result = mutate(job, load_config({"volcano": {"partitionSize": size}}))
    except PolicylibError:
        return
    assert replicas <= INT32_MAX  # past int32 is never accepted
    assert not [n for n in written_integers(result.patch) if n > INT32_MAX]
