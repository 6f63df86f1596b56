"""webhook.admission's facts: the watch-backed HPA cache with the real ``kubernetes`` client against a fake API."""
from __future__ import annotations

import http.client
import json
import select
import socket
import threading
import time
from pathlib import Path

import httptools
import pytest
from kubernetes import config as kube_config

import policylib
import webhook
from tests.fakeapi import FakeAPI, kubeconfig_for, paged_list
from tests.helpers import deployment, hpa
from tests.webhook_support import review_of
from webhook.admission.confirm import ConfirmedHpas, decide_overlapped
from webhook.admission.facts import ObjectOnlyFacts, facts_source
from webhook.admission.hpacache import HpaCache, HpaIndex, slim_hpa
from webhook.admission.hparead import CONFIRM_LIMIT
from webhook.admission.rawhttp import KeptConnection, request_bytes

HPA_PATH = "/apis/autoscaling/v2/horizontalpodautoscalers"


def with_rv(obj: dict, rv: str) -> dict:
    return {**obj, "metadata": {**obj["metadata"], "resourceVersion": rv}}


class WatchScript:
    """An API server's HPAs: lists show the current ``items``; the first watch streams
    ``events`` (and applies them to ``items``), the second answers 410 Gone, later
    ones stay open until the test ends."""

    def __init__(self, items: list[dict], events: list[tuple[str, dict]], page: int = 500):
        self.items = list(items)
        self.page = page
        self.events = events
        self.watches = 0
        self.done = threading.Event()

    def apply(self, kind: str, obj: dict) -> None:
        key = (obj["metadata"].get("namespace"), obj["metadata"].get("name"))
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            self.items = [i for i in self.items if (i["metadata"]["namespace"], i["metadata"]["name"]) != key]
        if kind in ("ADDED", "MODIFIED"):
            self.items.append(obj)

    def __call__(self, req: dict) -> tuple:
        if req["query"].get("watch") != "true":
            return paged_list("HorizontalPodAutoscaler", self.items, self.page)(req)
        self.watches += 1
        if self.watches == 1:
            for kind, obj in self.events:
                self.apply(kind, obj)
            lines = b"".join(json.dumps({"type": t, "object": o}).encode() + b"\n" for t, o in self.events)
        elif self.watches == 2:
            lines = json.dumps({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "code": 410,
                                                            "reason": "Expired", "message": "too old"}}).encode() + b"\n"
        else:
            self.done.wait(10)
            lines = b""
        return 200, lines


