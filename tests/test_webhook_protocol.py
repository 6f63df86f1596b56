"""The AdmissionReview protocol of ``webhook.create_app``, in process (Flask's test client).

The same rules over real TLS are in test_webhook_server.py.
"""
from __future__ import annotations

import copy
import io
import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import policylib
import webhook
from policylib.labels import qualified_name_errors
from tests.helpers import deployment
from tests.webhook_support import SAMPLE_NAMES, kubeflow_jobs, patch_of, patched, request_kind, review_of, sample, volcano_jobs
from webhook.admission import review as rv
from webhook.admission.facts import ObjectOnlyFacts
from webhook.admission.metrics import kind_label


class App:
    """An app, its test client, and the JSON lines it logged."""

    def __init__(self, config=None, **kwargs):
        self.lines: list[str] = []
        self.app = webhook.create_app(config, review_log=self.lines.append, **kwargs)
        self.client = self.app.test_client()

    def post(self, body, **kwargs):
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        return self.client.post("/mutate", data=data, content_type="application/json", **kwargs)

    def answer(self, review: dict) -> dict:
        response = self.post(review)
        assert response.status_code == 200, response.data
        body = response.get_json()
        assert (body["apiVersion"], body["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
        assert body["response"]["uid"] == review["request"]["uid"]
        return body["response"]

    def metric(self, line_start: str) -> float:
        text = self.client.get("/metrics").get_data(as_text=True)
        values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(line_start)]
        return sum(values)


@pytest.fixture
def app():
    return App()


def bad_deployment() -> dict:
    """A Deployment policylib cannot handle: no spec.selector."""
    obj = deployment("nosel", "ml")
    del obj["spec"]["selector"]
    return obj


# --- answers that follow policylib exactly -------------------------------------

@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_every_sample_kind_is_answered_with_exactly_policylibs_result(app, name):
    review = sample(name)
    req = review["request"]
    expected = policylib.mutate(req["object"], None, old=req["oldObject"] if req["operation"] == "UPDATE" else None,
                                namespace=req["namespace"])
    response = app.answer(review)
    assert response["allowed"] is True
    assert patch_of(response) == expected.patch
    assert patched(req["object"], response) == expected.object


def test_create_deployment_patch_and_audit_summary(app):
    review = sample("deployment-create.json")
    response = app.answer(review)
    assert set(response) == {"uid", "allowed", "patchType", "patch", "auditAnnotations"}
    assert [op["path"] for op in patch_of(response)] == [
        "/metadata/annotations", "/spec/template/spec/topologySpreadConstraints", "/spec/template/spec/affinity"]
    assert response["auditAnnotations"] == {"reasons": "; ".join(
        policylib.mutate(review["request"]["object"], None, namespace="serving").reasons)}


def test_a_statefulset_review_gets_the_spread_and_its_hpa_through_the_watch_cache_facts(app):
    """Rule A4: a StatefulSet CREATE is answered with the StatefulSet family's patch (no revision key)."""
    sts = deployment("redis", "serving", 3) | {"kind": "StatefulSet"}
    sts["spec"]["serviceName"] = "redis"
    response = app.answer(review_of(sts))
    assert [op["path"] for op in patch_of(response)] == ["/metadata/annotations",
                                                         "/spec/template/spec/topologySpreadConstraints"]
    assert patched(sts, response) == policylib.mutate(sts, None, namespace="serving").object
    assert all("matchLabelKeys" not in c for c in patch_of(response)[1]["value"])


def test_update_passes_old_object_to_policylib(app):
    review = sample("deployment-update.json")
    req = review["request"]
    expected = policylib.mutate(req["object"], None, old=req["oldObject"], namespace="serving")
    assert "effective replicas changed 3 -> 6" in expected.reasons
    response = app.answer(review)
    assert patched(req["object"], response) == expected.object
    without_old = policylib.mutate(req["object"], None, namespace="serving")
    assert expected.reasons != without_old.reasons


def test_unchanged_object_has_neither_patch_nor_patch_type(app):
    obj = deployment("web", "ml", annotations={"policylib.io/skip": "true"})
    response = app.answer(review_of(obj))
    assert response == {"uid": "uid-1", "allowed": True, "auditAnnotations": {"reasons": "skipped: policylib.io/skip=true"}}


def test_second_review_of_the_patched_object_is_a_no_op(app):
    review = sample("deployment-create.json")
    once = patched(review["request"]["object"], app.answer(review))
    again = app.answer(review_of(once, namespace="serving"))
    assert "patch" not in again and "patchType" not in again


def test_unknown_kind_is_allowed_without_patch_and_the_audit_log_says_it_is_not_handled(app):
    """A kind no family handles (a webhook rule wider than the shipped one) is admitted as it is, and the audit
    annotation says why (rule P9): never a silent "nothing to do"."""
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ml"}, "data": {}}
    assert app.answer(review_of(config_map)) == {
        "uid": "uid-1", "allowed": True,
        "auditAnnotations": {"reasons": "not handled: policylib has no policy for v1 ConfigMap (it handles "
                                        "Deployments, StatefulSets, LeaderWorkerSets, Kubeflow TFJobs, PyTorchJobs and "
                                        "MPIJobs, JobSets, TrainJobs, Volcano Jobs and gang Pods)"}}


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
def test_delete_and_connect_are_allowed_untouched_without_calling_policylib(monkeypatch, app, operation):
    def boom(*args, **kwargs):
        raise AssertionError("policylib must not be called")
    monkeypatch.setattr(policylib, "mutate", boom)
    obj = deployment("web", "ml")
    review = review_of(None if operation == "DELETE" else obj, operation, old=obj if operation == "DELETE" else None)
    assert app.answer(review) == {"uid": "uid-1", "allowed": True}


def test_dry_run_gets_the_same_answer(app):
    review = sample("deployment-create.json")
    dry = copy.deepcopy(review)
    dry["request"]["dryRun"] = True
    assert app.answer(dry) == app.answer(review)


def test_namespace_comes_from_the_request():
    obj = deployment("web", "")
    del obj["metadata"]["namespace"]
    hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
           "metadata": {"name": "web", "namespace": "team-a"},
           "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                    "minReplicas": 5, "maxReplicas": 9}}
    app = App(facts=policylib.ClusterFacts.from_objects([hpa]))
    response = app.answer(review_of(obj, namespace="team-a"))
    assert "effective replicas 5 (HorizontalPodAutoscaler web minReplicas 5)" in response["auditAnnotations"]["reasons"]
    ready = app.client.get("/readyz").get_json()
    assert (ready["ready"], ready["facts"]) == (True, "given")


# --- warnings, audit annotations -------------------------------------------------

def priority_mismatch_job() -> dict:
    job = sample("pytorchjob-create.json")["request"]["object"]
    specs = job["spec"]["pytorchReplicaSpecs"]
    specs["Master"]["template"]["spec"]["priorityClassName"] = "high-priority-training"
    specs["Worker"]["template"]["spec"]["priorityClassName"] = "low-priority-training-preemptible"
    return job


def test_warnings_are_cut_to_120_characters():
    job = priority_mismatch_job()
    full = policylib.mutate(job, None, namespace="training").warnings
    assert max(len(w) for w in full) > 120
    response = App().answer(review_of(job))
    assert response["allowed"] is True
    assert response["warnings"] == rv.short_warnings(full)
    assert all(len(w) <= 120 for w in response["warnings"])
    assert any(w.endswith("...") for w in response["warnings"])


@pytest.mark.parametrize("text, expected", [
    ("short", "short"),
    ("a  b\nc", "a b c"),
    ("x" * 121, "x" * 117 + "..."),
    ("word " * 30, ("word " * 23).rstrip() + "..."),
])
def test_truncate(text, expected):
    assert rv.truncate(text, 120) == expected
    assert len(rv.truncate(text, 120)) <= 120


def test_audit_annotation_keys_stay_qualified_names_under_the_webhook_name_prefix(app):
    response = app.answer(sample("deployment-create.json"))
    for key in response["auditAnnotations"]:
        assert qualified_name_errors(f"deployments.policylib.io/{key}") == []
    assert len(response["auditAnnotations"]["reasons"]) <= rv.MAX_AUDIT_CHARS


def test_policy_denial_is_allowed_false_with_403_and_no_patch():
    app = App({"gang": {"onViolation": "deny"}})
    job = priority_mismatch_job()
    expected = policylib.mutate(job, app.app.extensions["policylib"]["config"], namespace="training")
    response = app.answer(review_of(job))
    assert response["allowed"] is False
    assert response["status"] == {"code": 403, "message": f"policylib: {expected.denial}"}
    assert "patch" not in response and "patchType" not in response
    assert app.metric('policylib_webhook_reviews_total{kind="PyTorchJob",operation="CREATE",outcome="denied"}') == 1


# --- failure modes ----------------------------------------------------------------

def test_fail_open_allows_unchanged_with_a_warning_and_counts_the_failure(app):
    response = app.answer(review_of(bad_deployment()))
    assert response["allowed"] is True
    assert "patch" not in response
    assert response["warnings"] == [rv.truncate(
        "policylib not applied: Deployment ml/nosel: spec.selector: Required value: apps/v1 Deployments need a "
        "non-empty selector", 120)]
    assert response["warnings"][0].startswith("policylib not applied: Deployment ml/nosel: spec.selector")
    assert app.metric('policylib_webhook_policy_failures_total{kind="Deployment",mode="open"}') == 1
    assert app.metric('policylib_webhook_reviews_total{kind="Deployment",operation="CREATE",outcome="fail_open"}') == 1


def test_fail_closed_denies_with_400_and_the_message():
    app = App({"webhook": {"failureMode": "closed"}})
    response = app.answer(review_of(bad_deployment()))
    assert response["allowed"] is False
    assert response["status"] == {"code": 400, "message": "policylib: Deployment ml/nosel: spec.selector: "
                                                          "Required value: apps/v1 Deployments need a non-empty "
                                                          "selector"}
    assert "patch" not in response
    assert app.metric('policylib_webhook_policy_failures_total{kind="Deployment",mode="closed"}') == 1


def test_an_unexpected_exception_follows_the_failure_mode_too(monkeypatch, app, caplog):
    def broken(*args, **kwargs):
        raise KeyError("spec")
    monkeypatch.setattr(policylib, "mutate", broken)
    response = app.answer(review_of(deployment("web", "ml")))
    assert response["allowed"] is True
    assert response["warnings"] == ["policylib not applied: internal error KeyError: 'spec'"]
    [record] = [r for r in caplog.records if r.getMessage() == "policy raised an unexpected exception"]
    assert (record.exception, record.kind, record.namespace, record.object_name) == ("KeyError", "Deployment", "ml", "web")
    assert record.exc_info is not None and record.exc_info[0] is KeyError


# --- bad input: 400, 405, 413, never 500 ---------------------------------------------

def error_of(response, status: int) -> str:
    assert response.status_code == status
    assert response.mimetype == "application/json"
    body = response.get_json()
    assert body["code"] == status
    return body["error"]


def valid() -> dict:
    return review_of(deployment("web", "ml"))


def without(key: str) -> dict:
    review = valid()
    del review["request"][key]
    return review


@pytest.mark.parametrize("body, message", [
    (b"{not json", "body is not valid JSON: "),
    (b"\xff\xfe", "body is not valid JSON: "),
    (b"[]", "body must be a JSON object, got list"),
    ({**valid(), "apiVersion": "admission.k8s.io/v1beta1"}, "body must be an admission.k8s.io/v1 AdmissionReview, "
                                                           "got apiVersion='admission.k8s.io/v1beta1' kind='AdmissionReview'"),
    ({**valid(), "kind": "Deployment"}, "body must be an admission.k8s.io/v1 AdmissionReview"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "request is required and must be an object"),
    (without("uid"), "request.uid is required"),
    ({**valid(), "request": {**valid()["request"], "uid": ""}}, "request.uid is required"),
    ({**valid(), "request": {**valid()["request"], "uid": 7}}, "request.uid must be a string, got int"),
    (without("operation"), "request.operation is required"),
    ({**valid(), "request": {**valid()["request"], "operation": "PATCH"}}, "request.operation must be one of "
                                                                           "CREATE, UPDATE, DELETE, CONNECT, got 'PATCH'"),
    (without("kind"), "request.kind must be an object with group, version and kind"),
    (without("object"), "request.object is required for CREATE"),
    ({**valid(), "request": {**valid()["request"], "object": [1]}}, "request.object must be an object, got list"),
])
def test_bad_reviews_are_400_with_a_json_error(app, body, message):
    assert error_of(app.post(body), 400).startswith(message)
    assert app.metric('policylib_webhook_bad_requests_total{code="400"}') == 1


def test_deeply_nested_json_is_400_not_a_crash(app):
    assert error_of(app.post(b"[" * 100_000 + b"]" * 100_000), 400).startswith("body is not valid JSON")


@pytest.mark.parametrize("method", ["get", "put", "delete", "patch"])
def test_wrong_method_is_405_with_allow_header(app, method):
    response = getattr(app.client, method)("/mutate")
    error_of(response, 405)
    assert response.headers["Allow"] in ("POST, OPTIONS", "OPTIONS, POST")


@pytest.mark.parametrize("method", ["POST", "post", "Post"])
@pytest.mark.parametrize("path", ["/mutate", "/%6dutate", "/mutate?timeout=3s"])
def test_every_request_flask_routes_to_mutate_is_answered_before_flask(app, method, path):
    """Flask routes ``/mutate`` whatever the method's case or the path's percent-encoding; its rule has no view, so a
    request that reached Flask's dispatch would fail (a 500, a server error counted). Each is a review answered in
    front of Flask: a valid one 200, a bad one 400 with the review's own message (the one place BadReview is
    handled)."""
    assert "mutate" in {rule.endpoint for rule in app.app.url_map.iter_rules()}
    assert "mutate" not in app.app.view_functions
    response = app.client.open(path, method=method, data=json.dumps(valid()), content_type="application/json")
    assert response.status_code == 200 and response.get_json()["response"]["allowed"] is True
    bad = app.client.open(path, method=method, data=b"[]", content_type="application/json")
    assert error_of(bad, 400) == "body must be a JSON object, got list"
    assert app.metric("policylib_webhook_server_errors_total") == 0
    assert app.metric('policylib_webhook_reviews_total{kind="Deployment"') == 1


def test_body_over_the_limit_is_413():
    app = App({"webhook": {"maxRequestBytes": 1024}})
    review = valid()
    review["request"]["object"]["metadata"]["annotations"] = {"big": "x" * 2000}
    assert error_of(app.post(review), 413)
    assert app.metric('policylib_webhook_bad_requests_total{code="413"}') == 1
    assert app.post(valid()).status_code == 200


def test_a_400_quotes_only_a_short_prefix_of_what_was_sent(app):
    """Rule P8: a 5 MB apiVersion comes back as 64 characters and ``...``, not as a 5 MB body."""
    body = {"apiVersion": "v" * 5_000_000, "kind": "AdmissionReview", "request": {}}
    response = app.post(body)
    assert error_of(response, 400) == (f"body must be an admission.k8s.io/v1 AdmissionReview, got apiVersion="
                                       f"'{'v' * 64}'... kind='AdmissionReview'")
    assert len(response.data) < 300
    review = valid()
    review["request"]["operation"] = "P" * 1_000_000
    assert error_of(app.post(review), 400).endswith(f"got '{'P' * 64}'...")
    review["request"]["operation"] = {"op": ["x" * 1_000_000]}
    assert len(app.post(review).data) < 300


def test_a_policy_failure_and_its_log_line_quote_only_a_short_prefix():
    """A fail-closed denial (status 400 in the answer) and the review's log line quote a prefix of the values, and
    list at most 20 errors."""
    app = App({"webhook": {"failureMode": "closed"}})
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "j", "namespace": "ml"},
           "spec": {"tasks": [{"name": f"t{i}", "replicas": "x" * 50_000} for i in range(30)]}}
    review = review_of(job)
    review["request"]["name"] = "n" * 100_000
    answer = app.answer(review)
    message = answer["status"]["message"]
    assert answer["status"]["code"] == 400 and len(message) < 3000, len(message)
    assert message.startswith(f'policylib: Job ml/j: [spec.tasks[0].replicas: Invalid value: "{"x" * 64}"...: must be '
                              'an integer >= 0, ')
    assert message.endswith(", and 10 more]")
    line = json.loads(app.lines[-1])
    assert line["name"] == "n" * 253 + "..." and len(app.lines[-1]) < 10_000


