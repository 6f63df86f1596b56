"""The Helm chart against the real API server: every rendered object of the values matrix passes a server-side
dry run; the default render installs the same objects as ``kubectl kustomize manifests/``; ``helm install``,
``helm upgrade`` with a config change (rolls each Deployment once) and ``helm uninstall`` (leaves only what
docs/helm.md says stays). The controller of the install runs locally with the args the chart gave its pod
(no kubelet runs pods here) and makes the certificates; the upgrade keeps its caBundle."""
from __future__ import annotations

import json
import os
import re
import subprocess

import pytest
import yaml

from policylib.config import load_config
from policylib.constants import WEBHOOK_CONFIGURATION

from ..helmtool import CHART, MATRIX, by_kind_name, helm, render
from .harness import KUBECTL, ROOT, Controller, deployment, schemaless_crds, wait_for
from .test_install import CERT_MANAGER_CRDS

MONITORING_CRDS = schemaless_crds("monitoring.coreos.com",
                                  (("servicemonitors", "ServiceMonitor"), ("prometheusrules", "PrometheusRule")))
DRY_NS = "policylib-chart-dry"


@pytest.fixture(scope="module")
def crds(cluster):
    cluster.apply(*CERT_MANAGER_CRDS, *MONITORING_CRDS)
    cluster.kubectl("wait", "--for=condition=Established", "crd/certificates.cert-manager.io",
                    "crd/issuers.cert-manager.io", "crd/servicemonitors.monitoring.coreos.com",
                    "crd/prometheusrules.monitoring.coreos.com", "--timeout=60s")
    return cluster


@pytest.mark.minors()
@pytest.mark.parametrize("name", sorted(MATRIX))
def test_every_rendered_object_passes_a_server_side_dry_run(crds, name, minor):
    """Rendered for the minor of the API server that dry-runs it."""
    crds.namespace(DRY_NS)
    for team in (MATRIX[name].get("controller") or {}).get("rbac", {}).get("namespaces", []):
        crds.namespace(team)
    objs = render(MATRIX[name], namespace=DRY_NS, kube_version=f"{minor}.0")
    run = crds.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=chart-dry-run",
                       "--dry-run=server", "-o", "name", "-f", "-", input=yaml.safe_dump_all(objs))
    assert "Warning" not in run.stderr, run.stderr
    assert len(run.stdout.split()) == len(objs)


def kustomized() -> list[dict]:
    run = subprocess.run([str(KUBECTL), "kustomize", str(ROOT / "manifests")], capture_output=True, text=True,
                         check=True, timeout=120)
    return [d for d in yaml.safe_load_all(run.stdout) if d]


def identity(o: dict) -> tuple:
    name = re.sub(r"^policylib-config-[a-z0-9]{10}$", "policylib-config", o["metadata"]["name"])
    return o["kind"], name, o["metadata"].get("namespace")


def _webhook_view(hook: dict) -> dict:
    return {k: hook.get(k) for k in ("name", "rules", "failurePolicy", "sideEffects", "timeoutSeconds",
                                     "reinvocationPolicy", "matchPolicy", "namespaceSelector", "objectSelector",
                                     "admissionReviewVersions", "clientConfig")}


def _pod_view(d: dict) -> dict:
    spec = d["spec"]["template"]["spec"]
    container = dict(spec["containers"][0], image=None)
    volumes = [dict(v, configMap={"name": "policylib-config"}) if "configMap" in v else v for v in spec["volumes"]]
    return {"replicas": d["spec"]["replicas"], "strategy": d["spec"].get("strategy"),
            "selector": d["spec"]["selector"], "container": container, "volumes": volumes,
            **{k: spec.get(k) for k in ("serviceAccountName", "priorityClassName", "securityContext",
                                        "topologySpreadConstraints", "terminationGracePeriodSeconds")}}


