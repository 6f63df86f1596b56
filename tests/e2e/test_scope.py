"""One scope for the webhook and the controller (rules W5, W6) on the real API server: the controller and
``policylib plan --cluster`` act only on the objects the installed MutatingWebhookConfiguration (as the
chart renders it) sends to the webhook, never in the release's namespace.

Each scenario renders the chart's webhook configuration with its values and the release in a namespace
of its own, and installs it under a name of its own with one more namespaceSelector expression (the
scenario's label), so that scenarios and the shared cluster's other tests never overlap. Its Deployments
are created before the configuration (no webhook saw them: no record annotation, a legacy required
anti-affinity), so with ``reconcileDrift`` every one in scope gets a write and an ``AdmittedWithoutPolicy``
Event; out of scope: 0 writes, 0 Events. ``plan --cluster --release`` (the config found by the chart's
labels) lists exactly what the controller then writes.
"""
from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from tests.helmtool import render

from .harness import Controller, deployment, wait_for
from .util import POLICYLIB

ISOLATION = "e2e.policylib.io/scope"
CONFIG = {"hostTopologySpread": {"reconcileDrift": True}, "controller": {"maxConcurrentRollouts": 20}}
LEGACY = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "NAME"}}, "topologyKey": "kubernetes.io/hostname"}]}}
SKIP = {"policylib.io/skip": "true"}

#: scenario -> (chart values, {namespace suffix: labels}, in-scope namespace suffixes)
SCENARIOS = {
    "opt-out": ({}, {"in": {}, "out": SKIP}, {"in"}),
    "opt-in": ({"webhook": {"namespaceMode": "opt-in"}},
               {"in": {"policylib.io/enabled": "true"}, "out": {}}, {"in"}),
    "selector": ({"webhook": {"namespaceSelector": {"matchExpressions": [
        {"key": "team", "operator": "In", "values": ["a"]}]}}},
        {"in": {"team": "a"}, "out": {"team": "b"}}, {"in"}),
    # the release in a namespace of its own, which a custom selector would match: never in scope (W6)
    "release": ({"webhook": {"namespaceSelector": {"matchExpressions": [
        {"key": "team", "operator": "In", "values": ["a"]}]}}},
        {"in": {"team": "a"}, "rel": {"team": "a"}}, {"in"}),
}


#: scenario -> (planned writes, controller writes in scope, writes outside, Events outside)
RESULTS: dict[str, tuple[int, int, int, int]] = {}


@pytest.fixture(scope="module", autouse=True)
def scope_table():
    """Print each scenario's writes and Events, in and out of scope (``-s`` shows them)."""
    yield
    if RESULTS:
        lines = ["| scenario | plan's writes | controller's writes | writes outside | Events outside |",
                 "|---|---|---|---|---|"]
        lines += [f"| {name} | {' | '.join(map(str, row))} |" for name, row in sorted(RESULTS.items())]
        print("\nScope per scenario:\n" + "\n".join(lines))


def legacy(name: str, namespace: str, labels: dict | None = None) -> dict:
    d = deployment(name, namespace, replicas=4)
    d["spec"]["template"]["spec"]["affinity"] = json.loads(json.dumps(LEGACY).replace("NAME", name))
    if labels:
        d["metadata"]["labels"] = dict(d["metadata"].get("labels") or {}, **labels)
    return d


def configuration(values: dict, release_ns: str, name: str, scenario: str) -> dict:
    [hooks] = [o for o in render(values, release="scope", namespace=release_ns)
               if o["kind"] == "MutatingWebhookConfiguration"]
    hooks["metadata"]["name"] = name
    for hook in hooks["webhooks"]:
        hook["namespaceSelector"].setdefault("matchExpressions", []).append(
            {"key": ISOLATION, "operator": "In", "values": [scenario]})
    return hooks