def test_the_bodies_a_worker_holds_stay_within_its_budget():
    """Rule W11: a review takes its body's room before reading it; one that does not fit waits (here: not at all)
    and is answered 503; alone, any review fits; the room comes back once answered."""
    from werkzeug.exceptions import ServiceUnavailable

    from webhook.admission.bodies import BodyBudget
    budget = BodyBudget(10)
    with budget.hold(8):
        with budget.hold(2, wait=0):
            assert budget.held == 10
        with pytest.raises(ServiceUnavailable), budget.hold(3, wait=0):
            pass
        assert budget.held == 8
    assert budget.held == 0
    with budget.hold(25, wait=0):   # larger than the budget, but alone
        assert budget.held == 25


def test_a_review_that_finds_no_room_is_503_and_counted(monkeypatch):
    """Rule W11 through the app: while another review holds the worker's whole budget, a review is answered 503
    (the API server's failurePolicy decides), counted, and the next one, once there is room, is answered."""
    import webhook.admission.bodies
    monkeypatch.setattr(webhook.admission.bodies, "ROOM_WAIT_SECONDS", 0)
    app = App()
    bodies = app.app.extensions["policylib"]["bodies"]
    with bodies.hold(bodies.budget):
        assert "holds" in error_of(app.post(valid()), 503)
    assert app.metric('policylib_webhook_bad_requests_total{code="503"}') == 1
    assert app.post(valid()).status_code == 200 and bodies.held == 0


