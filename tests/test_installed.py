"""The CLI reads what is installed: ``--config`` takes a configuration or the chart's values file (rule
C9), and with ``--cluster`` the config the controller reads (rule C10) and the scope its webhook
configuration gives (rules W5, W6)."""
import copy
import io
from pathlib import Path

import pytest
import yaml

from policylib.cli import main
from policylib.config import CHART_CONTROLLER_KEYS, CHART_VALUES_KEYS, CHART_WEBHOOK_KEYS, chart_values_config
from policylib.errors import ConfigError
from policylib.shell.files import load_config_file
from tests.fakeapi import FakeAPI, paged_list
from tests.helpers import deployment, legacy_anti_affinity
from tests.test_scope import MANIFEST

ROOT = Path(__file__).resolve().parent.parent
VALUES = yaml.safe_load((ROOT / "charts/policylib/values.yaml").read_text())


def cli(argv, stdin=""):
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, io.StringIO(stdin), out, err)
    return code, out.getvalue(), err.getvalue()


# --- --config: a configuration or the chart's values (rule C9) ---------------------------------------

def test_the_chart_keys_are_the_charts():
    assert set(VALUES) == CHART_VALUES_KEYS
    assert set(VALUES["controller"]) == CHART_CONTROLLER_KEYS
    assert set(VALUES["webhook"]) == CHART_WEBHOOK_KEYS


@pytest.mark.parametrize("data,expected,values", [
    ({"config": {"hostTopologySpread": {"maxSkew": 2}}, "webhook": {"replicas": 3}},
     {"hostTopologySpread": {"maxSkew": 2}}, True),
    ({"config": None, "image": {"tag": "1"}}, {}, True),
    ({"webhook": {"replicas": 3}, "controller": {"replicas": 2}}, {}, True),     # values without config:
    ({"controller": {"enabled": False}}, {}, True),                               # the chart's controller keys
    ({"controller": {"dryRun": True}}, {"controller": {"dryRun": True}}, False),  # the config's controller keys
    ({"webhook": {"failureMode": "closed"}}, {"webhook": {"failureMode": "closed"}}, False),
    ({"webhook": {"namespaceMode": "opt-in"}}, {}, True),
    ({"hostTopologySpread": {"maxSkew": 2}, "controller": {"dryRun": True}},
     {"hostTopologySpread": {"maxSkew": 2}, "controller": {"dryRun": True}}, False),
    ({"lrs-operator": {"operator": {"config": {}}}}, {"lrs-operator": {"operator": {"config": {}}}}, False),
])
def test_a_values_file_and_a_config_are_told_apart(data, expected, values):
    assert chart_values_config(data) == (expected, values)


@pytest.mark.parametrize("data,message", [
    ({"config": {}, "zoneTopologySpread": {"enabled": False}},
     "zoneTopologySpread: is a configuration key beside the chart values key(s) config: in a chart values file the "
     "settings go under config:, in a configuration file there is no config:"),
    ({"webhook": {"replicas": 2}, "gang": {"enabled": True}},
     "gang: is a configuration key beside the chart values key(s) webhook: in a chart values file the settings go "
     "under config:, in a configuration file there is no webhook:"),
    ({"certificates": {"mode": "self"}, "webhook": {"failureMode": "closed"}},
     "webhook: is a configuration key beside the chart values key(s) certificates: in a chart values file the "
     "settings go under config:, in a configuration file there is no certificates:"),
    ({"controller": {"replicas": 2, "dryRun": True}},
     "controller: mixes the chart's controller keys (replicas) with the configuration's (dryRun): in a chart values "
     "file the configuration's go under config.controller"),
    ({"config": ["a"]}, "config: must be a mapping (the chart's config: section), got list"),
])
def test_a_document_that_is_both_is_refused(data, message):
    with pytest.raises(ConfigError) as e:
        chart_values_config(data)
    assert str(e.value) == message


def test_an_error_in_the_values_config_section_names_its_path(tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"config": {"hostTopologySpread": {"maxSkew": 0}}, "webhook": {"replicas": 2}}))
    with pytest.raises(ConfigError) as e:
        load_config_file(values)
    assert str(e.value).startswith(f"{values}: config.hostTopologySpread.maxSkew: ")