def controller_events(cluster, namespace: str) -> list[dict]:
    return [e for e in cluster.list("events.events.k8s.io", namespace)
            if e.get("reportingController") == "policylib.io/controller"]


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_the_controller_and_plan_act_only_inside_the_webhooks_scope(cluster, scenario, tmp_path, ns, request):
    values, labels, inside = SCENARIOS[scenario]
    tag = f"{scenario}-{ns.rsplit('-', 1)[1]}"
    names = {suffix: f"scope-{tag}-{suffix}" for suffix in labels}
    release_ns = names.get("rel") or f"scope-{tag}-rel"
    for suffix, extra in labels.items():
        cluster.apply({"apiVersion": "v1", "kind": "Namespace",
                       "metadata": {"name": names[suffix], "labels": {ISOLATION: tag, **extra}}})
    if "rel" not in labels:
        cluster.namespace(release_ns)
    objs = [legacy("web", n) for n in names.values()] + [legacy("skipped", names["in"], SKIP)]
    cluster.apply(*objs)
    # the chart's ConfigMap, found by its labels and the release name (rule C10)
    cluster.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "policylib-config", "namespace": release_ns,
        "labels": {"app.kubernetes.io/name": "policylib-webhook", "app.kubernetes.io/instance": tag}},
        "data": {"config.yaml": yaml.safe_dump(CONFIG)}})
    hooks_name = f"policylib-e2e-scope-{tag}"
    # Leave the shared cluster as it was: a labelled config left behind is what `--cluster` without --config
    # finds in any later test (rule C10), and a configuration intercepts its namespaces.
    request.addfinalizer(lambda: cluster.kubectl("delete", "namespace", *names.values(), *(
        [] if "rel" in labels else [release_ns]), "--ignore-not-found", "--wait=false", check=False))
    request.addfinalizer(lambda: cluster.kubectl("delete", "configmap", "policylib-config", "-n", release_ns,
                                                 "--ignore-not-found", check=False))
    request.addfinalizer(lambda: cluster.kubectl("delete", "mutatingwebhookconfiguration", hooks_name,
                                                 "--ignore-not-found", check=False))
    cluster.apply(configuration(values, release_ns, hooks_name, tag))

    run = subprocess.run([*POLICYLIB, "plan", "--cluster", "--release", tag, "--webhook-configuration", hooks_name,
                          "-o", "json"], capture_output=True, text=True, env=cluster.env, timeout=120)
    assert run.returncode == 0, run.stderr
    assert f"policylib: config: ConfigMap {release_ns}/policylib-config (the installed controller's)" in run.stderr
    planned = json.loads(run.stdout)
    expected = {(names[s], "web") for s in inside}
    assert {(w["namespace"], w["name"]) for w in planned if w["action"] == "patch"} == expected
    assert {(w["namespace"], w["name"]) for w in planned if w.get("unrecorded")} == expected

    ctl = Controller(cluster, CONFIG, tmp_path, f"scope-{tag}", release_ns,
                     extra_args=["--webhook-configuration", hooks_name])
    try:
        wait_for("the controller leads", lambda: ctl.status()["leader"], timeout=60)

        def written():
            return {(e["namespace"], e["object_name"]) for e in ctl.log_entries("write") if e["namespace"] in names.values()}
        wait_for("the planned writes", lambda: written() == expected, timeout=120)
        wait_for("the queue worked off", lambda: ctl.metric("policylib_controller_queue_depth") == 0, timeout=60)
        wait_for("the AdmittedWithoutPolicy Events", lambda: {
            (e["regarding"]["namespace"], e["regarding"]["name"]) for n in names.values()
            for e in controller_events(cluster, n) if e["reason"] == "AdmittedWithoutPolicy"} == expected, timeout=60)
        assert written() == expected       # the controller's writes are plan's list
        outside = [n for suffix, n in names.items() if suffix not in inside]
        events_outside = sum(len(controller_events(cluster, n)) for n in outside + [release_ns])
        # every write the controller logged, in any namespace of the shared cluster
        writes_outside = len([e for e in ctl.log_entries("write") if e["namespace"] not in {names[s] for s in inside}])
        RESULTS[scenario] = (len([w for w in planned if w["action"] == "patch"]), len(written()), writes_outside,
                             events_outside)
        assert (writes_outside, events_outside) == (0, 0)        # 0 writes, 0 Events outside the scope
        for n in outside:
            assert cluster.get("deployment", "web", n)["metadata"].get("generation") == 1, n   # stored as created
        skipped = cluster.get("deployment", "skipped", names["in"])
        assert skipped["metadata"]["generation"] == 1
        assert [e for e in controller_events(cluster, names["in"]) if e["regarding"]["name"] == "skipped"] == []
        if scenario == "opt-out":
            # a namespace that opts back in is acted on at once (the Namespace watch)
            cluster.kubectl("label", "namespace", names["out"], "policylib.io/skip-")
            wait_for("the write after the label change",
                     lambda: (names["out"], "web") in written(), timeout=60)
    finally:
        ctl.stop()


