"""The Helm chart (charts/policylib): its version, generated schema and docs, lint, and what it renders over
the values matrix (tests/helmtool.py MATRIX). helm itself is built by ``make helm`` (tests/helmtool.py)."""
from __future__ import annotations

import base64
import configparser
import json
import subprocess
import sys

import jsonschema
import pytest
import yaml

import policylib
from policylib.config import load_config

from .e2e.harness import MINORS
from .helmtool import CHART, MATRIX, NAMESPACE, ROOT, by_kind_name, helm, render

RULE_COMPONENT = ROOT / "manifests/components/prometheus-rule/prometheusrule.yaml"


def next_minor() -> str:
    """The Kubernetes minor after the newest one the end-to-end tests run."""
    major, minor = max(tuple(map(int, m.split("."))) for m in MINORS)
    return f"{major}.{minor + 1}"


NEXT_MINOR = next_minor()


def chart() -> dict:
    return yaml.safe_load((CHART / "Chart.yaml").read_text())


def test_chart_version_is_the_project_version():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    version = cfg["metadata"]["version"]
    assert (chart()["version"], chart()["appVersion"]) == (version, version)
    assert policylib.__version__ == version


@pytest.mark.parametrize("kube_version", [f"{m}.0" for m in MINORS] + [f"{m}.99" for m in MINORS] +
                         [f"{m}.2-eks-1a2b3c4" for m in MINORS])
def test_the_chart_renders_for_every_minor_the_end_to_end_tests_run(kube_version):
    """Every patch release of each minor the end-to-end tests run, a provider's build suffix included."""
    objs = render(kube_version=kube_version)
    assert ("Deployment", "policylib-webhook") in by_kind_name(objs)


@pytest.mark.parametrize("kube_version", ["1.26.9", f"{NEXT_MINOR}.0", f"{NEXT_MINOR}.0-alpha.1"])
def test_the_chart_refuses_a_kubernetes_outside_its_range(kube_version):
    """Below the documented minimum, or a minor the end-to-end tests have not run (its pre-releases too)."""
    run = render(kube_version=kube_version, check=False)
    assert run.returncode == 1
    # helm names the version without its pre-release
    assert (f"chart requires kubeVersion: {chart()['kubeVersion']} which is incompatible with Kubernetes "
            f"v{kube_version.split('-')[0]}") in run.stderr, run.stderr


def test_schema_and_docs_are_generated_and_fresh():
    run = subprocess.run([sys.executable, str(ROOT / "charts/generate.py"), "--check"], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert (run.returncode, run.stderr) == (0, "")


def test_values_yaml_satisfies_its_schema_and_every_value_is_documented():
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    jsonschema.validate(values, schema)

    def leaves(node: dict, prefix: str = "") -> list[str]:
        out = []
        for key, sub in node["properties"].items():
            if sub.get("type") == "object" and "properties" in sub:
                out += leaves(sub, prefix + key + ".")
            else:
                assert sub.get("description"), f"{prefix}{key} has no description"
                out.append(prefix + key)
        return out

    documented = leaves(schema)
    assert len(documented) >= 60
    table = (ROOT / "docs/helm.md").read_text()
    assert [p for p in documented if f"| `{p}` |" not in table] == []


@pytest.mark.parametrize("values, error", [
    ({"webhook": {"replica": 3}}, "- at '/webhook': additional properties 'replica' not allowed"),
    ({"webhook": {"namespaceMode": "optin"}}, "- at '/webhook/namespaceMode': value must be one of 'opt-out', 'opt-in'"),
    ({"webhook": {"timeoutSeconds": 31}}, "- at '/webhook/timeoutSeconds': maximum: got 31, want 30"),
    ({"webhook": {"tls": {"minVersion": "1.1"}}}, "- at '/webhook/tls/minVersion': value must be one of '1.2', '1.3'"),
    ({"certificates": {"mode": "selfsigned"}},
     "- at '/certificates/mode': value must be one of 'self', 'cert-manager', 'existingSecret'"),
    ({"config": {"hostTopologySpread": {"whenUnsatisfable": "DoNotSchedule"}}},
     "  - at '/config/hostTopologySpread': additional properties 'whenUnsatisfable' not allowed"),
    ({"config": {"lrs-operator": {"operator": {"config": {"hostTopologySpread": {"maxSkew": "two"}}}}}},
     "  - at '/config/lrs-operator/operator/config/hostTopologySpread/maxSkew': got string, want integer"),
])
def test_schema_refuses_bad_values_before_anything_renders(values, error):
    run = render(values, check=False)
    assert isinstance(run, subprocess.CompletedProcess), "rendered despite bad values"
    assert run.returncode == 1 and error in run.stderr, run.stderr


def test_lint_strict_over_the_matrix(tmp_path):
    for name, values in MATRIX.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(values))
        run = helm("lint", "--strict", str(CHART), "--namespace", NAMESPACE, "-f", str(path), check=False)
        assert run.returncode == 0, f"{name}: {run.stdout}{run.stderr}"
        assert "0 chart(s) failed" in run.stdout, run.stdout