def test_default_render_installs_what_kustomize_installs(harness_built):
    """Names, kinds, RBAC rules, webhooks and pods agree; the differences are exactly docs/helm.md's."""
    chart = {identity(o): o for o in render()}
    kust = {identity(o): o for o in kustomized()}
    assert set(kust) - set(chart) == {("Namespace", "policylib-system", None)}
    assert set(chart) - set(kust) == {("Role", "policylib-controller-certificates", "policylib-system"),
                                      ("RoleBinding", "policylib-controller-certificates", "policylib-system")}
    for key, k in kust.items():
        if key not in chart:
            continue
        c = chart[key]
        if k["kind"] in ("Role", "ClusterRole"):
            extra = [{"apiGroups": ["admissionregistration.k8s.io"], "resources": ["mutatingwebhookconfigurations"],
                      "resourceNames": ["policylib-webhook"], "verbs": ["get", "update"]}] \
                if key == ("ClusterRole", "policylib-controller", None) else []
            # the chart grants the gang methods' rules only with those settings (docs/rbac.md); manifests/ always
            gang = ("kubeflow.org", "jobset.x-k8s.io", "scheduling.x-k8s.io", "scheduling.k8s.io")
            if key == ("ClusterRole", "policylib-controller", None):   # TrainJobs and runtimes, for the gang methods
                gang += ("trainer.kubeflow.org",)   # (the webhook reads the runtimes in both, rule T6)
            assert c["rules"] == [r for r in k["rules"] if r["apiGroups"][0] not in gang] + extra, key
        elif k["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            assert (c["roleRef"], c["subjects"]) == (k["roleRef"], k["subjects"]), key
        elif k["kind"] == "MutatingWebhookConfiguration":
            assert [_webhook_view(h) for h in c["webhooks"]] == [_webhook_view(h) for h in k["webhooks"]]
        elif k["kind"] == "Deployment":
            cv, kv = _pod_view(c), _pod_view(k)
            if key[1] == "policylib-controller":   # certificates.mode self: the rotator's flags
                assert cv["container"]["args"][3:] == ["--certificates=self", "--certificates-ca-duration=43800h",
                                                       "--certificates-serving-duration=8760h",
                                                       "--certificates-propagation=180s"]
                cv["container"]["args"] = cv["container"]["args"][:3]
            assert cv == kv, key
        elif k["kind"] in ("Service", "PodDisruptionBudget"):
            assert c["spec"] == k["spec"], key
        elif k["kind"] == "ConfigMap":
            assert load_config(yaml.safe_load(c["data"]["config.yaml"])) == \
                load_config(yaml.safe_load(k["data"]["config.yaml"]))
        # app.kubernetes.io/name is the same component label on both
        assert c["metadata"]["labels"]["app.kubernetes.io/name"] == k["metadata"]["labels"]["app.kubernetes.io/name"]


# --- install, upgrade, uninstall ----------------------------------------------------------------------------

NS = "policylib-helm"


def helm_env(cluster, tmp_path) -> dict:
    env = dict(cluster.env)
    for var in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
        env[var] = str(tmp_path / var.lower())
    return env


def replica_sets(cluster, app: str) -> list[dict]:
    return cluster.list("replicasets", NS, f"app.kubernetes.io/name={app}")


def revision(cluster, name: str) -> str:
    return cluster.get("deployment", name, NS)["metadata"]["annotations"]["deployment.kubernetes.io/revision"]


def local_controller(cluster, tmp_path, identity: str) -> Controller:
    """The installed controller Deployment's args, run locally with the installed ConfigMap's config and the
    scope of the installed webhook configuration (the controller's default name, which the chart installs)."""
    deployment = cluster.get("deployment", "policylib-controller", NS)
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    config = yaml.safe_load(cluster.get("configmap", "policylib-config", NS)["data"]["config.yaml"]) or {}
    kept = [a for a in args if a.startswith(("--cert", "--webhook-configuration"))]
    if not any(a.startswith("--webhook-configuration") for a in kept):
        kept.append(f"--webhook-configuration={WEBHOOK_CONFIGURATION}")
    ctl = Controller(cluster, config, tmp_path, identity, NS, extra_args=kept)
    return ctl


@pytest.mark.minors()
def test_install_upgrade_uninstall(cluster, tmp_path):
    env = helm_env(cluster, tmp_path)
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"webhook": {"namespaceMode": "opt-in"}}))
    install = helm("install", "policylib", str(CHART), "-n", NS, "--create-namespace", "-f", str(values), env=env)
    assert "STATUS: deployed" in install.stdout
    controller = None
    try:
        for app in ("policylib-webhook", "policylib-controller"):
            wait_for(f"the {app} Deployment's first ReplicaSet", lambda a=app: len(replica_sets(cluster, a)) == 1,
                     timeout=60)
        # The leader (run as its pod would) makes the Secrets and the caBundle of the installed configuration.
        controller = local_controller(cluster, tmp_path, "helm-0")
        wait_for("the controller leads", lambda: controller.status()["leader"], timeout=60)
        bundle = wait_for("the caBundle", lambda: cluster.get("mutatingwebhookconfiguration", "policylib-webhook")
                          ["webhooks"][0]["clientConfig"].get("caBundle"), timeout=60)
        wait_for("the serving Secret", lambda: cluster.get_or_none("secret", "policylib-webhook-tls", NS), timeout=60)

        # An upgrade that changes config: the ConfigMap says it, each Deployment rolls once, the caBundle stays.
        values.write_text(yaml.safe_dump({"webhook": {"namespaceMode": "opt-in"},
                                          "config": {"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule"}}}))
        helm("upgrade", "policylib", str(CHART), "-n", NS, "-f", str(values), env=env)
        stored = yaml.safe_load(cluster.get("configmap", "policylib-config", NS)["data"]["config.yaml"])
        assert load_config(stored).hostTopologySpread.whenUnsatisfiable == "DoNotSchedule"
        for app in ("policylib-webhook", "policylib-controller"):
            wait_for(f"{app} rolled", lambda a=app: len(replica_sets(cluster, a)) == 2, timeout=60)
            assert revision(cluster, app) == "2"
        hooks = cluster.get("mutatingwebhookconfiguration", "policylib-webhook")["webhooks"]
        assert [h["clientConfig"].get("caBundle") for h in hooks] == [bundle] * 8   # every family
        assert hooks[0]["namespaceSelector"]["matchExpressions"][0]["key"] == "policylib.io/enabled"

        # The same values again: nothing rolls.
        helm("upgrade", "policylib", str(CHART), "-n", NS, "-f", str(values), env=env)
        for app in ("policylib-webhook", "policylib-controller"):
            assert (len(replica_sets(cluster, app)), revision(cluster, app)) == (2, "2")
    finally:
        if controller:
            controller.stop()
        uninstall = helm("uninstall", "policylib", "-n", NS, env=env, check=False)
    assert uninstall.returncode == 0, uninstall.stderr
    # What stays is what docs/helm.md says: the two certificate Secrets and the Lease (and the namespace).
    # Pods (and so their ReplicaSets, for a while) stay Terminating here: no kubelet confirms their end.

    def left() -> list[str]:
        names = cluster.kubectl("get", "all,configmaps,secrets,serviceaccounts,roles,rolebindings,leases,"
                                       "poddisruptionbudgets", "-n", NS, "-o", "name").stdout.split()
        return sorted(n for n in names if not n.startswith(
            ("configmap/kube-root-ca.crt", "serviceaccount/default", "pod/", "replicaset.apps/")))

    expected = ["lease.coordination.k8s.io/policylib-controller", "secret/policylib-webhook-ca",
                "secret/policylib-webhook-tls"]
    wait_for("only the Secrets and the Lease are left", lambda: left() == expected, timeout=60)
    for kind in ("clusterrole", "clusterrolebinding", "mutatingwebhookconfiguration"):
        assert cluster.list(kind, selector="app.kubernetes.io/instance=policylib") == []
    cluster.kubectl("delete", "namespace", NS, "--wait=false")