def test_a_review_that_finds_no_room_is_answered_once_its_body_is_read(monkeypatch):
    """Rule W11: the 503 goes out after the refused review's body is read and dropped (a client still sending when
    the server answers and closes would get a reset, not the 503); so does one whose body ends early."""
    import io

    import webhook.admission.bodies
    monkeypatch.setattr(webhook.admission.bodies, "ROOM_WAIT_SECONDS", 0)
    app = App()
    bodies = app.app.extensions["policylib"]["bodies"]
    body = json.dumps(valid()).encode() + b" " * (3 * webhook.admission.bodies.DISCARD_CHUNK)
    for declared, stream in ((len(body), io.BytesIO(body)), (len(body) + 100, io.BytesIO(body))):
        with bodies.hold(bodies.budget):
            response = app.client.post("/mutate", input_stream=stream, content_length=declared,
                                       content_type="application/json")
        assert "holds" in error_of(response, 503)
        assert stream.tell() == len(body)
    assert app.post(valid()).status_code == 200 and bodies.held == 0


def test_the_time_a_review_waits_for_room_is_not_taken_from_its_clients_deadline(monkeypatch):
    """Rules W11 and W12: a review refused after waiting for room has that wait moved off its connection's deadline
    (``gunicorn.socket``) before its body is read and dropped, so a client that sent at once is not cut off as too
    slow because the server queued it."""
    import webhook.admission.bodies
    monkeypatch.setattr(webhook.admission.bodies, "ROOM_WAIT_SECONDS", 0.2)

    class Connection:
        moved: list[float] = []

        def not_the_clients_time(self, seconds: float) -> None:
            self.moved.append(seconds)

    app = App()
    bodies = app.app.extensions["policylib"]["bodies"]
    with bodies.hold(bodies.budget):
        response = app.client.post("/mutate", data=json.dumps(valid()), content_type="application/json",
                                   environ_base={"gunicorn.socket": Connection()})
    assert "holds" in error_of(response, 503)
    assert len(Connection.moved) == 1 and 0.2 <= Connection.moved[0] < 30
    Connection.moved.clear()
    response = app.client.post("/mutate", data=json.dumps(valid()), content_type="application/json",
                               environ_base={"gunicorn.socket": Connection()})
    assert response.status_code == 200 and len(Connection.moved) == 1 and 0 <= Connection.moved[0] < 0.2


