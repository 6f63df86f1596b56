"""The controller's pod deletion costs (rules S23 to S28) against recorded API responses: which pods it
writes and how, what it leaves alone, and the Events and gauge of a violation."""
from __future__ import annotations

import copy
import datetime as dt
from types import SimpleNamespace
from typing import Any

import pytest

from policylib import load_config
from policylib.scaledown import DELETION_COST, FIELD_MANAGER
from policylib.shell import kube
from tests.fakeapi import FakeAPI, paged_list
from tests.test_scaledown import NODES, deployment, node, pod, twelve, zone_constraint
from webhook.controller import ControllerMetrics, EventRecorder, Worker
from webhook.controller.podcost import PodCosts
from webhook.informer import Reflector, Store

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.timezone.utc)


def managed() -> dict[str, Any]:
    d = deployment([zone_constraint()])
    d["metadata"].update(annotations={"policylib.io/spread-effective-replicas": "12"}, uid="d-1", resourceVersion="3")
    return d


def costs_for(api: kube.Api, deployments: list[dict[str, Any]], leading: bool = True,
              controller: SimpleNamespace | None = None) -> PodCosts:
    """Pod costs on the controller's parts they take: its Deployment store, its scope (everything here), whether
    its stores have listed and it leads (``controller.ready``/``.leading``, changed by a test), its metrics and
    Event recorder, and reflectors as ``Controller.informer`` makes them."""
    controller = controller or SimpleNamespace(ready=True, leading=leading)
    store = Store()
    for d in deployments:
        store.apply("ADDED", d)
    metrics = ControllerMetrics()
    return PodCosts(api, load_config(None), deployments=store,
                    informer=lambda res, handler, store: Reflector(api, res, store, handler, metrics),
                    in_scope=lambda obj: True, ready=lambda: controller.ready, leading=lambda: controller.leading,
                    dry_run=False,
                    metrics=metrics, recorder=EventRecorder(api, "me", metrics, lambda: NOW))


def worker(costs: PodCosts) -> Worker:
    return Worker(costs, costs.recorder.metrics, resync_seconds=60, error_stage="podcost")


def sync(costs: PodCosts) -> None:
    """List both resources, queue every Deployment with pods (as the run loop's resync), work the queue off."""
    for r in costs.reflectors:
        r.list()
    costs.resync()
    while worker(costs).process_next(timeout=0):
        pass


class Pods:
    """A pod list and the PATCHes the server applies (a merge patch of the cost, guarded by resourceVersion)."""

    def __init__(self, api: FakeAPI, pods: list[dict[str, Any]]):
        self.pods = {p["metadata"]["name"]: copy.deepcopy(p) for p in pods}
        api.route("GET", "/api/v1/pods", lambda req: paged_list("Pod", list(self.pods.values()), 500)(req))
        api.route("GET", "/api/v1/nodes", paged_list("Node", NODES, 500))
        api.route("POST", "/apis/events.k8s.io/v1/namespaces/default/events", lambda req: (201, req["body"]))
        for name in self.pods:
            api.route("PATCH", f"/api/v1/namespaces/default/pods/{name}", lambda req, n=name: self.patch(n, req))

    def patch(self, name: str, req: dict[str, Any]) -> tuple[int, Any]:
        current = self.pods[name]
        meta = req["body"]["metadata"]
        if meta["resourceVersion"] != current["metadata"]["resourceVersion"]:
            return 409, {"kind": "Status", "code": 409, "reason": "Conflict"}
        current["metadata"].setdefault("annotations", {}).update(meta["annotations"])
        current["metadata"]["managedFields"] = [{"manager": req["query"]["fieldManager"], "fieldsV1": {
            "f:metadata": {"f:annotations": {f"f:{DELETION_COST}": {}}}}}]
        current["metadata"]["resourceVersion"] = str(int(current["metadata"]["resourceVersion"]) + 1)
        return 200, current


def costs_of(api: FakeAPI, tmp_path, pods: list[dict[str, Any]], deployments: list[dict[str, Any]],
             leading: bool = True, controller: SimpleNamespace | None = None) -> tuple[PodCosts, Pods]:
    served = Pods(api, pods)
    client = kube.Api(kube.api_client(kubeconfig=api.kubeconfig(tmp_path / "kubeconfig")))
    costs = costs_for(client, deployments, leading, controller)
    sync(costs)
    return costs, served


def patches(api: FakeAPI) -> list[dict[str, Any]]:
    return [r for r in api.requests if r["method"] == "PATCH"]