def test_helm_version_is_the_pinned_release():
    run = helm("version", "--short")
    pinned = re.search(r"helm.sh/helm/v3 (v\S+)", (ROOT / "e2e/helm/go.mod").read_text()).group(1)
    assert run.stdout.strip().startswith(pinned + "+g") or run.stdout.strip() == pinned, run.stdout


@pytest.mark.minors()
def test_kustomize_components_opt_in_and_alerts(crds, tmp_path):
    """manifests/components/opt-in-namespaces and prometheus-rule in a user's overlay: the selectors and rules
    they make, and every object accepted by the API server (server-side dry run, in a namespace of its own)."""
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources:\n  - {os.path.relpath(ROOT / 'manifests', tmp_path)}\n"
        f"components:\n  - {os.path.relpath(ROOT / 'manifests/components/opt-in-namespaces', tmp_path)}\n"
        f"  - {os.path.relpath(ROOT / 'manifests/components/prometheus-rule', tmp_path)}\n")
    built = [d for d in yaml.safe_load_all(crds.kubectl("kustomize", str(tmp_path)).stdout) if d]
    objs = {(o["kind"], o["metadata"]["name"]): o for o in built}
    for hook in objs[("MutatingWebhookConfiguration", "policylib-webhook")]["webhooks"]:
        assert hook["namespaceSelector"]["matchExpressions"] == [
            {"key": "policylib.io/enabled", "operator": "In", "values": ["true"]},
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
             "values": ["kube-system", "kube-node-lease", "policylib-system"]},
            {"key": "policylib.io/skip", "operator": "NotIn", "values": ["true"]}]
    chart_rule = by_kind_name(render(MATRIX["monitoring"]))[("PrometheusRule", "policylib")]
    assert objs[("PrometheusRule", "policylib")]["spec"] == chart_rule["spec"]
    crds.namespace(DRY_NS)
    moved = [dict(o, metadata=dict(o["metadata"], namespace=DRY_NS)) if o["metadata"].get("namespace") else o
             for o in built if o["kind"] != "Namespace"]
    run = crds.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=chart-dry-run",
                       "--dry-run=server", "-o", "name", "-f", "-", input=yaml.safe_dump_all(moved))
    assert "Warning" not in run.stderr, run.stderr
    assert "prometheusrule.monitoring.coreos.com/policylib" in run.stdout.split()
    assert len(run.stdout.split()) == len(moved)