def test_unknown_path_is_404_json(app):
    error_of(app.client.post("/nope"), 404)


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                           lambda children: st.lists(children, max_size=3) | st.dictionaries(
                               st.sampled_from(["apiVersion", "kind", "request", "uid", "operation", "object",
                                                "oldObject", "namespace", "dryRun", "metadata", "spec"]),
                               children, max_size=4), max_leaves=12)


workloads = kubeflow_jobs() | volcano_jobs()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request=json_values, operation=st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT", "X", None]),
       workload=st.none() | workloads, old=st.none() | workloads)
def test_any_json_gets_200_or_400_never_a_500(app, request, operation, workload, old):
    """Reviews with arbitrary request shapes, kinds and objects: the answer is 200 or 400.

    Besides Deployments: Kubeflow TFJob/PyTorchJob/MPIJob with arbitrary replica specs and
    Volcano Jobs with arbitrary tasks (``workload``, and ``old`` as the UPDATE's oldObject). A
    200 is a proper answer, or fail-open: allowed, no patch, a warning.
    """
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    if isinstance(request, dict):
        request.setdefault("uid", "u")
        request["operation"] = operation
        request.setdefault("kind", {"group": "apps", "version": "v1", "kind": "Deployment"})
        if workload is not None:
            request.update(kind=request_kind(workload), object=workload, oldObject=old)
        elif isinstance(request.get("object"), dict):
            request["object"].update(apiVersion="apps/v1", kind="Deployment")
    response = app.post(body)
    assert response.status_code in (200, 400), response.data
    if response.status_code == 200:
        answer = response.get_json()["response"]
        assert answer["uid"] == request["uid"]
        if any(w.startswith("policylib not applied: ") for w in answer.get("warnings", ())):
            assert (answer["allowed"], "patch" in answer) == (True, False)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(max_size=64))
