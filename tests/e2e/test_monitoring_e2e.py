"""Every metric the alerts (manifests/components/prometheus-rule, the chart's prometheusRule) and the Grafana
dashboard (charts/policylib/files/dashboard.json) query is exposed by a running process of the harness: the
webhook, the controller (with the certificate rotator on), or the API server, each scraped after the events
that make its series appear (reviews, a denial, a webhook that fails open, one that is rejected); and every
label an alert or a panel groups by is on those series (where the family has samples: a labelled family of
ours with no event yet is announced by its # TYPE line only)."""
from __future__ import annotations

import json
import re
import ssl
import urllib.request

import pytest
import yaml

from .harness import CONFIG_LABEL, ROOT, Controller, deployment, free_port, wait_for, webhook_rules

RULES = ROOT / "manifests/components/prometheus-rule/prometheusrule.yaml"
DASHBOARD = ROOT / "charts/policylib/files/dashboard.json"
NAME = re.compile(r"\b((?:policylib|apiserver)_[a-z0-9_]+)\b")
BY = re.compile(r"\bby \(([^)]*)\)")
SUFFIXES = ("_bucket", "_sum", "_count", "_total", "_created")


def queries() -> list[str]:
    rules = yaml.safe_load(RULES.read_text())["spec"]["groups"]
    exprs = [r["expr"] for g in rules for r in g["rules"]]
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return exprs + [t["expr"] for p in panels for t in p["targets"]]


def parse(text: str) -> dict[str, set[str]]:
    """Sample name -> the label names seen on it; families announced by # TYPE without samples too."""
    out: dict[str, set[str]] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            out.setdefault(line.split()[2], set())
        elif line and not line.startswith("#"):
            name, _, rest = line.partition("{")
            name = name.split(" ")[0]
            labels = set(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', rest.rpartition("}")[0])) if rest else set()
            out.setdefault(name, set()).update(labels)
    return out


def exposed(name: str, series: dict[str, set[str]]) -> set[str] | None:
    if name in series:
        return series[name]
    for suffix in SUFFIXES:   # a histogram's family (# TYPE x histogram) announces x_bucket, x_sum, x_count
        if name.endswith(suffix) and name[: -len(suffix)] in series:
            return series[name[: -len(suffix)]] | {"le"}
    return None


def _fail_webhook(cluster, name: str, policy: str, namespace: str) -> None:
    hook = dict(webhook_rules()[0], name=name, failurePolicy=policy, timeoutSeconds=2,
                clientConfig={"url": f"https://127.0.0.1:{free_port()}/mutate", "caBundle": "LS0tLQ=="},
                namespaceSelector={"matchLabels": {"kubernetes.io/metadata.name": namespace}})
    cluster.apply({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                   "metadata": {"name": f"monitoring-{policy.lower()}"}, "webhooks": [hook]})


@pytest.mark.timeout(300)
def test_every_queried_metric_is_exposed(cluster, webhooks, tmp_path, ns):
    hook = webhooks("default")
    cluster.namespace(ns, config="default")
    cluster.apply(deployment("web", ns, 2))
    # A denial: an object the webhook refuses (an invalid whenUnsatisfiable in the user's own spread).
    bad = deployment("bad", ns, 2)
    bad["spec"]["template"]["spec"]["topologySpreadConstraints"] = [
        {"maxSkew": 0, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
         "labelSelector": {"matchLabels": {"app": "bad"}}}]
    cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(bad), check=False)
    # The API server's own counters appear with their first event: one webhook that fails open, one rejected.
    open_ns, fail_ns = cluster.namespace(f"{ns}-open"), cluster.namespace(f"{ns}-fail")
    try:
        _fail_webhook(cluster, "deployments.policylib.io", "Ignore", open_ns)
        _fail_webhook(cluster, "kubeflow-jobs.policylib.io", "Fail", fail_ns)

        def fail_events() -> bool:
            cluster.kubectl("create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(deployment("x", open_ns)),
                            check=False)
            cluster.kubectl("create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(deployment("x", fail_ns)),
                            check=False)
            text = cluster.kubectl("get", "--raw", "/metrics").stdout
            return 'apiserver_admission_webhook_fail_open_count{name="deployments.policylib.io"' in text and \
                'apiserver_admission_webhook_rejection_count{' in text and 'name="kubeflow-jobs.policylib.io"' in text
        wait_for("the API server counts a fail-open and a rejection", fail_events, timeout=90, interval=1)
        apiserver = parse(cluster.kubectl("get", "--raw", "/metrics").stdout)
    finally:
        cluster.kubectl("delete", "mutatingwebhookconfiguration", "monitoring-ignore", "monitoring-fail",
                        "--ignore-not-found")
    ctx = ssl.create_default_context(cafile=str(hook.cert_dir / "ca.crt"))
    with urllib.request.urlopen(f"https://127.0.0.1:{hook.port}/metrics", context=ctx, timeout=10) as r:
        webhook = parse(r.read().decode())
    # The controller with the rotator (its certificate gauges), on a configuration of its own.
    cluster.namespace(f"{ns}-certs")
    cluster.apply({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                   "metadata": {"name": "monitoring-certs"}, "webhooks": [dict(
                       webhook_rules()[0], name="deployments.monitoring.e2e.policylib.io",
                       clientConfig={"url": "https://localhost:1/mutate"},
                       namespaceSelector={"matchLabels": {CONFIG_LABEL: "none"}})]})
    controller = Controller(cluster, {}, tmp_path, "monitoring-0", f"{ns}-certs", extra_args=[
        "--certificates=self", "--certificates-webhook-configuration=monitoring-certs"])
    try:
        wait_for("the rotator's gauges", lambda: controller.metric(
            "policylib_controller_certificate_not_after_seconds", certificate="serving") > 0, timeout=60)
        with urllib.request.urlopen(f"http://127.0.0.1:{controller.port}/metrics", timeout=10) as r:
            ctl = parse(r.read().decode())
    finally:
        controller.stop()
        cluster.kubectl("delete", "mutatingwebhookconfiguration", "monitoring-certs", "--ignore-not-found")
    series = {**apiserver, **webhook, **ctl}
    missing, unlabelled = [], []
    for q in queries():
        names = set(NAME.findall(q))
        for name in names:
            if exposed(name, series) is None:
                missing.append(name)
        # Labels are checked on the series that have samples (a labelled family with no event yet, such
        # as policylib_controller_errors, is announced by its # TYPE line alone).
        sampled = [exposed(n, series) for n in names if exposed(n, series)]
        for group in BY.findall(q):
            for label in (x.strip() for x in group.split(",") if x.strip()):
                if sampled and not any(label in labels for labels in sampled):
                    unlabelled.append((label, sorted(names)))
    assert sorted(set(missing)) == []
    assert unlabelled == []
    assert len(queries()) == 33   # with the controller memory alert, the memory panel's two targets, the spread alert,
    # the scope alert, the connection-limit alert and the StatefulSets' spread alert