@pytest.mark.parametrize("config, message", [
    ({"gang": {"method": "workload"}}, "values don't meet the specifications of the schema"),
    ({"zoneTopologySpread": {"topologyKey": "example.com/rack"}, "hostTopologySpread": {"topologyKey": "example.com/rack"}},
     "hostTopologySpread.topologyKey must differ from zoneTopologySpread.topologyKey"),
], ids=["gang-workload-on-the-default-scheduler", "two-equal-topology-keys"])
def test_helm_install_refuses_a_config_the_webhook_refuses_at_start_before_anything_is_applied(cluster, tmp_path,
                                                                                                config, message):
    """Rule C8: what the webhook and the controller refuse at start (exit 2), `helm install` refuses first."""
    from policylib import ConfigError
    with pytest.raises(ConfigError):
        load_config(config)
    namespace = "policylib-refused"
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"config": config}))
    run = helm("install", "refused", str(CHART), "-n", namespace, "--create-namespace", "-f", str(values),
               env=helm_env(cluster, tmp_path), check=False)
    assert run.returncode == 1 and message in run.stderr, run.stdout + run.stderr
    assert cluster.get_or_none("namespace", namespace) is None
    assert cluster.list("configmaps", None, "app.kubernetes.io/instance=refused") == []


# --- RBAC on the real API server (docs/rbac.md) --------------------------------------------------------------

CLAIMS = re.compile(r"<!-- rbac-claims:[^>]*-->\n(.*?)<!-- rbac-claims: end -->", re.S)