def test_every_bound_pod_is_written_once_by_merge_patch_with_our_field_manager_then_nothing(tmp_path):
    with FakeAPI() as api:
        costs, served = costs_of(api, tmp_path, twelve(), [managed()])
        sent = patches(api)
        assert len(sent) == 12
        assert {r["query"]["fieldManager"] for r in sent} == {FIELD_MANAGER}
        assert {r["headers"]["content-type"] for r in sent} == {"application/merge-patch+json"}
        assert all(set(r["body"]["metadata"]) == {"annotations", "resourceVersion", "uid"} for r in sent)
        assert sorted(int(p["metadata"]["annotations"][DELETION_COST]) for p in served.pods.values()) == \
            [-3, -3, -3, -2, -2, -2, -1, -1, -1, 0, 0, 0]
        # the list and the list selector: only the pods of Deployments
        lists = [r for r in api.requests if r["method"] == "GET" and r["path"] == "/api/v1/pods"]
        assert lists and lists[0]["query"]["labelSelector"] == "pod-template-hash"
        # steady state: the next pass over the same pods (as the watch now holds them) writes nothing
        api.requests.clear()
        sync(costs)
        assert patches(api) == []
        assert costs.writes.labels("written")._value.get() == 12


def test_pods_of_unmanaged_deployments_and_a_standby_write_nothing(tmp_path):
    with FakeAPI() as api:
        costs_of(api, tmp_path, twelve(), [deployment([zone_constraint()])])   # no record: not managed
        assert patches(api) == []
    with FakeAPI() as api:
        costs_of(api, tmp_path, twelve(), [managed()], leading=False)
        assert patches(api) == []


def test_a_cost_another_manager_owns_is_left_alone_with_one_warning_event(tmp_path):
    pods = twelve()
    pods[0] = pod("web-0", "a1", cost="100", manager="karpenter")
    with FakeAPI() as api:
        costs, _ = costs_of(api, tmp_path, pods, [managed()])
        assert "web-0" not in {r["path"].rsplit("/", 1)[1] for r in patches(api)}
        events = [r["body"] for r in api.requests if r["method"] == "POST" and r["path"].endswith("/events")]
        assert [(e["reason"], e["type"]) for e in events] == [("DeletionCostOwnedElsewhere", "Warning")]
        assert "set by karpenter" in events[0]["note"] and events[0]["regarding"]["name"] == "web"
        assert costs.foreign._value.get() == 1
        api.requests.clear()
        sync(costs)   # the same state: no second Event
        assert [r for r in api.requests if r["method"] == "POST"] == []


def test_a_violation_sets_the_gauge_and_records_one_spread_violated_event(tmp_path):
    pods = [pod("p1", "a1"), pod("p2", "a2"), pod("p3", "c1")]
    with FakeAPI() as api:
        costs, _ = costs_of(api, tmp_path, pods, [managed()])
        events = [r["body"] for r in api.requests if r["method"] == "POST" and r["path"].endswith("/events")]
        assert [e["reason"] for e in events] == ["SpreadViolated"]
        assert "topology.kubernetes.io/zone skew 2 > maxSkew 1" in events[0]["note"]
        assert costs.violated._value.get() == 1
        api.requests.clear()
        sync(costs)
        assert [r for r in api.requests if r["method"] == "POST"] == []


def test_the_skew_is_counted_on_the_nodes_as_the_last_node_event_left_them(tmp_path):
    """Rule S28: the Nodes are read once for every Deployment, and again after a Node event (a new zone is a
    new empty domain)."""
    pods = [pod("p1", "a1"), pod("p2", "a2"), pod("p3", "b1"), pod("p4", "c1")]
    with FakeAPI() as api:
        costs, _ = costs_of(api, tmp_path, pods, [managed()])
        assert costs.violated._value.get() == 0                       # a=2, b=1, c=1
        read = costs.spread_nodes()
        status = dict(NODES[0], status={"conditions": [{"type": "Ready", "status": "True"}]})
        costs._on_node("MODIFIED", status, NODES[0])          # neither labels nor taints: the same read
        assert costs.spread_nodes() is read
        zone_d = node("d1", "d")
        costs.nodes.apply("ADDED", zone_d)
        costs._on_node("ADDED", zone_d, None)
        costs.resync()
        while worker(costs).process_next(timeout=0):
            pass
        assert costs.violated._value.get() == 1
        events = [r["body"] for r in api.requests if r["method"] == "POST" and r["path"].endswith("/events")]
        assert "pods per domain: a=2, b=1, c=1, d=0" in events[-1]["note"]