def webhooks(objects: list[dict]) -> list[dict]:
    return by_kind_name(objects)[("MutatingWebhookConfiguration", "policylib-webhook")]["webhooks"]


def test_defaults():
    objs = render()
    assert sorted(by_kind_name(objs)) == [
        ("ClusterRole", "policylib-controller"), ("ClusterRole", "policylib-webhook"),
        ("ClusterRoleBinding", "policylib-controller"), ("ClusterRoleBinding", "policylib-webhook"),
        ("ConfigMap", "policylib-config"), ("Deployment", "policylib-controller"), ("Deployment", "policylib-webhook"),
        ("MutatingWebhookConfiguration", "policylib-webhook"),
        ("PodDisruptionBudget", "policylib-controller"), ("PodDisruptionBudget", "policylib-webhook"),
        ("Role", "policylib-controller-certificates"), ("Role", "policylib-controller-lease"),
        ("RoleBinding", "policylib-controller-certificates"), ("RoleBinding", "policylib-controller-lease"),
        ("Service", "policylib-webhook"), ("ServiceAccount", "policylib-controller"),
        ("ServiceAccount", "policylib-webhook")]
    o = by_kind_name(objs)
    hooks = webhooks(objs)
    assert [h["name"] for h in hooks] == ["deployments.policylib.io", "volcano-jobs.policylib.io",
                                          "kubeflow-jobs.policylib.io", "jobsets.policylib.io",
                                          "gang-pods.policylib.io", "trainjobs.policylib.io",
                                          "statefulsets.policylib.io", "leaderworkersets.policylib.io"]
    assert all("caBundle" not in h["clientConfig"] for h in hooks)  # the controller writes it
    controller = o[("Deployment", "policylib-controller")]["spec"]["template"]["spec"]["containers"][0]
    assert controller["args"] == ["controller", "--config=/etc/policylib/config/config.yaml", "--port=8081",
                                  "--certificates=self", "--certificates-ca-duration=43800h",
                                  "--certificates-serving-duration=8760h", "--certificates-propagation=180s"]
    assert controller["image"] == f"policylib-webhook:{chart()['appVersion']}"
    assert load_config(yaml.safe_load(o[("ConfigMap", "policylib-config")]["data"]["config.yaml"])) == load_config(None)


def test_opt_in_mode_selects_only_labelled_namespaces():
    assert webhooks(render(MATRIX["opt-in"])) and webhooks(render())
    for hook in webhooks(render(MATRIX["opt-in"])):
        assert hook["namespaceSelector"]["matchExpressions"][0] == {
            "key": "policylib.io/enabled", "operator": "In", "values": ["true"]}
    for hook in webhooks(render()):
        assert hook["namespaceSelector"] == {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
             "values": ["kube-system", "kube-node-lease", "policylib-system"]},
            {"key": "policylib.io/skip", "operator": "NotIn", "values": ["true"]}]}


def test_every_family_off_leaves_no_webhook_configuration():
    kinds = {o["kind"] for o in render(MATRIX["families-off"])}
    assert "MutatingWebhookConfiguration" not in kinds and "Deployment" in kinds
    one = render({"webhook": {"families": {"volcanoJobs": False, "kubeflowJobs": False, "jobSets": False,
                                           "trainJobs": False, "gangPods": False, "statefulSets": False,
                                           "leaderWorkerSets": False}}})
    assert [h["name"] for h in webhooks(one)] == ["deployments.policylib.io"]