def test_the_controllers_role_reads_the_one_webhook_configuration_and_the_namespaces(cluster, ns):
    """The ClusterRole manifests/ ships lets the controller list and watch exactly what the scope needs: the
    webhook configuration named by ``fieldSelector=metadata.name`` (RBAC's resourceNames), and Namespaces."""
    from .harness import ROOT
    [role] = [d for d in yaml.safe_load_all((ROOT / "manifests/base/controller.yaml").read_text())
              if d and d["kind"] == "ClusterRole"]
    name = f"policylib-controller-{ns}"
    role["metadata"]["name"] = name
    cluster.namespace(ns)
    cluster.apply(role, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "ctl", "namespace": ns}},
                  {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                   "subjects": [{"kind": "ServiceAccount", "name": "ctl", "namespace": ns}]})
    try:
        hooks = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"

        def raw(path: str) -> subprocess.CompletedProcess:
            return cluster.kubectl("get", "--raw", path, f"--as=system:serviceaccount:{ns}:ctl", check=False)
        by_name = "fieldSelector=metadata.name%3Dpolicylib-webhook"
        wait_for("the binding takes effect", lambda: raw(f"{hooks}?{by_name}&limit=500").returncode == 0, timeout=60)
        assert raw(f"{hooks}?{by_name}&watch=1&timeoutSeconds=1").returncode == 0
        got = raw(f"{hooks}/policylib-webhook")   # get: allowed (NotFound when absent, never Forbidden)
        assert got.returncode == 0 or "notfound" in got.stderr.lower().replace(" ", ""), got.stderr
        assert "forbidden" in raw(f"{hooks}?limit=500").stderr.lower()   # every configuration: not allowed
        assert raw("/api/v1/namespaces?limit=500").returncode == 0
        assert raw("/api/v1/namespaces?watch=1&timeoutSeconds=1").returncode == 0
    finally:
        cluster.kubectl("delete", "clusterrolebinding", name, "--ignore-not-found")
        cluster.kubectl("delete", "clusterrole", name, "--ignore-not-found")


def scope_events(cluster, namespace: str) -> list[tuple[str, str]]:
    """(reason, note) of the controller's Events on its own Deployment, oldest first."""
    return [(e["reason"], e["note"]) for e in sorted(controller_events(cluster, namespace),
                                                      key=lambda e: e["metadata"]["creationTimestamp"])
            if e["regarding"]["name"] == "policylib-controller" and e["reason"].startswith("Scope")]