def test_any_bytes_get_400_never_a_500(app, body):
    assert app.post(body).status_code == 400


# --- log line, probes, metrics ---------------------------------------------------------

def test_one_json_log_line_per_review(app):
    app.answer(sample("deployment-create.json"))
    app.answer(review_of(bad_deployment(), uid="uid-2"))
    assert len(app.lines) == 2
    first, second = (json.loads(line) for line in app.lines)
    assert {k: first[k] for k in first if k != "durationMs"} == {
        "msg": "review", "uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "kind": "Deployment", "group": "apps",
        "namespace": "serving", "name": "model-server", "operation": "CREATE", "dryRun": False,
        "outcome": "mutated", "mutated": True, "patchOps": 3, "allowed": True}
    assert 0 < first["durationMs"] < 10_000
    assert (second["outcome"], second["mutated"], second["patchOps"]) == ("fail_open", False, 0)
    assert second["error"].startswith("Deployment ml/nosel: spec.selector: Required value")


def test_default_review_log_is_the_webhook_review_logger(caplog):
    caplog.set_level("INFO", logger="webhook.review")
    client = webhook.create_app(None).test_client()
    client.post("/mutate", json=sample("deployment-create.json"))
    records = [r for r in caplog.records if r.name == "webhook.review"]
    assert len(records) == 1 and json.loads(records[0].getMessage())["uid"] == "705ab4f5-6393-11e8-b7cc-42010a800002"