def test_gang_pods_webhook_matches_the_manifests_and_keeps_the_users_object_selector():
    """Rule G17: the chart's gang-pods webhook is the one manifests/base installs (Pods labelled
    policylib.io/scheduling-group, CREATE, failurePolicy Fail), and the user's objectSelector still applies."""
    base = {h["name"]: h for h in yaml.safe_load((ROOT / "manifests/base/mutatingwebhookconfiguration.yaml")
                                                 .read_text())["webhooks"]}["gang-pods.policylib.io"]
    hook = {h["name"]: h for h in webhooks(render())}["gang-pods.policylib.io"]
    for key in ("rules", "failurePolicy", "sideEffects", "timeoutSeconds", "objectSelector", "reinvocationPolicy"):
        assert hook[key] == base[key], key
    custom = {h["name"]: h for h in webhooks(render({"webhook": {
        "gangPodsFailurePolicy": "Ignore", "failurePolicy": "Fail",
        "objectSelector": {"matchLabels": {"team": "a"}}}}))}
    assert custom["gang-pods.policylib.io"]["failurePolicy"] == "Ignore"
    assert custom["deployments.policylib.io"]["failurePolicy"] == "Fail"
    skip = {"key": "policylib.io/skip", "operator": "NotIn", "values": ["true"]}   # Helm merges the default in
    assert custom["gang-pods.policylib.io"]["objectSelector"] == {
        "matchLabels": {"team": "a"},
        "matchExpressions": [{"key": "policylib.io/scheduling-group", "operator": "Exists"}, skip]}
    assert custom["deployments.policylib.io"]["objectSelector"] == {"matchLabels": {"team": "a"},
                                                                    "matchExpressions": [skip]}


def test_ha_off_has_no_pod_disruption_budgets():
    objs = by_kind_name(render(MATRIX["ha-off"]))
    assert [k for k in objs if k[0] == "PodDisruptionBudget"] == []
    assert objs[("Deployment", "policylib-webhook")]["spec"]["replicas"] == 1


def test_cert_manager_mode():
    objs = by_kind_name(render(MATRIX["cert-manager"]))
    assert ("Certificate", "policylib-webhook") in objs and ("Issuer", "policylib-webhook-ca") in objs
    assert ("Role", "policylib-controller-certificates") not in objs
    mwc = objs[("MutatingWebhookConfiguration", "policylib-webhook")]
    assert mwc["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": "policylib-system/policylib-webhook"}
    assert "--certificates=self" not in objs[("Deployment", "policylib-controller")]["spec"]["template"]["spec"][
        "containers"][0]["args"]
    own = by_kind_name(render(MATRIX["cert-manager-issuer"]))
    assert own[("Certificate", "policylib-webhook")]["spec"]["issuerRef"] == {"kind": "ClusterIssuer", "name": "corp-ca"}
    assert ("Issuer", "policylib-selfsigned") not in own


def test_existing_secret_mode():
    objs = by_kind_name(render(MATRIX["existing-secret-no-controller"]))
    assert not [k for k in objs if "controller" in k[1]]
    assert all(h["clientConfig"]["caBundle"] == base64.b64encode(b"-----BEGIN CERTIFICATE-----\n").decode()
               for h in objs[("MutatingWebhookConfiguration", "policylib-webhook")]["webhooks"])
    volumes = objs[("Deployment", "policylib-webhook")]["spec"]["template"]["spec"]["volumes"]
    assert {"name": "tls", "secret": {"secretName": "my-tls", "defaultMode": 0o440}} in volumes