def test_preview_takes_the_charts_values_file(tmp_path):
    values = copy.deepcopy(VALUES)
    values["config"] = {"zoneTopologySpread": {"enabled": False}}
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    (tmp_path / "d.yaml").write_text(yaml.safe_dump(deployment("web", replicas=3)))
    code, out, err = cli(["preview", "--config", str(tmp_path / "values.yaml"), "-f", str(tmp_path / "d.yaml")])
    assert (code, err) == (0, "")
    keys = [c["topologyKey"] for c in yaml.safe_load(out)["spec"]["template"]["spec"]["topologySpreadConstraints"]]
    assert keys == ["kubernetes.io/hostname"]          # the values' config: no zone spread
    code, out, err = cli(["preview", "--config", str(ROOT / "charts/policylib/values.yaml"), "-f",
                          str(tmp_path / "d.yaml")])
    assert code == 0, err


# --- --cluster: the installed config and scope (rules C10, W5, W6) ---------------------------------------

DEPLOYS = "/apis/apps/v1/deployments"


def legacy(name, namespace, labels=None):
    d = deployment(name, namespace=namespace, replicas=4,
                   pod_spec={"containers": [{"name": "a", "image": "x"}], "affinity": legacy_anti_affinity({"app": name})})
    d["metadata"].update(uid=f"uid-{namespace}-{name}", resourceVersion="1", labels=labels or {"app": name})
    d.pop("apiVersion"), d.pop("kind")
    return d


def controller_deployment(namespace, release, configmap="policylib-config"):
    return {"metadata": {"name": "policylib-controller", "namespace": namespace,
                         "labels": {"app.kubernetes.io/name": "policylib-controller",
                                    "app.kubernetes.io/instance": release}},
            "spec": {"template": {"spec": {"volumes": [{"name": "config", "configMap": {"name": configmap}}]}}}}


def install(api, releases, workloads, namespaces, configuration=MANIFEST):
    """Routes for a cluster: ``releases`` {namespace: (release, config)} each with a controller Deployment
    mounting its ConfigMap; the webhook configuration; Namespaces; ``workloads`` Deployments."""
    controllers = [controller_deployment(ns, rel) for ns, (rel, _) in releases.items()]

    def deployments(req):
        selector = req["query"].get("labelSelector")
        if selector is None:
            return paged_list("Deployment", workloads, 500)(req)
        wanted = dict(kv.split("=") for kv in selector.split(","))
        return 200, {"kind": "DeploymentList", "metadata": {"resourceVersion": "5"},
                     "items": [c for c in controllers if wanted.items() <= c["metadata"]["labels"].items()]}
    api.route("GET", DEPLOYS, deployments)
    for ns, (_, config) in releases.items():
        api.route("GET", f"/api/v1/namespaces/{ns}/configmaps/policylib-config",
                  (200, {"metadata": {"name": "policylib-config", "namespace": ns},
                         "data": {"config.yaml": yaml.safe_dump(config)}}))
    if configuration and releases:   # as the chart renders it: the webhooks' Service in the release's namespace
        configuration = copy.deepcopy(configuration)
        for hook in configuration["webhooks"]:
            hook["clientConfig"]["service"]["namespace"] = next(iter(releases))
    api.route("GET", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/policylib-webhook",
              (200, configuration) if configuration else (404, {"kind": "Status", "code": 404}))
    api.route("GET", "/api/v1/namespaces", paged_list("Namespace", namespaces, 500))


