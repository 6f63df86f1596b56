"""Rule S28 for StatefulSets in the controller (webhook/controller/stsspread.py) against recorded API responses: the
gauge and the ``SpreadViolated`` Events of managed StatefulSets whose pods break their own spread, on the Nodes the
pod costs read."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from policylib import load_config
from policylib.constants import STATEFULSET_POD_NAME
from policylib.shell import kube
from tests.fakeapi import FakeAPI, paged_list
from tests.test_podcost import NOW, costs_for
from tests.test_scaledown import NODES, ZONE, node
from webhook.controller import ControllerMetrics, EventRecorder, Worker
from webhook.controller.stsspread import StatefulSetSpread
from webhook.informer import Reflector, Store

RECORD = "policylib.io/spread-effective-replicas"


def statefulset(name: str = "db", record: bool = True, ns: str = "default") -> dict[str, Any]:
    constraint = {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway",
                  "labelSelector": {"matchLabels": {"app": name}}}
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": f"sts-{name}", "resourceVersion": "3"}
    if record:
        meta["annotations"] = {RECORD: "3"}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta,
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"topologySpreadConstraints": [constraint]}}}}


def sts_pod(sts: str, ordinal: int, node_name: str, ns: str = "default") -> dict[str, Any]:
    name = f"{sts}-{ordinal}"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "resourceVersion": "7",
                         "labels": {"app": sts, STATEFULSET_POD_NAME: name},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": sts,
                                              "uid": f"sts-{sts}", "controller": True}]},
            "spec": {"nodeName": node_name}, "status": {"phase": "Running"}}


def spread_of(api: FakeAPI, tmp_path, pods: list[dict[str, Any]], statefulsets: list[dict[str, Any]],
              controller: SimpleNamespace | None = None) -> StatefulSetSpread:
    """The StatefulSets' rule S28 on the Nodes of a pod costs reconciler (as the controller wires them), both
    listed, every StatefulSet with pods queued and worked off."""
    controller = controller or SimpleNamespace(ready=True, leading=True)
    api.route("GET", "/api/v1/pods", paged_list("Pod", pods, 500))
    api.route("GET", "/api/v1/nodes", paged_list("Node", NODES, 500))
    api.route("POST", "/apis/events.k8s.io/v1/namespaces/default/events", lambda req: (201, req["body"]))
    client = kube.Api(kube.api_client(kubeconfig=api.kubeconfig(tmp_path / "kubeconfig")))
    costs = costs_for(client, [], controller=controller)
    store = Store()
    for s in statefulsets:
        store.apply("ADDED", s)
    metrics = ControllerMetrics()
    spread = StatefulSetSpread(statefulsets=store, nodes=costs.spread_nodes,
                               informer=lambda res, handler, store: Reflector(client, res, store, handler, metrics),
                               in_scope=lambda obj: True, ready=lambda: controller.ready,
                               leading=lambda: controller.leading, dry_run=False, metrics=metrics,
                               recorder=EventRecorder(client, "me", metrics, lambda: NOW))
    costs.node_listeners.append(spread.on_node_labels)
    for r in costs.reflectors + spread.reflectors:
        r.list()
    spread.resync()
    work(spread)
    spread.costs = costs   # type: ignore[attr-defined]  # the test's handle on the Nodes' reconciler
    return spread


def work(spread: StatefulSetSpread) -> None:
    w = Worker(spread, spread.recorder.metrics, resync_seconds=60, error_stage="stsspread")
    while w.process_next(timeout=0):
        pass


def events(api: FakeAPI) -> list[dict[str, Any]]:
    return [r["body"] for r in api.requests if r["method"] == "POST" and r["path"].endswith("/events")]


def test_a_statefulset_whose_pods_break_its_spread_sets_the_gauge_and_gets_one_event(tmp_path):
    # db: ordinals 0-2 in a, a, c (zone skew 2: b has none); cache: a, b, c (balanced)
    pods = [sts_pod("db", 0, "a1"), sts_pod("db", 1, "a2"), sts_pod("db", 2, "c1"),
            sts_pod("cache", 0, "a1"), sts_pod("cache", 1, "b1"), sts_pod("cache", 2, "c1")]
    with FakeAPI() as api:
        spread = spread_of(api, tmp_path, pods, [statefulset("db"), statefulset("cache")])
        assert spread.violated._value.get() == 1
        [event] = events(api)
        assert event["reason"] == "SpreadViolated" and event["type"] == "Warning"
        assert event["regarding"] == {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db",
                                      "namespace": "default", "uid": "sts-db"}
        assert event["note"] == ("statefulset default/db: topology.kubernetes.io/zone skew 2 > maxSkew 1 "
                                 "(ScheduleAnyway); pods per domain: a=2, b=0, c=1")
        api.requests.clear()
        spread.resync()
        work(spread)
        assert events(api) == []          # told once per state
        assert spread.violated._value.get() == 1


def test_unmanaged_statefulsets_and_a_standby_tell_nothing_and_the_next_leader_tells(tmp_path):
    pods = [sts_pod("db", 0, "a1"), sts_pod("db", 1, "a2"), sts_pod("legacy", 0, "a1"), sts_pod("legacy", 1, "a2")]
    controller = SimpleNamespace(ready=True, leading=False)
    with FakeAPI() as api:
        spread = spread_of(api, tmp_path, pods, [statefulset("db"), statefulset("legacy", record=False)], controller)
        assert events(api) == [] and spread.violated._value.get() == 0
        controller.leading = True
        spread.started_leading()
        work(spread)
        assert [e["regarding"]["name"] for e in events(api)] == ["db"]
        assert spread.violated._value.get() == 1


def test_a_node_label_change_counts_the_statefulsets_on_it_again(tmp_path):
    pods = [sts_pod("db", 0, "a1"), sts_pod("db", 1, "b1"), sts_pod("db", 2, "c1")]
    with FakeAPI() as api:
        spread = spread_of(api, tmp_path, pods, [statefulset("db")])
        assert spread.violated._value.get() == 0
        costs = spread.costs   # type: ignore[attr-defined]
        moved = node("b1", "a")   # b1 relabelled into zone a: db's pods are now a=2, b=0, c=1
        old = next(n for n in NODES if n["metadata"]["name"] == "b1")
        costs.nodes.apply("MODIFIED", moved)
        costs._on_node("MODIFIED", moved, old)
        assert spread.queue.get(timeout=0) == ("default", "db")
        spread.queue.done(("default", "db"))
        spread.queue.add(("default", "db"))
        work(spread)
        assert spread.violated._value.get() == 1
        assert "pods per domain: a=2, b=0, c=1" in events(api)[-1]["note"]


def test_a_statefulset_that_goes_or_loses_its_record_leaves_the_gauge(tmp_path):
    pods = [sts_pod("db", 0, "a1"), sts_pod("db", 1, "a2")]
    with FakeAPI() as api:
        spread = spread_of(api, tmp_path, pods, [statefulset("db")])
        assert spread.violated._value.get() == 1
        spread.statefulsets.apply("MODIFIED", statefulset("db", record=False))
        spread.on_statefulset("MODIFIED", statefulset("db", record=False), statefulset("db"))
        work(spread)
        assert spread.violated._value.get() == 0 and spread.violations == {}


def test_the_controller_adds_it_beside_the_pod_costs_on_their_nodes(tmp_path):
    import inspect

    from tests.test_controller import controller
    from webhook.controller import core
    source = inspect.getsource(core.run_controller)
    assert "if config.statefulSets.enabled:" in source and "c.add(c.statefulset_spread(costs)" in source
    with FakeAPI() as api:
        c = controller(api, tmp_path)
        costs = c.pod_costs()
        spread = c.statefulset_spread(costs)
        worker = c.add(spread, error_stage="stsspread")
        assert worker.reconciler is spread and set(spread.reflectors) <= set(c.reflectors)
        assert [r.res for r in spread.reflectors] == [kube.STATEFULSET_PODS]
        assert spread.queue.name == "stsspread" and costs.node_listeners == [spread.on_node_labels]
        (statefulsets,) = [r for r in c.reconciler.reflectors if r.res == kube.STATEFULSETS]
        statefulsets.handler("MODIFIED", statefulset("db"), None)   # as the controller's StatefulSet watch calls it
        assert spread.queue.get(timeout=0) == ("default", "db")
    assert load_config(None).statefulSets.enabled is True


def test_a_deleted_statefulset_leaves_the_gauge_and_a_dry_run_tells_nothing(tmp_path):
    pods = [sts_pod("db", 0, "a1"), sts_pod("db", 1, "a2")]
    with FakeAPI() as api:
        spread = spread_of(api, tmp_path, pods, [statefulset("db")])
        assert spread.violated._value.get() == 1
        gone = statefulset("db")
        spread.statefulsets.apply("DELETED", gone)
        spread.on_statefulset("DELETED", gone, None)
        work(spread)
        assert spread.violated._value.get() == 0 and spread.violations == {}
    with FakeAPI() as api:
        spread = spread_of(api, tmp_path, pods, [statefulset("db")], SimpleNamespace(ready=True, leading=True))
        api.requests.clear()
        spread.dry_run = True
        spread.violations.clear()
        spread.resync()
        work(spread)
        assert events(api) == []