def test_the_webhooks_server_settings_and_its_secret_files_mode():
    """The connection and TLS settings as flags (defaults: the server's), the serving key readable by its owner
    (root) and the pod's fsGroup only (0440: the server runs as 65532 in that group); a client CA only when
    webhook.tls.clientCASecret names one, mounted the same way."""
    def pod(values: dict) -> dict:
        return by_kind_name(render(values))[("Deployment", "policylib-webhook")]["spec"]["template"]["spec"]

    default = pod({})
    (container,) = default["containers"]
    assert container["args"] == ["serve", "--config=/etc/policylib/config/config.yaml", "--cert-dir=/etc/policylib/tls",
                                 "--port=8443", "--workers=2", "--max-connections=1000", "--first-request-timeout=5",
                                 "--tls-min-version=1.2", "--graceful-timeout=20"]
    assert default["securityContext"]["fsGroup"] == default["securityContext"]["runAsGroup"] == 65532
    volumes = {v["name"]: v for v in default["volumes"]}
    assert volumes["tls"]["secret"]["defaultMode"] == 0o440 and "client-ca" not in volumes
    hardened = pod(MATRIX["hardened"])
    (container,) = hardened["containers"]
    assert container["args"][5:9] == ["--max-connections=500", "--first-request-timeout=3", "--tls-min-version=1.3",
                                      "--client-ca=/etc/policylib/client-ca/ca.crt"]
    assert {"name": "client-ca", "mountPath": "/etc/policylib/client-ca", "readOnly": True} in container["volumeMounts"]
    assert {"name": "client-ca", "secret": {"secretName": "apiserver-client-ca", "defaultMode": 0o440,
                                            "items": [{"key": "ca.crt", "path": "ca.crt"}]}} in hardened["volumes"]


@pytest.mark.parametrize("values, message", [
    ({"controller": {"enabled": False}}, "certificates.mode self needs controller.enabled"),
    ({"certificates": {"mode": "existingSecret"}}, "certificates.existingSecret.name is required"),
])
def test_inconsistent_values_fail_with_a_reason(values, message):
    run = render(values, check=False)
    assert isinstance(run, subprocess.CompletedProcess) and message in run.stderr, run