def test_it_is_a_reconciler_of_the_controller_its_informers_queue_and_a_deployments_change_queue_its_key(tmp_path):
    from tests.test_controller import controller
    with FakeAPI() as api:
        c = controller(api, tmp_path)
        costs = c.pod_costs()
        worker = c.add(costs, error_stage="podcost")
        assert worker in c.workers and worker.reconciler is costs and set(costs.reflectors) <= set(c.reflectors)
        assert [r.res for r in costs.reflectors] == [kube.DEPLOYMENT_PODS, kube.NODES]
        assert costs.queue.name == "podcost"
        (deployments,) = [r for r in c.reconciler.reflectors if r.res == kube.DEPLOYMENTS]
        deployments.handler("MODIFIED", managed(), None)   # as the controller's Deployment watch calls it
        assert costs.queue.get(timeout=0) == ("default", "web")
        costs.queue.done(("default", "web"))
        assert costs.queue.get(timeout=0) is None


def test_the_controller_adds_it_only_with_the_setting_on():
    import inspect

    from webhook.controller import core
    source = inspect.getsource(core.run_controller)
    assert "if config.controller.spreadAwareScaleDown:" in source and "costs = c.pod_costs()" in source
    assert 'c.add(costs, error_stage="podcost")' in source
    assert load_config(None).controller.spreadAwareScaleDown is True
    assert load_config({"controller": {"spreadAwareScaleDown": False}}).controller.spreadAwareScaleDown is False


def test_a_pod_just_written_is_planned_as_written_until_the_watch_brings_it(tmp_path):
    """The store has one writer (its reflector): the worker keeps what it wrote beside it, so a second pass
    before the watch event writes nothing, and drops it once the store moves on."""
    with FakeAPI() as api:
        served = Pods(api, twelve())
        client = kube.Api(kube.api_client(kubeconfig=api.kubeconfig(tmp_path / "kubeconfig")))
        costs = costs_for(client, [managed()])
        for r in costs.reflectors:
            r.list()
        assert costs.write_costs(("default", "web")) == 12
        assert {p["metadata"].get("annotations", {}).get(DELETION_COST) for p in costs.pods.values()} == {None}
        assert len(costs.written) == 12
        assert costs.write_costs(("default", "web")) == 0   # the store is behind: planned on what was written
        assert len(patches(api)) == 12
        costs.reflectors[0].list()   # the store catches up
        assert costs.write_costs(("default", "web")) == 0 and len(costs.written) == 0
        assert sorted(int(p["metadata"]["annotations"][DELETION_COST]) for p in served.pods.values()) == \
            [-3, -3, -3, -2, -2, -2, -1, -1, -1, 0, 0, 0]


def test_nothing_is_planned_before_every_store_has_listed(tmp_path):
    """Until the Nodes (the zones) and the controller's stores have listed, a key is dropped, not planned on
    a partial view: the first sync queues every Deployment again."""
    with FakeAPI() as api:
        Pods(api, twelve())
        client = kube.Api(kube.api_client(kubeconfig=api.kubeconfig(tmp_path / "kubeconfig")))
        controller = SimpleNamespace(ready=False, leading=True)
        costs = costs_for(client, [managed()], controller=controller)
        sync(costs)
        assert patches(api) == []
        controller.ready = True
        sync(costs)
        assert len(patches(api)) == 12


def test_one_refused_pod_does_not_keep_the_others_from_their_cost_and_the_key_is_retried(tmp_path):
    with FakeAPI() as api:
        served = Pods(api, twelve())
        api.route("PATCH", "/api/v1/namespaces/default/pods/web-0",
                  lambda req: (403, {"kind": "Status", "code": 403, "reason": "Forbidden"}))
        client = kube.Api(kube.api_client(kubeconfig=api.kubeconfig(tmp_path / "kubeconfig")))
        costs = costs_for(client, [managed()])
        for r in costs.reflectors:
            r.list()
        with pytest.raises(kube.ApiError):
            costs.write_costs(("default", "web"))
        written = [name for name, p in served.pods.items() if DELETION_COST in (p["metadata"].get("annotations") or {})]
        assert sorted(written) == sorted(n for n in served.pods if n != "web-0")
        assert costs.writes.labels("failed")._value.get() == 1


def test_a_standby_tells_nothing_so_the_next_leader_tells_every_violation(tmp_path):
    pods = twelve()
    pods[0] = pod("web-0", "a1", cost="100", manager="karpenter")
    with FakeAPI() as api:
        controller = SimpleNamespace(ready=True, leading=False)
        costs, _ = costs_of(api, tmp_path, pods, [managed()], controller=controller)
        assert costs.foreigners == {} and costs.violations == {}
        controller.leading = True
        sync(costs)
        events = [r["body"]["reason"] for r in api.requests if r["method"] == "POST" and r["path"].endswith("/events")]
        assert events == ["DeletionCostOwnedElsewhere"]