def wait_for(predicate, timeout: float = 10.0):
    """Poll ``predicate`` until true (a readiness poll, not a fixed sleep)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


@pytest.fixture
def api():
    with FakeAPI() as fake:
        yield fake


def cache_for(api, tmp_path) -> HpaCache:
    source = facts_source("auto", kubeconfig=api.kubeconfig(tmp_path / "kubeconfig"))
    assert isinstance(source, HpaCache)
    return source


def test_lists_pages_then_applies_watch_events(api, tmp_path):
    items = [with_rv(hpa("web", 4, "ml"), "1"), with_rv(hpa("api", 2, "ml"), "2"), with_rv(hpa("db", 1, "ops"), "3")]
    updated = with_rv(hpa("web", 6, "ml"), "101")
    script = WatchScript(items, [("MODIFIED", updated), ("DELETED", with_rv(hpa("api", 2, "ml"), "102")),
                                 ("ADDED", with_rv(hpa("new", 3, "ml", name="new-hpa"), "103")),
                                 ("BOOKMARK", {"kind": "HorizontalPodAutoscaler",
                                               "metadata": {"resourceVersion": "104"}})], page=2)
    api.route("GET", HPA_PATH, script)
    cache = cache_for(api, tmp_path)
    assert cache.ready is False
    cache.start()
    try:
        # ready also waits for the Workload API discovery, a second thread (rule G22)
        wait_for(lambda: script.watches >= 3 and cache.hpas_for("ml", "new") and cache.ready)
        assert cache.hpas_for("ml", "web") == [slim_hpa(updated)]
        assert cache.hpas_for("ml", "api") == []
        assert [h["metadata"]["name"] for h in cache.hpas_for("ml", "new")] == ["new-hpa"]
        assert cache.hpas_for("ops", "db")[0]["spec"]["minReplicas"] == 1
        lists = [r for r in api.requests if r["query"].get("watch") != "true" and r["path"] == HPA_PATH]
        watches = [r for r in api.requests if r["query"].get("watch") == "true"]
        assert [r["query"].get("continue") for r in lists[:2]] == [None, "2"]
        assert watches[0]["query"]["resourceVersion"] == "100"
        assert watches[0]["query"]["allowWatchBookmarks"] == "true"
        assert watches[1]["query"]["resourceVersion"] == "104"
        assert len(lists) >= 3  # the 410 Gone started over from a fresh list
        wait_for(lambda: cache.discovery.read_at is not None)
        # this fake serves no scheduling.k8s.io group and no /version: no Workload API (rule G22)
        assert cache.status() == {"facts": "watch", "source": cache.source, "synced": True,
                                  "horizontalPodAutoscalers": 3, "lastError": None,
                                  "workloadApi": {"served": [], "minor": None, "lastError": None},
                                  # nor trainer.kubeflow.org: no runtime is watched (rule T6)
                                  "trainerRuntimes": {"served": [], "watched": [], "synced": True,
                                                      "trainingRuntimes": 0, "clusterTrainingRuntimes": 0,
                                                      "lastError": None}}
    finally:
        cache.stop()
        script.done.set()


def test_reviews_read_the_cache_without_an_api_call(api, tmp_path):
    script = WatchScript([with_rv(hpa("web", 5, "ml"), "1")], [])
    api.route("GET", HPA_PATH, script)
    cache = cache_for(api, tmp_path).start()
    try:
        wait_for(lambda: cache.ready)
        app = webhook.create_app(None, facts=cache, review_log=lambda line: None).test_client()
        before = len(api.requests)
        response = app.post("/mutate", json=review_of(deployment("web", "ml", replicas=1)))
        assert len(api.requests) == before
        reasons = response.get_json()["response"]["auditAnnotations"]["reasons"]
        assert reasons.startswith("effective replicas 5 (HorizontalPodAutoscaler web minReplicas 5)")
        ready = app.get("/readyz").get_json()
        assert (ready["ready"], ready["facts"], ready["synced"]) == (True, "watch", True)
    finally:
        cache.stop()
        script.done.set()


def test_forbidden_list_keeps_the_webhook_unready_and_says_why(api, tmp_path):
    api.route("GET", HPA_PATH, (403, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403,
                                      "reason": "Forbidden", "message": "horizontalpodautoscalers is forbidden"}))
    cache = cache_for(api, tmp_path).start()
    try:
        wait_for(lambda: cache.last_error is not None)
        response = webhook.create_app(None, facts=cache).test_client().get("/readyz")
        assert response.status_code == 503
        body = response.get_json()
        assert (body["ready"], body["facts"], body["synced"]) == (False, "watch", False)
        assert body["lastError"] == "Forbidden: HTTP 403 Forbidden: horizontalpodautoscalers is forbidden"
    finally:
        cache.stop()


def test_index_moves_an_hpa_that_changes_target():
    index = HpaIndex()
    index.put(hpa("web", 3, "ml", name="h"))
    index.put(hpa("api", 4, "ml", name="h"))
    assert index.hpas_for("ml", "web") == [] and len(index.hpas_for("ml", "api")) == 1
    index.remove(hpa("api", 4, "ml", name="h"))
    assert index.hpas_for("ml", "api") == [] and len(index) == 0


def test_index_keeps_what_policylib_reads_and_agrees_with_cluster_facts():
    objs = [hpa("web", 3, "ml", name="a"), hpa("web", 7, "ml", name="b"), hpa("web", 2, "other")]
    objs[0]["status"] = {"currentReplicas": 9}
    index = HpaIndex()
    index.replace(objs)
    facts = policylib.ClusterFacts.from_objects(objs)
    for key in [("ml", "web"), ("other", "web"), ("ml", "nope")]:
        assert [h["spec"] for h in index.hpas_for(*key)] == [h["spec"] for h in facts.hpas_for(*key)]
    assert "status" not in index.hpas_for("ml", "web")[0]


def test_without_cluster_access_auto_is_object_only(monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    source = facts_source("auto")
    assert isinstance(source, ObjectOnlyFacts)
    assert source.status() == {"facts": "object-only",
                               "reason": "no cluster access: not running in a pod and no --kubeconfig"}
    assert source.nodes == [] and source.hpas_for("ml", "web") == []


def test_none_is_object_only_even_in_a_pod(monkeypatch):
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    assert facts_source("none").status() == {"facts": "object-only", "reason": "disabled (--facts none)"}


def test_in_a_pod_without_a_token_auto_falls_back_and_watch_fails(monkeypatch):
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    source = facts_source("auto")
    assert isinstance(source, ObjectOnlyFacts) and source.reason.startswith("no cluster access: ")
    with pytest.raises(kube_config.ConfigException):
        facts_source("watch")


def test_an_event_older_than_the_cached_hpa_is_ignored(api, tmp_path):
    """One list-watch: the cache is the controller's Reflector and Store, stale-event guard included."""
    class LateEvent(WatchScript):
        def apply(self, kind, obj):  # the server's state never goes back: the late event is no change of it
            if obj["metadata"]["resourceVersion"] != "11":
                super().apply(kind, obj)

        def __call__(self, req):
            if req["query"].get("watch") == "true" and self.watches == 1:
                self.watches = 2  # no 410 and relist here: the next watch stays open, the store is as the events left it
            return super().__call__(req)

    script = LateEvent([with_rv(hpa("web", 4, "ml"), "10")],
                       [("MODIFIED", with_rv(hpa("web", 6, "ml"), "12")),
                        ("MODIFIED", with_rv(hpa("web", 2, "ml"), "11")),   # delivered late: older than held
                        ("ADDED", with_rv(hpa("other", 1, "ml", name="o"), "13"))])
    api.route("GET", HPA_PATH, script)
    cache = cache_for(api, tmp_path).start()
    try:
        wait_for(lambda: cache.hpas_for("ml", "other"))
        assert [h["spec"]["minReplicas"] for h in cache.hpas_for("ml", "web")] == [6]
    finally:
        cache.stop()
        script.done.set()