def test_config_renders_verbatim_and_a_change_changes_the_checksum():
    for name in ("config-and-image", "helm-nesting"):
        objs = by_kind_name(render(MATRIX[name]))
        stored = yaml.safe_load(objs[("ConfigMap", "policylib-config")]["data"]["config.yaml"])
        assert stored == MATRIX[name]["config"]
        assert load_config(stored).hostTopologySpread.whenUnsatisfiable == "DoNotSchedule"

    def checksums(values):
        o = by_kind_name(render(values))
        return {d: o[("Deployment", d)]["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
                for d in ("policylib-webhook", "policylib-controller")}

    before, after = checksums({}), checksums(MATRIX["helm-nesting"])
    assert before["policylib-webhook"] == before["policylib-controller"]
    assert after["policylib-webhook"] != before["policylib-webhook"]
    assert checksums({"webhook": {"replicas": 3}}) == before


def test_image_lease_and_webhook_settings():
    objs = by_kind_name(render(MATRIX["config-and-image"]))
    pod = objs[("Deployment", "policylib-webhook")]["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "registry.example.com/policylib-webhook@sha256:" + "a" * 64
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    lease = objs[("Role", "policylib-controller-lease")]["rules"][1]
    assert lease["resourceNames"] == ["my-lease"]
    for hook in objs[("MutatingWebhookConfiguration", "policylib-webhook")]["webhooks"]:
        assert (hook["failurePolicy"], hook["timeoutSeconds"]) == ("Fail", 5)
        assert hook["matchConditions"] == [{"name": "not-dry-run", "expression": "true"}]


def test_monitoring_objects():
    objs = by_kind_name(render(MATRIX["monitoring"]))
    rule = objs[("PrometheusRule", "policylib")]
    component = yaml.safe_load(RULE_COMPONENT.read_text())
    assert rule["spec"] == component["spec"]      # one set of alerts, two install paths
    dashboard = json.loads(objs[("ConfigMap", "policylib-dashboard")]["data"]["policylib.json"])
    assert objs[("ConfigMap", "policylib-dashboard")]["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["uid"] == "policylib" and len(dashboard["panels"]) == 10
    assert objs[("ServiceMonitor", "policylib-webhook")]["spec"]["endpoints"][0]["tlsConfig"]["ca"] == {
        "secret": {"name": "policylib-webhook-tls", "key": "ca.crt"}}
    assert ("ServiceMonitor", "policylib-controller") in objs and ("NetworkPolicy", "policylib-webhook") in objs
    tuned = by_kind_name(render({"prometheusRule": {"enabled": True, "certificateExpiryDays": 30,
                                                    "latencySeconds": 0.5}}))[("PrometheusRule", "policylib")]
    exprs = [r["expr"] for g in tuned["spec"]["groups"] for r in g["rules"]]
    assert sum("< 30 * 86400" in e for e in exprs) == 2 and not any("< 14 * 86400" in e for e in exprs)
    assert any("[5m]))) > 0.5" in e for e in exprs)


#: Configs the CLI accepts (True) or refuses (False); the chart's schema must say the same of `config:`.
CONFIG_SAMPLES = [
    ({}, True),
    ({"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule", "maxSkew": 2}}, True),
    ({"hostTopologySpread": {"whenUnsatisfable": "DoNotSchedule"}}, False),
    ({"hostTopologySpread": {"whenUnsatisfiable": "Never"}}, False),
    ({"hostTopologySpread": {"maxSkew": "two"}}, False),
    ({"zoneTopologySpread": {"enabled": False}}, True),
    ({"volcano": {"partitionSize": 4}}, True),
    ({"gang": {"method": "podgroup", "scheduler": "scheduler-plugins"}}, True),
    ({"gang": {"method": "pods"}}, False),
    ({"webhook": {"failureMode": "closed"}}, True),
    ({"controller": {"maxConcurrentRollouts": 5, "leaseName": "x"}}, True),
    ({"hostTopologySpreads": {}}, False),
    ({"lrs-operator": {"operator": {"config": {"hostTopologySpread": {"maxSkew": 2}}}}}, True),
    ({"lrs-operator": {"operator": {"config": {"hostTopologySpread": {"maxSkew": "two"}}}}}, False),
]


def _cli_accepts(config: dict) -> bool:
    try:
        load_config(config)
    except policylib.PolicylibError:
        return False
    return True


@pytest.mark.parametrize("config, accepted", CONFIG_SAMPLES)
def test_config_schema_and_cli_agree(config, accepted):
    """values.schema.json's `config` is the CLI's one config schema (policylib.config.config_schema)."""
    assert _cli_accepts(config) is accepted
    schema = json.loads((CHART / "values.schema.json").read_text())
    valid = jsonschema.Draft7Validator(schema).is_valid({"config": config})
    assert valid is accepted
    run = render({"config": config}, check=False)
    assert isinstance(run, list) is accepted, run


# --- rules across settings (rule C8): refused by helm before anything renders ------------------------------

def _cross_key_cases() -> list:
    from policylib.config import GANG_COMBINATIONS

    from .test_config_combinations import _accepted_with
    cases = []
    for c in GANG_COMBINATIONS:
        label = f"{c.rule}-{c.key}-when-" + "-".join(f"{k}={vs[0]}" for k, vs in c.when)
        cases.append(pytest.param({"gang": _accepted_with(c, False)}, False, id=f"{label}-refused"))
        cases.append(pytest.param({"gang": _accepted_with(c, True)}, True, id=f"{label}-accepted"))
    same = {"zoneTopologySpread": {"topologyKey": "example.com/rack"},
            "hostTopologySpread": {"topologyKey": "example.com/rack"}}
    cases += [
        pytest.param({"gang": {"method": "workload"}}, False, id="workload-on-the-default-scheduler"),
        pytest.param({"gang": {"method": "workload", "scheduler": "kube-scheduler"}}, True, id="workload-on-kube-scheduler"),
        pytest.param({"volcano": {"partitionSize": 2, "networkTopology": {"mode": "soft"}}}, False, id="V5-refused"),
        pytest.param({"volcano": {"networkTopology": {"mode": "soft"}}}, True, id="V5-accepted"),
        pytest.param({"volcano": {"networkTopology": {"highestTierAllowed": 1, "highestTierName": "x"}}}, False,
                     id="V4-exclusive-refused"),
        pytest.param({"volcano": {"networkTopology": {"mode": "hard"}}}, False, id="V4-no-tier-refused"),
        pytest.param({"volcano": {"networkTopology": {"highestTierName": "x"}}}, True, id="V4-accepted"),
        pytest.param({"volcano": {"partitionSize": 2, "version": "v1.14.2", "networkTopology": {"highestTierName": "x"}}},
                     False, id="V20-refused"),
        pytest.param({"volcano": {"partitionSize": 2, "version": "v1.15.0", "networkTopology": {"highestTierName": "x"}}},
                     True, id="V20-accepted"),
        pytest.param({"hostTopologySpread": {"topologyKey": "topology.kubernetes.io/zone"}}, False,
                     id="host-key-is-the-zone-default-refused"),
        pytest.param({"zoneTopologySpread": {"topologyKey": "kubernetes.io/hostname"}}, False,
                     id="zone-key-is-the-host-default-refused"),
        pytest.param({"zoneTopologySpread": {"topologyKey": "kubernetes.io/hostname", "enabled": False}}, True,
                     id="same-key-zone-off-accepted"),
        pytest.param(same, False, id="two-keys-given-alike-refused-by-the-templates"),
        pytest.param({**same, "hostTopologySpread": {"topologyKey": "example.com/rack", "enabled": False}}, True,
                     id="two-keys-given-alike-host-off-accepted"),
    ]
    return cases


@pytest.mark.parametrize("config, accepted", _cross_key_cases())
def test_rules_across_settings_are_refused_by_helm_as_the_webhook_refuses_them(config, accepted):
    assert _cli_accepts(config) is accepted
    for form in (config, {"lrs-operator": {"operator": {"config": config}}}):
        run = render({"config": form}, check=False)
        assert isinstance(run, list) is accepted, (form, run)
        if not accepted:
            assert run.returncode == 1, run.stderr
            assert ("values don't meet the specifications of the schema" in run.stderr
                    or "hostTopologySpread.topologyKey must differ" in run.stderr), run.stderr


def test_lint_refuses_gang_method_workload_on_the_default_scheduler_and_the_webhook_exits_2_with_it(tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"config": {"gang": {"method": "workload"}}}))
    run = helm("lint", "--strict", str(CHART), "--namespace", NAMESPACE, "-f", str(values), check=False)
    assert run.returncode == 1 and "1 chart(s) failed" in run.stdout + run.stderr, run.stdout + run.stderr
    assert "/config/gang" in run.stdout + run.stderr, run.stdout + run.stderr
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"gang": {"method": "workload"}}))
    start = subprocess.run([sys.executable, "-m", "webhook", "run-local", "--config", str(config), "--cert-dir",
                            str(tmp_path / "certs")], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert start.returncode == 2 and "gang.method 'workload' is not supported on scheduler 'ack'" in start.stderr


# --- RBAC: exactly the calls the controller makes (docs/rbac.md) ---------------------------------------------

CONTROLLER = ("ServiceAccount", NAMESPACE, "policylib-controller")
ANY = "*"   # a call across namespaces (a list or watch of the whole cluster), or in any namespace its scope holds


def bound_rules(objs: list[dict], subject: tuple[str, str, str]) -> list[tuple[str | None, dict]]:
    """(the namespace a rule holds in, None: every one; the rule) for every rule bound to ``subject``."""
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o.get("rules") or []
             for o in objs if o["kind"] in ("Role", "ClusterRole")}
    out = []
    for b in objs:
        if b["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any((s["kind"], s.get("namespace"), s["name"]) == subject for s in b["subjects"]):
            continue
        where = b["metadata"].get("namespace") if b["kind"] == "RoleBinding" else None
        ref = b["roleRef"]
        key = (ref["kind"], where if ref["kind"] == "Role" else None, ref["name"])
        out += [(where, rule) for rule in roles[key]]
    return out


def allows(rules: list[tuple[str | None, dict]], verb: str, group: str, resource: str, namespace: str,
           name: str | None = None) -> bool:
    """RBAC's decision (k8s.io/kubernetes plugin/pkg/auth/authorizer/rbac: RuleAllows) for one request;
    ``namespace`` ANY: a request across namespaces, which only a ClusterRoleBinding grants."""
    for where, rule in rules:
        if where is not None and where != namespace:
            continue
        if (group in rule["apiGroups"] or "*" in rule["apiGroups"]) and resource in rule["resources"] \
                and verb in rule["verbs"] and (not rule.get("resourceNames") or name in rule["resourceNames"]):
            return True
    return False


def controller_calls(config: dict, certificates: str, release: str = NAMESPACE,
                     served: tuple[str, ...] = (ANY,)) -> set[tuple[str, str, str, str, str | None]]:
    """(verb, group, resource, namespace, name) of every call the controller makes for ``config``: lists and
    watches of what it follows (webhook/controller/core.py watched_resources and its scope's two, the Pods and
    Nodes of spread-aware scale-down: webhook/controller/podcost.py), its writes in the namespaces it serves (``served``:
    the Deployments' guarded patch and the get after a 409, the PodGroups it creates and patches, the Workloads,
    the Pods' deletion cost, the Events), its Lease, the Events on its own Deployment, and the certificates
    (webhook/controller/certrotator.py)."""
    from policylib.shell import kube
    from webhook.controller import watched_resources
    cfg = load_config(config)
    follows = list(watched_resources(cfg)) + [kube.NAMESPACES, kube.MUTATING_WEBHOOKS]
    if cfg.controller.spreadAwareScaleDown:
        follows += [kube.PODS, kube.NODES]
    calls: set = set()
    for res in follows:
        name = "policylib-webhook" if res.kind == "MutatingWebhookConfiguration" else None
        calls |= {(verb, res.group, res.plural, ANY, name) for verb in ("list", "watch")}
    for ns in served:
        calls |= {("patch", "apps", "deployments", ns, None), ("get", "apps", "deployments", ns, None),
                  ("create", "events.k8s.io", "events", ns, None)}
        if kube.STATEFULSETS in watched_resources(cfg):   # rule A4: written as Deployments are
            calls |= {("patch", "apps", "statefulsets", ns, None), ("get", "apps", "statefulsets", ns, None)}
        for res in watched_resources(cfg):
            if res.kind == "PodGroup" and res.group != "scheduling.k8s.io":   # rule G5, G21: made and kept
                calls |= {(verb, res.group, "podgroups", ns, None) for verb in ("create", "patch", "get")}
            elif res.group == "scheduling.k8s.io":             # rule G18: made; G19: v1beta1's minCount patched
                calls |= {(verb, res.group, res.plural, ns, None) for verb in ("create", "patch")}
        if cfg.controller.spreadAwareScaleDown:
            calls.add(("patch", "", "pods", ns, None))
    calls |= {("create", "coordination.k8s.io", "leases", release, None),
              ("get", "coordination.k8s.io", "leases", release, cfg.controller.leaseName),
              ("update", "coordination.k8s.io", "leases", release, cfg.controller.leaseName),
              ("create", "events.k8s.io", "events", release, None)}
    if certificates == "self":
        calls |= {("create", "", "secrets", release, None)}
        calls |= {(verb, "", "secrets", release, name) for verb in ("get", "update", "delete")
                  for name in ("policylib-webhook-ca", "policylib-webhook-tls")}
        calls |= {(verb, "admissionregistration.k8s.io", "mutatingwebhookconfigurations", None, "policylib-webhook")
                  for verb in ("get", "update")}
    return calls


def _served_namespace(ns: str | None) -> str:
    return "team-a" if ns == ANY else ns or ""


RBAC_CASES = {
    "defaults": ({}, "self", ()),
    "scale-down-off": ({"config": {"controller": {"spreadAwareScaleDown": False}}}, "self", ()),
    "statefulsets-off": ({"config": {"statefulSets": {"enabled": False}}}, "self", ()),
    "namespaced-statefulsets-off": ({"controller": {"rbac": {"namespaces": ["team-a"]}}, "webhook": {"namespaceMode": "opt-in"},
                                     "config": {"statefulSets": {"enabled": False}}}, "self", ("team-a",)),
    "podgroup": ({"config": {"gang": {"method": "podgroup", "scheduler": "scheduler-plugins"}}}, "cert-manager", ()),
    "volcano-nested": ({"config": {"lrs-operator": {"operator": {"config": {
        "gang": {"method": "podgroup", "scheduler": "volcano"}}}}}}, "self", ()),
    "workload": ({"config": {"gang": {"method": "workload", "scheduler": "kube-scheduler"}}}, "self", ()),
    "namespaced": ({"controller": {"rbac": {"namespaces": ["team-a", "team-b"]}},
                    "config": {"gang": {"method": "podgroup", "scheduler": "volcano"}}}, "self", ("team-a", "team-b")),
    "namespaced-scale-down-off": ({"controller": {"rbac": {"namespaces": ["team-a"]}}, "webhook": {"namespaceMode": "opt-in"},
                                   "config": {"controller": {"spreadAwareScaleDown": False}}}, "self", ("team-a",)),
}


@pytest.mark.parametrize("case", sorted(RBAC_CASES))
def test_the_controllers_rbac_grants_exactly_the_calls_it_makes(case):
    """Every call the controller makes for the values' config is allowed, in the namespaces it serves (all, or
    controller.rbac.namespaces), and no rule grants a call it does not make: no pods patch without spread-aware
    scale-down, no PodGroup or Workload verbs without their gang method, no write outside the namespaces named."""
    values, certificates, namespaces = RBAC_CASES[case]
    values = dict(values, certificates={"mode": certificates})
    objs = render(values)
    rules = bound_rules(objs, CONTROLLER)
    config = values.get("config", {})
    if "lrs-operator" in config:
        config = config["lrs-operator"]["operator"]["config"]
    calls = controller_calls(config, certificates, served=namespaces or (ANY,))
    assert sorted(c for c in calls if not allows(rules, *c)) == []
    # and no more: every verb granted on a resource is one of the calls
    granted = {(verb, group, resource, where or ANY)
               for where, rule in rules for group in rule["apiGroups"] for resource in rule["resources"]
               for verb in rule["verbs"]}
    made = {(verb, group, resource, ns if ns in (ANY, NAMESPACE) or not namespaces else ns)
            for verb, group, resource, ns, _ in calls}
    made |= {(verb, group, resource, ANY) for verb, group, resource, ns, _ in calls if ns is None}
    # a get where it lists and watches everything reads nothing more (the reads stay cluster-wide, docs/rbac.md)
    made |= {("get", group, resource, ANY) for verb, group, resource, ns, _ in calls if (verb, ns) == ("list", ANY)}
    assert sorted(g for g in granted if g not in made and (g[0], g[1], g[2], ANY) not in made) == []
    if namespaces:   # writes nowhere else: not in kube-system, not in a namespace not named
        for verb, group, resource, ns, name in calls:
            if ns in namespaces and verb != "get":
                assert not allows(rules, verb, group, resource, "kube-system", name), (verb, resource)
                assert not allows(rules, verb, group, resource, "team-z", name), (verb, resource)
        assert not allows(rules, "patch", "apps", "deployments", ANY)
    pods_patch = allows(rules, "patch", "", "pods", namespaces[0] if namespaces else ANY)
    assert pods_patch is load_config(config).controller.spreadAwareScaleDown


def test_namespaced_rbac_narrows_the_webhooks_to_the_same_namespaces():
    """controller.rbac.namespaces: every webhook's namespaceSelector also requires one of the names (the
    webhook and the controller serve the same namespaces), after the selector namespaceMode or
    webhook.namespaceSelector makes; the release's namespace is refused (never in scope)."""
    named = {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a", "team-b"]}
    values = {"controller": {"rbac": {"namespaces": ["team-a", "team-b"]}}, "webhook": {"namespaceMode": "opt-in"}}
    for hook in webhooks(render(values)):
        assert hook["namespaceSelector"]["matchExpressions"][0]["key"] == "policylib.io/enabled"
        assert hook["namespaceSelector"]["matchExpressions"][-1] == named
    custom = dict(values, webhook={"namespaceSelector": {"matchLabels": {"team": "a"}}})
    for hook in webhooks(render(custom)):
        assert hook["namespaceSelector"] == {"matchLabels": {"team": "a"}, "matchExpressions": [named]}
    for hook in webhooks(render({"controller": {"rbac": {"namespaces": ["team-a", "team-b"]}, "enabled": False},
                                 "certificates": {"mode": "cert-manager"}})):
        assert named not in hook["namespaceSelector"]["matchExpressions"]   # no controller: nothing to confine
    objs = by_kind_name(render(values))
    assert ("ClusterRoleBinding", "policylib-controller") in objs
    run = render({"controller": {"rbac": {"namespaces": ["team-a", NAMESPACE]}}}, check=False)
    assert isinstance(run, subprocess.CompletedProcess) and run.returncode == 1
    assert f'controller.rbac.namespaces: "{NAMESPACE}" is the release\'s namespace, never in scope' in run.stderr