def ns(name, **labels):
    return {"metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name, **labels}}}


DRIFT = {"hostTopologySpread": {"reconcileDrift": True}}
WORKLOADS = [legacy("a", "ml"), legacy("b", "optout"), legacy("c", "rel"), legacy("d", "ml", {"policylib.io/skip": "true"})]
NAMESPACES = [ns("ml"), ns("optout", **{"policylib.io/skip": "true"}), ns("rel")]


def test_plan_cluster_uses_the_installed_config_and_the_webhooks_scope(tmp_path):
    with FakeAPI() as api:
        install(api, {"rel": ("policylib", DRIFT)}, WORKLOADS, NAMESPACES)
        code, out, err = cli(["plan", "--cluster", "--kubeconfig", api.kubeconfig(tmp_path / "k"), "-o", "json"])
    assert code == 0, err
    # reconcileDrift from the ConfigMap; not b (opted-out namespace), c (the release's), d (opted-out object)
    assert [(w["namespace"], w["name"], w["rollout"]) for w in yaml.safe_load(out)] == [("ml", "a", True)]
    assert err.splitlines()[:2] == [
        "policylib: config: ConfigMap rel/policylib-config (the installed controller's)",
        "policylib: scope: MutatingWebhookConfiguration policylib-webhook; never namespace(s) rel"]


def test_config_overrides_the_installed_one_and_says_so(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("{}\n")
    with FakeAPI() as api:
        install(api, {"rel": ("policylib", DRIFT)}, WORKLOADS, NAMESPACES)
        code, out, err = cli(["plan", "--cluster", "--config", str(cfg), "--kubeconfig",
                              api.kubeconfig(tmp_path / "k"), "-o", "json"])
    assert code == 0, err
    assert [w["name"] for w in yaml.safe_load(out)] == ["a"]            # no drift: only a's missing record
    assert yaml.safe_load(out)[0]["action"] == "none"
    assert err.splitlines()[0] == f"policylib: config: config file {cfg}"


def test_two_releases_need_release_or_config(tmp_path):
    with FakeAPI() as api:
        install(api, {"rel": ("one", DRIFT), "other": ("two", {})}, WORKLOADS, NAMESPACES)
        kubeconfig = api.kubeconfig(tmp_path / "k")
        code, _, err = cli(["plan", "--cluster", "--kubeconfig", kubeconfig])
        assert code == 2
        assert err == ("policylib: error: more than one installed policylib config (other/policylib-config, "
                       "rel/policylib-config): name one with --release (and -n NAMESPACE), or give --config FILE\n")
        code, out, err = cli(["plan", "--cluster", "--release", "two", "--kubeconfig", kubeconfig, "-o", "json"])
        assert code == 0, err
        assert err.splitlines()[0] == "policylib: config: ConfigMap other/policylib-config (the installed controller's)"
        code, _, err = cli(["plan", "--cluster", "--release", "three", "--kubeconfig", kubeconfig])
        assert (code, err) == (2, "policylib: error: no policylib controller or config of release 'three' found: check "
                                  "the name (helm list -A), or give --config FILE\n")


def test_nothing_installed_plans_nothing_and_says_why(tmp_path):
    """Rule W5 fails closed, for plan as for the controller: without the webhook configuration nothing is in
    scope; the warning says why, the table says there are no writes for that reason (not that all is well)."""
    with FakeAPI() as api:
        install(api, {}, WORKLOADS, NAMESPACES, configuration=None)
        kubeconfig = api.kubeconfig(tmp_path / "k")
        code, out, err = cli(["plan", "--cluster", "--kubeconfig", kubeconfig, "-o", "json"])
        assert (code, yaml.safe_load(out)) == (0, []), err
        assert err.splitlines()[:3] == [
            "policylib: config: the defaults (no policylib controller or config found; give --config FILE to use another)",
            "policylib: scope: no MutatingWebhookConfiguration policylib-webhook is installed",
            "policylib: warning: scope: nothing is acted on: no MutatingWebhookConfiguration policylib-webhook is installed"]
        code, out, err = cli(["plan", "--cluster", "--kubeconfig", kubeconfig])
    assert out == ("no writes: nothing is in the webhook's scope (no MutatingWebhookConfiguration policylib-webhook is "
                   "installed)\n0 Deployments would roll, 0 for legacy anti-affinity\n")


@pytest.mark.parametrize("forbidden_path, why", [
    ("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/policylib-webhook",
     "MutatingWebhookConfiguration policylib-webhook cannot be read (forbidden)"),
    ("/api/v1/namespaces", "Namespaces cannot be listed (forbidden): the selectors of MutatingWebhookConfiguration "
                           "policylib-webhook match their labels"),
])
def test_a_user_who_may_not_read_the_configuration_or_the_namespaces_gets_nothing_in_scope_said(tmp_path,
                                                                                               forbidden_path, why):
    """A developer's role often reads workloads but no admission configuration and no Namespace list: the
    scope cannot be known, so nothing is in it (rule W5), and the warning says why."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(DRIFT))
    forbidden = (403, {"kind": "Status", "code": 403, "reason": "Forbidden", "message": "forbidden"})
    with FakeAPI() as api:
        install(api, {}, WORKLOADS, NAMESPACES)
        api.route("GET", forbidden_path, forbidden)
        code, out, err = cli(["plan", "--cluster", "--config", str(cfg), "--kubeconfig",
                              api.kubeconfig(tmp_path / "k"), "-o", "json"])
    assert (code, yaml.safe_load(out)) == (0, []), err
    assert f"policylib: warning: scope: nothing is acted on: {why}" in err.splitlines()


def test_match_conditions_leave_their_webhooks_objects_out_of_plan_and_check(tmp_path):
    """Rule W5: a webhook with matchConditions adds nothing to the scope: its Deployments are neither planned
    nor checked, and the warning names it."""
    conditional = copy.deepcopy(MANIFEST)
    conditional["webhooks"][0]["matchConditions"] = [{"name": "not-dry-run", "expression": "!request.dryRun"}]
    node = {"metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1", "topology.kubernetes.io/zone": "z1"}},
            "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}}}
    with FakeAPI() as api:
        install(api, {"rel": ("policylib", DRIFT)}, WORKLOADS, NAMESPACES, configuration=conditional)
        api.route("GET", "/api/v1/nodes", paged_list("Node", [node], 500))
        api.route("GET", "/api/v1/pods", paged_list("Pod", [], 500))
        api.route("GET", "/version", (200, {"gitVersion": "v1.33.0"}))
        api.route("GET", "/apis", (200, {"kind": "APIGroupList", "groups": []}))
        kubeconfig = api.kubeconfig(tmp_path / "k")
        code, out, err = cli(["plan", "--cluster", "--kubeconfig", kubeconfig, "-o", "json"])
        assert (code, yaml.safe_load(out)) == (0, []), err
        warning = ("policylib: warning: scope: the objects of MutatingWebhookConfiguration policylib-webhook: "
                   "deployments.policylib.io are not acted on: matchConditions not-dry-run (CEL the API server evaluates")
        assert err.splitlines()[2].startswith(warning)
        code, out, err = cli(["check", "--cluster", "--kubeconfig", kubeconfig, "-o", "json"])
    assert code == 0, err
    assert [line for line in err.splitlines() if line.startswith(warning)]
    # without the Deployment in scope, the drift finding counts none (it named ml/a: the check test above)
    assert not [f for f in yaml.safe_load(out) if "ml/a" in f["message"]]


def test_check_cluster_reads_the_installed_config_and_scope(tmp_path):
    node = {"metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1",
                                                  "topology.kubernetes.io/zone": "z1"}},
            "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}}}
    with FakeAPI() as api:
        install(api, {"rel": ("policylib", DRIFT)}, WORKLOADS, NAMESPACES)
        api.route("GET", "/api/v1/nodes", paged_list("Node", [node], 500))
        api.route("GET", "/api/v1/pods", paged_list("Pod", [], 500))
        api.route("GET", "/version", (200, {"gitVersion": "v1.33.0"}))
        api.route("GET", "/apis", (200, {"kind": "APIGroupList", "groups": []}))
        code, out, err = cli(["check", "--cluster", "--kubeconfig", api.kubeconfig(tmp_path / "k"), "-o", "json"])
    assert code == 0, err
    assert err.splitlines()[0] == "policylib: config: ConfigMap rel/policylib-config (the installed controller's)"
    [drift] = [f["message"] for f in yaml.safe_load(out) if f["key"] == "hostTopologySpread.reconcileDrift"]
    assert drift.startswith("reconcileDrift is on and 1 Deployment would roll, 1 for legacy anti-affinity; "
                            "1 Deployment without policylib's record (admitted while the webhook was unreachable?) "
                            "(ml/a): ")


def test_simulate_cluster_reads_the_installed_config(tmp_path):
    node = {"metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1", "topology.kubernetes.io/zone": "z1"}},
            "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}}}
    (tmp_path / "d.yaml").write_text(yaml.safe_dump(deployment("web", replicas=2)))
    with FakeAPI() as api:
        install(api, {"rel": ("policylib", {"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule",
                                                                   "hardMinReplicas": 2}})}, [], NAMESPACES)
        api.route("GET", "/api/v1/nodes", paged_list("Node", [node], 500))
        api.route("GET", "/api/v1/pods", paged_list("Pod", [], 500))
        api.route("GET", "/version", (200, {"gitVersion": "v1.33.0"}))
        code, out, err = cli(["simulate", "-f", str(tmp_path / "d.yaml"), "--cluster", "--kubeconfig",
                              api.kubeconfig(tmp_path / "k"), "-o", "json"])
    assert err.splitlines()[0] == "policylib: config: ConfigMap rel/policylib-config (the installed controller's)"
    # the installed config enforces the host spread from 2 replicas: one node holds one of them
    assert code == 3, err
    [placement] = yaml.safe_load(out)
    assert (placement["placed"], placement["pending"]) == ({"n1": 1}, 1), placement