def test_healthz(app):
    assert app.client.get("/healthz").get_json() == {"status": "ok"}


def test_readyz_reports_object_only_mode(app):
    response = app.client.get("/readyz")
    assert response.status_code == 200
    body = response.get_json()
    assert (body["ready"], body["facts"], body["failureMode"]) == (True, "object-only", "open")


ANONYMOUS = {"REMOTE_ADDR": "10.244.1.7"}   # a pod's address: neither loopback nor a verified certificate


def test_readyz_says_only_ready_or_not_to_an_anonymous_caller():
    """Rule W13: from another address than loopback and without a verified client certificate, no detail (no pid,
    certificate path, facts source or failure mode): 200 or 503 and whether ready."""
    assert App().client.get("/readyz", environ_base=ANONYMOUS).get_json() == {"ready": True}
    facts = ObjectOnlyFacts("test")
    facts.ready = False
    response = App(facts=facts).client.get("/readyz", environ_base=ANONYMOUS)
    assert (response.status_code, response.get_json()) == (503, {"ready": False})
    for local in ("127.0.0.1", "::1", "::ffff:127.0.0.1"):
        assert "failureMode" in App().client.get("/readyz", environ_base={"REMOTE_ADDR": local}).get_json()


class Verified:
    """Callers whose certificates are required, and verified when ``ok``."""

    required = True

    def __init__(self, ok: bool):
        self.ok = ok

    def verified(self, environ: dict) -> bool:
        return self.ok


def test_with_certificates_required_a_caller_without_one_gets_403_and_no_review(monkeypatch):
    """Rule W13: nothing is read, decided or looked up for an unverified caller; a verified one is reviewed, and also
    gets /readyz's detail from any address."""
    decided = []
    monkeypatch.setattr(rv, "decide", lambda *args: decided.append(args) or rv.Answer(rv.UNCHANGED))
    refused = App(callers=Verified(False))
    response = refused.post(review_of(deployment("web", "ml")))
    assert (response.status_code, response.get_json()) == (
        403, {"error": "a client certificate verified by the webhook's client CA is required", "code": 403})
    assert decided == [] and refused.lines == []
    assert refused.metric('policylib_webhook_bad_requests_total{code="403"}') == 1
    assert refused.client.get("/readyz", environ_base=ANONYMOUS).get_json() == {"ready": True}
    verified = App(callers=Verified(True))
    assert verified.post(review_of(deployment("web", "ml"))).status_code == 200 and len(decided) == 1
    assert "failureMode" in verified.client.get("/readyz", environ_base=ANONYMOUS).get_json()


def test_an_error_quotes_at_most_200_characters_of_the_input(app):
    """Rule W13: a 5 MB ``apiVersion`` came back as a 5 MB body; now its first characters only."""
    response = app.post(json.dumps({"apiVersion": "v" * 5_000_000, "kind": "AdmissionReview", "request": {}}))
    body = response.get_json()
    assert response.status_code == 400 and len(body["error"]) <= 200
    assert body["error"].startswith("body must be an admission.k8s.io/v1 AdmissionReview, got apiVersion='vvv")