def test_without_its_configuration_the_controller_acts_on_nothing_says_why_and_resumes(cluster, tmp_path, ns, request):
    """Rule W5 fails closed on the real API server: a controller whose webhook configuration is not installed
    writes nothing, and says why (a warning in its log, policylib_controller_scope_closed 1, /readyz's scope
    detail, a Warning Event ScopeClosed on its own Deployment). The configuration installed (the chart's, by
    its watch): the Deployment is written, ScopeRestored. matchConditions on every webhook, then the
    configuration deleted: closed again each time, a new Deployment is planned and not written."""
    tag = f"closed-{ns.rsplit('-', 1)[1]}"
    space, release_ns, hooks_name = f"scope-{tag}", f"scope-{tag}-rel", f"policylib-e2e-{tag}"
    cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": space, "labels": {ISOLATION: tag}}})
    cluster.namespace(release_ns)
    request.addfinalizer(lambda: cluster.kubectl("delete", "namespace", space, release_ns, "--ignore-not-found",
                                                 "--wait=false", check=False))
    request.addfinalizer(lambda: cluster.kubectl("delete", "mutatingwebhookconfiguration", hooks_name,
                                                 "--ignore-not-found", check=False))
    own = deployment("policylib-controller", release_ns, replicas=0)
    cluster.apply(legacy("web", space), own)
    ctl = Controller(cluster, CONFIG, tmp_path, "policylib-controller-5d8f9c7b6-x2x7q", release_ns,
                     extra_args=["--webhook-configuration", hooks_name])
    closed = f"no MutatingWebhookConfiguration {hooks_name} is installed"

    def written() -> set[str]:
        return {e["object_name"] for e in ctl.log_entries("write") if e["namespace"] == space}

    def planned_everything(since: float) -> bool:
        return ctl.metric("policylib_controller_reconciles_total", trigger="key") > since and \
            ctl.metric("policylib_controller_queue_depth") == 0
    try:
        wait_for("the first sync", lambda: ctl.status().get("firstSync") and ctl.status()["leader"], timeout=120)
        assert ctl.status()["scope"] == {"acting": False, "source": closed, "notes": [f"nothing is acted on: {closed}"]}
        assert ctl.metric("policylib_controller_scope_closed") == 1
        assert [(e["level"].lower(), e["acting"]) for e in ctl.log_entries("scope")] == [("warning", False)]
        assert wait_for("the ScopeClosed Event", lambda: scope_events(cluster, release_ns), timeout=60) == [
            ("ScopeClosed", f"nothing is acted on: {closed}")]
        assert written() == set() and cluster.get("deployment", "web", space)["metadata"]["generation"] == 1

        cluster.apply(configuration({}, release_ns, hooks_name, tag))          # installed: resumes at once
        wait_for("the write", lambda: written() == {"web"}, timeout=120)
        wait_for("ScopeRestored", lambda: [r for r, _ in scope_events(cluster, release_ns)] == [
            "ScopeClosed", "ScopeRestored"], timeout=60)
        assert (ctl.status()["scope"]["acting"], ctl.metric("policylib_controller_scope_closed")) == (True, 0)

        conditional = configuration({}, release_ns, hooks_name, tag)
        for hook in conditional["webhooks"]:     # accepted by the API server, evaluated by it per request
            hook["matchConditions"] = [{"name": "not-dry-run", "expression": "!request.dryRun"}]
        cluster.apply(conditional)
        wait_for("closed by matchConditions", lambda: ctl.metric("policylib_controller_scope_closed") == 1, timeout=60)
        assert ctl.metric("policylib_controller_scope_skipped_webhooks") == len(conditional["webhooks"]) == 8
        reason, note = wait_for("the second ScopeClosed", lambda: scope_events(cluster, release_ns)[2:], timeout=60)[0]
        assert reason == "ScopeClosed" and note.startswith(
            f"nothing is acted on: every webhook of MutatingWebhookConfiguration {hooks_name} has matchConditions")
        before = ctl.metric("policylib_controller_reconciles_total", trigger="key")
        cluster.apply(legacy("late", space))
        wait_for("the new Deployment planned", lambda: planned_everything(before), timeout=60)
        assert written() == {"web"}

        cluster.kubectl("delete", "mutatingwebhookconfiguration", hooks_name)    # gone: closed again
        wait_for("the third ScopeClosed", lambda: scope_events(cluster, release_ns)[3:] == [
            ("ScopeClosed", f"nothing is acted on: {closed}")], timeout=60)
        assert ctl.metric("policylib_controller_scope_skipped_webhooks") == 0
        before = ctl.metric("policylib_controller_reconciles_total", trigger="key")
        cluster.apply(legacy("later", space))
        wait_for("the new Deployment planned", lambda: planned_everything(before), timeout=60)
        assert written() == {"web"}
        for name in ("late", "later"):
            assert cluster.get("deployment", name, space)["metadata"]["generation"] == 1
    finally:
        ctl.stop()