def rbac_claims() -> list[tuple[str, ...]]:
    """docs/rbac.md's claims: (identity, verb, resource, namespace, name, default install, namespaced install)."""
    [table] = CLAIMS.findall((ROOT / "docs/rbac.md").read_text())
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in table.strip().splitlines()[2:]]
    return [(r[0], r[1], r[2], r[3], r[4], r[5], r[6]) for r in rows]


def rbac_objects(values: dict, release_ns: str, suffix: str) -> list[dict]:
    """The chart's ServiceAccounts, Roles and bindings for ``values``, its cluster-scoped names suffixed (the
    shared cluster may hold a chart's or manifests/' own for a while)."""
    objs = [o for o in render(values, release=f"rbac-{suffix}", namespace=release_ns)
            if o["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")]
    for o in objs:
        if o["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            o["metadata"]["name"] += f"-{suffix}"
        if o["kind"] in ("ClusterRoleBinding", "RoleBinding") and o["roleRef"]["kind"] == "ClusterRole":
            o["roleRef"]["name"] += f"-{suffix}"
    return objs


def allowed(cluster, release_ns: str, identity: str, verb: str, resource: str, namespace: str, name: str) -> bool:
    """A SubjectAccessReview for the ServiceAccount, as ``kubectl auth can-i --as`` sends it, the group spelled
    out (it answers for kinds whose CRDs are not installed too)."""
    plural, _, group = resource.partition(".")
    attributes = {"verb": verb, "resource": plural, "group": group, "namespace": namespace, "name": name}
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
              "spec": {"user": f"system:serviceaccount:{release_ns}:policylib-{identity}",
                       "groups": ["system:serviceaccounts", f"system:serviceaccounts:{release_ns}",
                                  "system:authenticated"], "resourceAttributes": attributes}}
    run = cluster.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(review))
    return json.loads(run.stdout)["status"].get("allowed", False)


@pytest.fixture(scope="module")
def rbac_installs(cluster):
    """The default install's RBAC and a confined one's (controller.rbac.namespaces: [its team namespace]), each
    in a release namespace of its own: {variant: (release namespace, the namespace it serves, another)}."""
    installs = {"default": ("rbac-default", "rbac-team-a", "rbac-other"),
                "namespaced": ("rbac-confined", "rbac-team-a", "rbac-other")}
    for release_ns, team, other in installs.values():
        for namespace in (release_ns, team, other):
            cluster.namespace(namespace)
    cluster.apply(*rbac_objects({}, installs["default"][0], "default"))
    cluster.apply(*rbac_objects({"controller": {"rbac": {"namespaces": [installs["namespaced"][1]]}}},
                                installs["namespaced"][0], "namespaced"))
    yield installs
    for suffix in ("default", "namespaced"):
        cluster.kubectl("delete", "clusterrole,clusterrolebinding", "-l", f"app.kubernetes.io/instance=rbac-{suffix}",
                        "--ignore-not-found", check=False)
    cluster.kubectl("delete", "namespace", *sorted({ns for install in installs.values() for ns in install}),
                    "--ignore-not-found", "--wait=false", check=False)


def test_every_rbac_claim_of_the_docs_holds_on_the_api_server(cluster, rbac_installs):
    """Each row of docs/rbac.md's table, for the default install and the confined one, asked of the real API
    server's RBAC authorizer."""
    claims = rbac_claims()
    assert len(claims) >= 40
    wrong = []
    for variant, column in (("default", 5), ("namespaced", 6)):
        release_ns, team, other = rbac_installs[variant]
        places = {"team-a": team, "other": other, "release": release_ns, "all": "", "-": "", "kube-system": "kube-system"}
        for claim in claims:
            identity, verb, resource, namespace, name = claim[:5]
            got = allowed(cluster, release_ns, identity, verb, resource, places[namespace], "" if name == "-" else name)
            if got is not (claim[column] == "yes"):
                wrong.append((variant, claim[:5], "allowed" if got else "denied"))
    assert wrong == []