def test_readyz_is_503_while_facts_are_not_synced():
    facts = ObjectOnlyFacts("test")
    facts.ready = False
    response = App(facts=facts).client.get("/readyz")
    assert response.status_code == 503 and response.get_json()["ready"] is False


def test_metrics_exposition(app):
    app.answer(sample("deployment-create.json"))
    app.answer(review_of(None, "DELETE", old=deployment("web", "ml")))
    text = app.client.get("/metrics").get_data(as_text=True)
    histogram = "policylib_webhook_review_duration_seconds"
    buckets = re.findall(rf'^{histogram}_bucket{{kind="Deployment",le="([^"]+)",operation="CREATE"}} ', text, re.M)
    assert {"0.005", "0.025", "0.1", "+Inf"} <= set(buckets)  # the API server's own buckets are there
    assert f'{histogram}_bucket{{kind="Deployment",le="+Inf",operation="CREATE"}} 1.0' in text
    assert f'{histogram}_count{{kind="Deployment",operation="CREATE"}} 1.0' in text
    assert 'policylib_webhook_reviews_total{kind="Deployment",operation="CREATE",outcome="mutated"} 1.0' in text
    assert 'policylib_webhook_reviews_total{kind="Deployment",operation="DELETE",outcome="skipped"} 1.0' in text
    assert 'policylib_webhook_patch_operations_total{kind="Deployment"} 3.0' in text
    assert "policylib_webhook_in_flight_requests 0.0" in text


def test_two_apps_in_one_process_keep_separate_metrics():
    first, second = App(), App()
    first.answer(sample("deployment-create.json"))
    assert second.metric("policylib_webhook_reviews_total") == 0
    assert first.metric("policylib_webhook_reviews_total") == 1


# --- bounded metric labels ------------------------------------------------------------

@pytest.mark.parametrize("group, kind, label", [
    ("apps", "Deployment", "Deployment"),
    ("apps", "StatefulSet", "StatefulSet"),
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet", "LeaderWorkerSet"),
    ("batch.volcano.sh", "Job", "Job"),
    ("kubeflow.org", "TFJob", "TFJob"),
    ("kubeflow.org", "PyTorchJob", "PyTorchJob"),
    ("kubeflow.org", "MPIJob", "MPIJob"),
    ("training.volcano.sh", "HyperJob", "HyperJob"),
    ("batch", "Job", "other"),
    ("", "Deployment", "other"),
    ("", "Pod", "Pod"),
    ("apps", "Pod", "other"),
    ("example.com", "Deployment", "other"),
    ("kubeflow.org", "XGBoostJob", "other"),
    ("example.com", "HyperJob", "other"),
    ("apps", "x" * 10_000, "other"),
])
def test_kind_label_is_a_kind_policylib_handles_or_other(group, kind, label):
    assert kind_label(group, kind) == label


def test_random_kinds_share_one_metric_series(app):
    """Kinds copied from requests would add series without bound (multiprocess files on a small
    emptyDir): every kind policylib does not handle counts as "other"."""
    for i in range(50):
        obj = {"apiVersion": f"g{i}.example.com/v{i}", "kind": f"Kind{i}", "metadata": {"name": "x", "namespace": "ml"}}
        app.answer(review_of(obj, uid=f"random-{i}"))
    for name in SAMPLE_NAMES:
        app.answer(sample(name))
    text = app.client.get("/metrics").get_data(as_text=True)
    # (HyperJob, JobSet, TrainJob: policy_failures starts at 0 for every kind with a policy.)
    assert set(re.findall(r'kind="([^"]*)"', text)) == {"other", "Deployment", "Job", "TFJob", "PyTorchJob", "MPIJob",
                                                       "JobSet", "TrainJob", "HyperJob", "Pod", "StatefulSet",
                                                       "LeaderWorkerSet"}
    assert app.metric('policylib_webhook_reviews_total{kind="other",operation="CREATE",outcome="unchanged"}') == 50
    assert app.metric('policylib_webhook_review_duration_seconds_count{kind="other",operation="CREATE"}') == 50


def test_a_policy_failure_on_an_unhandled_kind_is_counted_as_other(monkeypatch, app):
    def broken(*args, **kwargs):
        raise KeyError("spec")
    monkeypatch.setattr(policylib, "mutate", broken)
    app.answer(review_of({"apiVersion": "example.com/v1", "kind": "Kind-" + "x" * 300, "metadata": {"name": "a"}}))
    assert app.metric('policylib_webhook_policy_failures_total{kind="other",mode="open"}') == 1
    assert app.metric('policylib_webhook_reviews_total{kind="other",operation="CREATE",outcome="fail_open"}') == 1