NAMESPACED_HPA_PATH = "/apis/autoscaling/v2/namespaces/ml/horizontalpodautoscalers"


def confirming_reads(app) -> dict[str, float]:
    """The confirming-read counter's values by result, from ``/metrics``."""
    text = app.get("/metrics").get_data(as_text=True)
    return {line.split('result="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line.startswith("policylib_webhook_hpa_confirming_reads_total{")}


@pytest.fixture
def synced_empty_cache(api, tmp_path):
    """A cache whose watch has no HPA (it has not delivered the one the namespace list shows)."""
    script = WatchScript([], [])
    api.route("GET", HPA_PATH, script)
    cache = cache_for(api, tmp_path).start()
    wait_for(lambda: cache.ready)
    yield cache
    cache.stop()
    script.done.set()


def test_create_reads_the_namespace_when_the_watch_has_no_hpa_yet(api, synced_empty_cache):
    """Rule W4: the HPA applied just before its Deployment, not yet in the watch: the Deployment is
    still stored for the HPA's minimum, whatever the watch's timing."""
    api.route("GET", NAMESPACED_HPA_PATH, paged_list("HorizontalPodAutoscaler",
                                                     [hpa("web", 6, "ml"), hpa("other", 9, "ml")], 500))
    app = webhook.create_app(None, facts=synced_empty_cache, review_log=lambda line: None).test_client()
    response = app.post("/mutate", json=review_of(deployment("web", "ml", replicas=3)))
    reasons = response.get_json()["response"]["auditAnnotations"]["reasons"]
    assert reasons.startswith("effective replicas 6 (HorizontalPodAutoscaler web minReplicas 6)")
    reads = [r for r in api.requests if r["path"] == NAMESPACED_HPA_PATH]
    assert [r["query"].get("resourceVersion") for r in reads] == [None]   # a consistent read, not the cache's
    assert confirming_reads(app) == {"found": 1.0, "none": 0.0, "error": 0.0}


def test_a_statefulset_create_reads_the_namespace_for_the_hpa_that_scales_it(api, synced_empty_cache):
    """Rules W4, A2: as for a Deployment, an HPA of the StatefulSet not yet in the watch is read; an HPA of a
    Deployment of the same name does not count."""
    of_sts = hpa("db", 5, "ml")
    of_sts["spec"]["scaleTargetRef"]["kind"] = "StatefulSet"
    api.route("GET", NAMESPACED_HPA_PATH, paged_list("HorizontalPodAutoscaler", [hpa("db", 9, "ml"), of_sts], 500))
    app = webhook.create_app(None, facts=synced_empty_cache, review_log=lambda line: None).test_client()
    sts = deployment("db", "ml", replicas=3) | {"kind": "StatefulSet"}
    reasons = app.post("/mutate", json=review_of(sts)).get_json()["response"]["auditAnnotations"]["reasons"]
    assert reasons.startswith("effective replicas 5 (HorizontalPodAutoscaler db minReplicas 5)")
    assert len([r for r in api.requests if r["path"] == NAMESPACED_HPA_PATH]) == 1
    assert confirming_reads(app) == {"found": 1.0, "none": 0.0, "error": 0.0}


def test_a_leaderworkerset_create_reads_the_namespace_for_the_hpa_that_scales_it(api, synced_empty_cache):
    """Rules W4, E2: an HPA of the LeaderWorkerSet not yet in the watch is read, and counts its groups; an HPA of a
    Deployment of the same name does not count."""
    from tests.test_lws import lws, lws_hpa
    api.route("GET", NAMESPACED_HPA_PATH, paged_list("HorizontalPodAutoscaler",
                                                     [hpa("vllm", 9, "ml"), lws_hpa("vllm", 5, "ml")], 500))
    app = webhook.create_app(None, facts=synced_empty_cache, review_log=lambda line: None).test_client()
    reasons = app.post("/mutate", json=review_of(lws(namespace="ml"))).get_json()["response"]["auditAnnotations"]
    assert reasons["reasons"].startswith("effective replicas 5 (HorizontalPodAutoscaler vllm minReplicas 5)")
    assert len([r for r in api.requests if r["path"] == NAMESPACED_HPA_PATH]) == 1
    assert confirming_reads(app) == {"found": 1.0, "none": 0.0, "error": 0.0}


def test_create_without_any_hpa_reads_once_and_update_never(api, synced_empty_cache):
    api.route("GET", NAMESPACED_HPA_PATH, paged_list("HorizontalPodAutoscaler", [hpa("other", 9, "ml")], 500))
    app = webhook.create_app(None, facts=synced_empty_cache, review_log=lambda line: None).test_client()
    d = deployment("web", "ml", replicas=3)
    created = app.post("/mutate", json=review_of(d)).get_json()["response"]
    assert created["auditAnnotations"]["reasons"].startswith("effective replicas 3 (spec.replicas 3)")
    app.post("/mutate", json=review_of(d, operation="UPDATE", old=d))
    assert len([r for r in api.requests if r["path"] == NAMESPACED_HPA_PATH]) == 1
    assert confirming_reads(app) == {"found": 0.0, "none": 1.0, "error": 0.0}


def test_a_failed_read_falls_back_to_the_cache_and_is_counted(api, synced_empty_cache, caplog):
    api.route("GET", NAMESPACED_HPA_PATH, (500, {"kind": "Status", "apiVersion": "v1", "code": 500,
                                                 "reason": "InternalError", "message": "etcd unavailable"}))
    app = webhook.create_app(None, facts=synced_empty_cache, review_log=lambda line: None).test_client()
    response = app.post("/mutate", json=review_of(deployment("web", "ml", replicas=3))).get_json()["response"]
    assert response["allowed"] is True
    assert response["auditAnnotations"]["reasons"].startswith("effective replicas 3 (spec.replicas 3)")
    assert confirming_reads(app) == {"found": 0.0, "none": 0.0, "error": 1.0}
    [record] = [r for r in caplog.records if r.name == "webhook.admission.confirm"]
    assert (record.getMessage(), record.namespace, record.deployment, record.error) == (
        "HPA read failed, using the watch cache", "ml", "web", "HTTP 500 InternalError: etcd unavailable")


def test_read_hpas_on_create_false_reads_the_watch_only(api, synced_empty_cache):
    api.route("GET", NAMESPACED_HPA_PATH, paged_list("HorizontalPodAutoscaler", [hpa("web", 6, "ml")], 500))
    config = {"webhook": {"readHpasOnCreate": False}}
    app = webhook.create_app(config, facts=synced_empty_cache, review_log=lambda line: None).test_client()
    response = app.post("/mutate", json=review_of(deployment("web", "ml", replicas=3))).get_json()["response"]
    assert response["auditAnnotations"]["reasons"].startswith("effective replicas 3 (spec.replicas 3)")
    assert [r for r in api.requests if r["path"] == NAMESPACED_HPA_PATH] == []
    assert confirming_reads(app) == {"found": 0.0, "none": 0.0, "error": 0.0}


def test_the_read_is_one_request_and_past_its_page_the_watch_answers(api, synced_empty_cache):
    """More HPAs in the namespace than one page holds: one request only (its timeout bounds the review);
    the HPA on the first page is found, one past it is left to the watch (counted as an error)."""
    many = [hpa(f"d{i}", 2, "ml") for i in range(600)]
    api.route("GET", NAMESPACED_HPA_PATH, paged_list("HorizontalPodAutoscaler", many, 500))
    app = webhook.create_app(None, facts=synced_empty_cache, review_log=lambda line: None).test_client()
    first = app.post("/mutate", json=review_of(deployment("d7", "ml", replicas=1))).get_json()["response"]
    assert first["auditAnnotations"]["reasons"].startswith("effective replicas 2 (HorizontalPodAutoscaler d7")
    past = app.post("/mutate", json=review_of(deployment("d550", "ml", replicas=1))).get_json()["response"]
    assert past["auditAnnotations"]["reasons"].startswith("effective replicas 1 (spec.replicas 1)")
    reads = [r for r in api.requests if r["path"] == NAMESPACED_HPA_PATH]
    assert [(r["query"]["limit"], r["query"].get("continue")) for r in reads] == [("500", None), ("500", None)]
    assert confirming_reads(app) == {"found": 1.0, "none": 0.0, "error": 1.0}


def test_the_read_is_sent_before_the_policy_and_its_answer_waited_for_after(api, synced_empty_cache):
    """Rule W4's overlap, with no thread or greenlet: the read's request reaches the API server before the
    policy runs, the API server answers while it works, and the answer decides (here: an HPA the watch has
    not delivered yet, so the policy decides again with it)."""
    steps: list[str] = []
    received, decided = threading.Event(), threading.Event()
    listing = paged_list("HorizontalPodAutoscaler", [hpa("web", 6, "ml")], 500)

    def answer_after_the_policy(req):
        steps.append("request received")
        received.set()
        assert decided.wait(10), "the policy did not run while the read was outstanding"
        return listing(req)

    api.route("GET", NAMESPACED_HPA_PATH, answer_after_the_policy)
    facts = ConfirmedHpas(synced_empty_cache, lambda result: steps.append(f"counted {result}"))

    def decide(f):
        if f is synced_empty_cache:      # the first decision, with the watch's facts only
            assert received.wait(10), "the read's request was not sent before the policy ran"
            steps.append("policy")
            decided.set()
        return [h["spec"]["minReplicas"] for h in f.hpas_for("ml", "web")]

    obj = deployment("web", "ml", replicas=3)
    assert decide_overlapped(decide, facts, "ml", obj) == [6]
    assert steps == ["request received", "policy", "counted found"]
    assert len([r for r in api.requests if r["path"] == NAMESPACED_HPA_PATH]) == 1   # collected once


def test_a_read_that_cannot_be_sent_falls_back_to_the_cache_and_is_counted(tmp_path, caplog):
    """Nothing listens where the API server is (a port held, never listening: connections are refused): the
    send fails, the review goes on with the watch's answer."""
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    try:
        cache = facts_source("auto", kubeconfig=kubeconfig_for(f"http://127.0.0.1:{held.getsockname()[1]}",
                                                               tmp_path / "kubeconfig"))
        results: list[str] = []
        facts = ConfirmedHpas(cache, results.append)
        assert decide_overlapped(lambda f: f.hpas_for("ml", "web"), facts, "ml", deployment("web", "ml")) == []
    finally:
        held.close()
    assert results == ["error"]
    assert [r.getMessage() for r in caplog.records if r.name == "webhook.admission.confirm"] == [
        "HPA read failed, using the watch cache"]


def answered(*pieces: bytes) -> KeptConnection:
    """A connection whose server writes ``pieces`` one by one, then closes."""
    ours, server = socket.socketpair()

    def serve():
        with server:
            for piece in pieces:
                server.sendall(piece)
    threading.Thread(target=serve, daemon=True).start()
    ours.settimeout(10)
    return KeptConnection(ours)


@pytest.mark.parametrize("pieces, expected", [
    ([b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"], (200, b"{}", True)),
    ([b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n{\r\n", b"1\r\n}\r\n0\r\n\r\n"],
     (200, b"{}", True)),
    ([b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"], (200, b"{}", True)),
    ([b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"a\":", b"1}"], (200, b'{"a":1}', False)),
    ([b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"], (404, b"{}", False)),
], ids=["length", "chunked", "interim-100-skipped", "ended-by-close", "connection-close"])
def test_an_answer_is_read_whole_whatever_delimits_it(pieces, expected):
    assert answered(*pieces).answer() == expected


@pytest.mark.parametrize("pieces, error", [
    ([], http.client.RemoteDisconnected),
    ([b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}"], http.client.IncompleteRead),
    ([b"SPDY/9 hello\r\n\r\n"], httptools.HttpParserError),
], ids=["closed-before-answering", "closed-mid-body", "not-http"])
def test_an_answer_cut_short_or_malformed_raises(pieces, error):
    with pytest.raises(error):
        answered(*pieces).answer()


@pytest.mark.parametrize("key, value", [("Authorization", "Bearer x\r\nX-Evil: 1"), ("X\nY", "v"),
                                        ("Authorization", "Bearer \0")])
def test_a_header_that_could_end_its_line_is_refused(key, value):
    with pytest.raises(ValueError, match="line break or NUL"):
        request_bytes("api:6443", "/apis", {key: value})


def test_the_request_is_one_get_with_host_and_headers():
    assert request_bytes("[::1]:6443", "/apis/x?limit=500", {"Accept": "application/json"}) == (
        b"GET /apis/x?limit=500 HTTP/1.1\r\nHost: [::1]:6443\r\nAccept: application/json\r\n\r\n")


def test_a_read_answered_with_items_that_are_not_a_list_of_objects_falls_back_and_never_fails_the_review(
        api, synced_empty_cache):
    api.route("GET", NAMESPACED_HPA_PATH, (200, {"kind": "HorizontalPodAutoscalerList", "items": ["not", "objects"]}))
    app = webhook.create_app(None, facts=synced_empty_cache, review_log=lambda line: None).test_client()
    answer = app.post("/mutate", json=review_of(deployment("web", "ml", replicas=3)))
    assert answer.status_code == 200
    response = answer.get_json()["response"]
    assert response["allowed"] is True
    assert response["auditAnnotations"]["reasons"].startswith("effective replicas 3 (spec.replicas 3)")
    assert confirming_reads(app) == {"found": 0.0, "none": 0.0, "error": 1.0}


class OneAnswerPerConnection:
    """An HTTP/1.1 server that answers one request per connection with a kept-alive answer, then closes the
    connection, as the API server closes one that sat idle: a client reusing it finds it gone."""

    def __init__(self, page: dict):
        self.body = json.dumps(page).encode()
        self.connections = 0
        self.request_lines: list[bytes] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                request = b""
                while b"\r\n\r\n" not in request:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    request += chunk
                if request:
                    self.request_lines.append(request.split(b"\r\n", 1)[0])
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                                 + str(len(self.body)).encode() + b"\r\n\r\n" + self.body)

    def kubeconfig(self, path) -> str:
        return kubeconfig_for(self.url, path)


def test_a_kept_alive_connection_the_server_closed_is_read_again_on_a_new_one(tmp_path):
    page = {"kind": "HorizontalPodAutoscalerList", "metadata": {}, "items": [hpa("web", 4, "ml")]}
    server = OneAnswerPerConnection(page)
    try:
        cache = facts_source("auto", kubeconfig=server.kubeconfig(tmp_path / "kubeconfig"))
        assert cache.read("ml") == page and server.connections == 1
        assert len(cache.read.connections.idle) == 1                 # kept for the next read
        wait_for(lambda: _closed_by_peer(cache.read.connections.idle[0].sock))
        assert cache.read("ml") == page                   # the kept one was gone: asked again, once, on a new one
        assert server.connections == 2
    finally:
        server.listener.close()


def _closed_by_peer(sock) -> bool:
    """Whether the peer has closed ``sock`` (readable, and a peek finds no byte)."""
    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""


def test_through_a_proxy_the_read_asks_the_proxy_for_the_same_page(tmp_path):
    """A kubeconfig's ``proxy-url``: the read goes through the API client's pool, as an absolute URL to the proxy,
    for the same path and page size as the direct read."""
    page = {"kind": "HorizontalPodAutoscalerList", "metadata": {}, "items": [hpa("web", 4, "ml")]}
    proxy = OneAnswerPerConnection(page)
    try:
        path = tmp_path / "kubeconfig"
        config = json.loads(Path(kubeconfig_for("http://api.invalid:6443", path)).read_text())
        config["clusters"][0]["cluster"]["proxy-url"] = proxy.url
        path.write_text(json.dumps(config))
        cache = facts_source("auto", kubeconfig=str(path))
        assert cache.read.proxied
        assert cache.read("ml") == page
        assert proxy.request_lines == [
            f"GET http://api.invalid:6443/apis/autoscaling/v2/namespaces/ml/horizontalpodautoscalers"
            f"?limit={CONFIRM_LIMIT} HTTP/1.1".encode()]
    finally:
        proxy.listener.close()


# --- the Workload API the cluster serves (rules G22, G23) ---------------------------------------------------

def test_the_discovery_reads_the_served_versions_and_follows_a_change(api, tmp_path):
    """What an upgrade does to discovery: 1.36 serves v1alpha2; 1.37 without the API serves none; a failed read
    keeps what was known; each change is reported once."""
    from policylib.shell.kube import Api, api_client
    from tests.fakeapi import serve_workload_api
    from webhook.discovery import WorkloadApiDiscovery
    serve_workload_api(api, 36)
    seen = []
    d = WorkloadApiDiscovery(Api(api_client(kubeconfig=api.kubeconfig(tmp_path / "kubeconfig"))), seen.append)
    assert (d.read().served, d.known.minor, d.known.version) == (("v1alpha2",), 36, "v1alpha2")
    d.read()
    serve_workload_api(api, 37, enabled=False)
    assert (d.read().served, d.known.minor, d.known.version) == ((), 37, None)
    api.route("GET", "/apis/scheduling.k8s.io", (500, {"kind": "Status", "code": 500, "message": "etcd is down"}))
    assert d.read().served == () and d.last_error == "ApiError: HTTP 500: etcd is down"
    assert [(s.served, s.minor) for s in seen] == [(("v1alpha2",), 36), ((), 37)]


@pytest.mark.parametrize("enabled, allowed", [(False, False), (True, True)])
def test_the_gang_pods_entry_refuses_a_pod_only_where_the_api_is_not_served(api, tmp_path, enabled, allowed):
    """Rule G23 through the webhook's own facts: its discovery thread read 1.37's API server."""
    from tests.fakeapi import serve_workload_api
    api.route("GET", HPA_PATH, WatchScript([], []))
    serve_workload_api(api, 37, enabled=enabled)
    cache = cache_for(api, tmp_path).start()
    try:
        wait_for(lambda: cache.ready and cache.discovery.read_at is not None)
        config = {"gang": {"method": "workload", "scheduler": "kube-scheduler"}}
        app = webhook.create_app(config, facts=cache, review_log=lambda line: None).test_client()
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml",
                                                               "labels": {"policylib.io/scheduling-group": "train"}},
               "spec": {"containers": [{"name": "c", "image": "x"}]}}
        response = app.post("/mutate", json=review_of(pod)).get_json()["response"]
    finally:
        cache.stop()
    assert response["allowed"] is allowed
    if not allowed:
        assert "the API server does not serve scheduling.k8s.io/v1beta1" in response["status"]["message"]
        assert "--runtime-config=scheduling.k8s.io/v1beta1=true" in response["status"]["message"]
    else:
        assert "patch" in response