def test_the_confined_controller_writes_in_its_namespace_with_its_own_token(cluster, rbac_installs, tmp_path,
                                                                            request):
    """The controller run with the confined ServiceAccount's own token (a TokenRequest), its RBAC as the chart
    renders it for controller.rbac.namespaces: it leads, writes the Deployment of the namespace it serves
    (and its Event) without one 403, records the Events about its scope on its own Deployment, and a write
    elsewhere is refused by the API server."""
    release_ns, team, other = rbac_installs["namespaced"]
    values = {"controller": {"rbac": {"namespaces": [team]}}}
    [hooks] = [o for o in render(values, release="rbac-namespaced", namespace=release_ns)
               if o["kind"] == "MutatingWebhookConfiguration"]   # sent only the team's namespace
    cluster.apply(hooks)
    request.addfinalizer(lambda: cluster.kubectl("delete", "mutatingwebhookconfiguration", WEBHOOK_CONFIGURATION,
                                                 "--ignore-not-found", check=False))
    web = deployment("web", team, 4)
    web["spec"]["template"]["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    cluster.apply(web, dict(web, metadata={"name": "web", "namespace": other}),
                  deployment("policylib-controller", release_ns, 0))
    token = cluster.kubectl("create", "token", "policylib-controller", "-n", release_ns, "--duration=1h").stdout.strip()
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    for user in config["users"]:
        user["user"] = {"token": token}
    kubeconfig = tmp_path / "controller-kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    denied = subprocess.run([str(KUBECTL), "--kubeconfig", str(kubeconfig), "annotate", "deployment", "web", "-n",
                             other, "x=y"], capture_output=True, text=True, timeout=60)
    assert denied.returncode == 1 and "forbidden" in denied.stderr.lower(), denied.stderr
    ctl = Controller(cluster, {"hostTopologySpread": {"reconcileDrift": True}}, tmp_path,
                     "policylib-controller-5d8f9c7b6-x2x7q", release_ns,
                     extra_args=[f"--webhook-configuration={WEBHOOK_CONFIGURATION}"], kubeconfig=kubeconfig)
    try:
        wait_for("the controller leads", lambda: ctl.status().get("firstSync") and ctl.status()["leader"], timeout=120)
        wait_for("the write", lambda: [e for e in ctl.log_entries("write") if e["namespace"] == team], timeout=120)
        wait_for("its Events", lambda: {e["reason"] for e in cluster.list("events.events.k8s.io", team)} >= {
            "SpreadRewritten", "AdmittedWithoutPolicy"}, timeout=60)
        assert "affinity" not in cluster.get("deployment", "web", team)["spec"]["template"]["spec"]
        assert cluster.get("deployment", "web", other)["metadata"]["generation"] == 1     # outside: untouched
        assert ctl.status()["scope"]["acting"] is True
        # spread-aware scale-down (on by default): the deletion cost of the rolled pods, patched in its namespace
        wait_for("a pod's deletion cost", lambda: ctl.metric("policylib_pod_cost_writes_total", result="written") >= 1,
                 timeout=120)
        assert ctl.metric("policylib_pod_cost_writes_total", result="failed") == 0
        assert sum(ctl.metric("policylib_controller_errors_total", stage=stage)
                   for stage in ("write", "event", "reconcile")) == 0, ctl.log_text()[-3000:]
    finally:
        ctl.stop()
    cluster.kubectl("delete", "mutatingwebhookconfiguration", WEBHOOK_CONFIGURATION)
    ctl = Controller(cluster, {}, tmp_path, "policylib-controller-5d8f9c7b6-x2x7q", release_ns,
                     extra_args=[f"--webhook-configuration={WEBHOOK_CONFIGURATION}"], kubeconfig=kubeconfig)
    try:   # its scope closed: the Warning Event on its own Deployment, in the release's namespace (its Role)
        wait_for("ScopeClosed", lambda: [e for e in cluster.list("events.events.k8s.io", release_ns)
                                         if e["reason"] == "ScopeClosed"], timeout=120)
        assert ctl.metric("policylib_controller_errors_total", stage="event") == 0
    finally:
        ctl.stop()