# --- a body that cannot be read ---------------------------------------------------------

class FailingInput(io.BytesIO):
    """A ``wsgi.input`` whose read raises, as gunicorn's does for a slow client or a broken chunk."""

    def __init__(self, error: Exception):
        super().__init__()
        self.error = error

    def read(self, size=-1):
        raise self.error


@pytest.mark.parametrize("error, status, message", [
    (TimeoutError("client did not send its request within 2 s"), 408, "the request body did not arrive in time"),
    (OSError("connection reset"), 400, "the request body could not be read: OSError"),
    (ValueError("Invalid chunk size"), 400, "the request body could not be read: ValueError"),
])
def test_a_body_that_cannot_be_read_is_408_or_400_not_500(app, error, status, message):
    response = app.client.post("/mutate", input_stream=FailingInput(error), content_type="application/json",
                               headers={"Content-Length": "100"})
    assert error_of(response, status) == message
    assert app.metric(f'policylib_webhook_bad_requests_total{{code="{status}"}}') == 1


# --- an answer that cannot be encoded is a policy failure, never a 500 ---------------------------------

def _deep_constraint_review():
    nested: object = 1
    for _ in range(300):   # past orjson's nesting limit, inside a constraint the policy keeps
        nested = [nested]
    d = deployment(replicas=3)
    d["spec"]["template"]["spec"]["topologySpreadConstraints"] = [
        {"maxSkew": 1, "topologyKey": "example.com/rack", "whenUnsatisfiable": "ScheduleAnyway", "x": nested}]
    return review_of(d)


@pytest.mark.parametrize("mode,allowed", [("open", True), ("closed", False)])
def test_an_answer_json_cannot_carry_follows_the_failure_mode(mode, allowed):
    client = webhook.create_app({"webhook": {"failureMode": mode}}).test_client()
    resp = client.post("/mutate", data=json.dumps(_deep_constraint_review()), content_type="application/json")
    assert resp.status_code == 200
    answer = resp.get_json()["response"]
    assert answer["allowed"] is allowed and "patch" not in answer
    message = "the answer could not be encoded as JSON (TypeError: Recursion limit reached)"
    if allowed:
        assert answer["warnings"] == [f"policylib not applied: {message}"]
    else:
        assert answer["status"] == {"code": 400, "message": f"policylib: {message}"}
    metrics = client.get("/metrics").get_data(as_text=True)
    assert "policylib_webhook_bad_requests_total{" not in metrics   # counted as a policy failure, not refused
    assert f'policylib_webhook_policy_failures_total{{kind="Deployment",mode="{mode}"}} 1.0' in metrics


@pytest.mark.parametrize("depth,status", [(200, 200), (2000, 400), (100_000, 400)])
def test_any_depth_is_answered_never_a_500(depth, status):
    """Nesting past the JSON parser's limit is a bad request (400); below it the review is answered."""
    client = webhook.create_app(None).test_client()
    review = review_of(deployment(replicas=3))
    body = json.dumps(review).replace('"image": "registry.example/app:1"',
                                      '"image": "registry.example/app:1", "x": ' + "[" * depth + "]" * depth)
    assert '"x": [' in body
    resp = client.post("/mutate", data=body, content_type="application/json")
    assert resp.status_code == status
    if status == 400:
        assert resp.get_json()["code"] == 400 and resp.get_json()["error"].startswith("body is not valid JSON")
    else:
        assert resp.get_json()["response"]["allowed"] is True


def test_a_failure_inside_the_webhook_is_a_500_counted_apart_from_refused_requests(monkeypatch, caplog):
    """No input should get here (the fuzz tests say so); if a bug does, the client gets a JSON 500, the
    log the traceback, and the metrics a server error, not a refused request."""
    app = App()

    def broken(*args, **kwargs):
        raise KeyError("bug")

    monkeypatch.setattr(rv, "decide", broken)
    with caplog.at_level("ERROR", logger="webhook.admission.mutate"):
        resp = app.client.post("/mutate", data=json.dumps(review_of(deployment(replicas=3))),
                               content_type="application/json")
    assert (resp.status_code, resp.get_json()) == (500, {"error": "internal error", "code": 500})
    assert app.metric('policylib_webhook_server_errors_total{path="/mutate"}') == 1
    assert app.metric("policylib_webhook_bad_requests_total") == 0
    assert [r.exc_info[0] for r in caplog.records] == [KeyError]
