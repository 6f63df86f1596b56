"""The webhook's scope (rules W5, W6): label selectors evaluated as k8s.io/apimachinery's
LabelSelectorAsSelector, and the installed MutatingWebhookConfiguration read as the API server reads it."""
import copy
from pathlib import Path

import pytest
import yaml

from policylib.scope import (
    RESOURCES,
    SelectorError,
    default_configuration,
    default_scope,
    namespace_labels,
    scope_from_configuration,
    selector_matches,
)
from tests.helpers import deployment

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = yaml.safe_load((ROOT / "manifests/base/mutatingwebhookconfiguration.yaml").read_text())


# --- selectors: the cases of apimachinery's selector_test.go (TestLabelSelectorAsSelector, TestRequirementMatches)

@pytest.mark.parametrize("selector,labels,matches", [
    (None, {"a": "b"}, False),                                        # nil: Nothing()
    ({}, {}, True),                                                   # empty: Everything()
    ({}, {"a": "b"}, True),
    ({"matchLabels": {"foo": "bar"}}, {"foo": "bar"}, True),
    ({"matchLabels": {"foo": "bar"}}, {"foo": "baz"}, False),
    ({"matchLabels": {"foo": "bar"}}, {}, False),
    ({"matchLabels": {"foo": "bar", "x": "y"}}, {"foo": "bar"}, False),
    ({"matchExpressions": [{"key": "foo", "operator": "In", "values": ["a", "b"]}]}, {"foo": "b"}, True),
    ({"matchExpressions": [{"key": "foo", "operator": "In", "values": ["a", "b"]}]}, {"foo": "c"}, False),
    ({"matchExpressions": [{"key": "foo", "operator": "In", "values": ["a"]}]}, {}, False),
    ({"matchExpressions": [{"key": "foo", "operator": "NotIn", "values": ["a"]}]}, {}, True),   # absent: not in
    ({"matchExpressions": [{"key": "foo", "operator": "NotIn", "values": ["a"]}]}, {"foo": "a"}, False),
    ({"matchExpressions": [{"key": "foo", "operator": "NotIn", "values": ["a"]}]}, {"foo": "b"}, True),
    ({"matchExpressions": [{"key": "foo", "operator": "Exists"}]}, {"foo": ""}, True),
    ({"matchExpressions": [{"key": "foo", "operator": "Exists"}]}, {"bar": "x"}, False),
    ({"matchExpressions": [{"key": "foo", "operator": "DoesNotExist"}]}, {"bar": "x"}, True),
    ({"matchExpressions": [{"key": "foo", "operator": "DoesNotExist"}]}, {"foo": "x"}, False),
    ({"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "Exists"}]}, {"a": "1", "b": "2"}, True),
    ({"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "Exists"}]}, {"a": "1"}, False),
])
def test_selectors_match_as_apimachinery(selector, labels, matches):
    assert selector_matches(selector, labels) is matches


@pytest.mark.parametrize("selector,message", [
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]},
     "s.matchExpressions[0].values: must be specified when operator is In"),
    ({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
     "s.matchExpressions[0].values: may not be specified when operator is Exists"),
    ({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]},
     "s.matchExpressions[0].operator: unsupported value 'Gt': supported values: In, NotIn, Exists, DoesNotExist"),
    ({"matchExpressions": [{"operator": "Exists"}]}, "s.matchExpressions[0].key: required"),
    ({"matchLabels": {"a": 1}}, "s.matchLabels.a: value must be a string, got 1"),
])
def test_a_selector_the_api_server_refuses_is_a_clear_error(selector, message):
    with pytest.raises(SelectorError) as e:
        selector_matches(selector, {}, "s")
    assert str(e.value) == message


# --- the configuration's scope ----------------------------------------------------------------------

LABELS = namespace_labels([
    {"metadata": {"name": "team-a", "labels": {"team": "a"}}},
    {"metadata": {"name": "optout", "labels": {"policylib.io/skip": "true"}}},
    {"metadata": {"name": "optin", "labels": {"policylib.io/enabled": "true"}}},
    {"metadata": {"name": "kube-system"}},
    {"metadata": {"name": "policylib-system"}},
])


def test_namespace_labels_carry_the_name_label_the_api_server_sets():
    assert LABELS["team-a"] == {"kubernetes.io/metadata.name": "team-a", "team": "a"}


def test_the_shipped_manifest_scope_is_opt_out():
    scope = scope_from_configuration(MANIFEST)
    assert scope.excluded_namespaces == {"policylib-system"}        # the webhooks' service namespace (W6)
    assert scope.admits(deployment("d", namespace="team-a"), LABELS)
    assert scope.admits(deployment("d", namespace="never-seen"), LABELS)
    assert not scope.admits(deployment("d", namespace="optout"), LABELS)
    assert not scope.admits(deployment("d", namespace="kube-system"), LABELS)
    assert not scope.admits(deployment("d", namespace="policylib-system"), LABELS)
    skipped = deployment("d", namespace="team-a")
    skipped["metadata"]["labels"] = {"policylib.io/skip": "true"}
    assert not scope.admits(skipped, LABELS)


def test_opt_in_mode_sends_only_labelled_namespaces():
    opt_in = copy.deepcopy(MANIFEST)
    for hook in opt_in["webhooks"]:   # what manifests/components/opt-in-namespaces adds
        hook["namespaceSelector"]["matchExpressions"].insert(
            0, {"key": "policylib.io/enabled", "operator": "In", "values": ["true"]})
    scope = scope_from_configuration(opt_in)
    assert scope.admits(deployment("d", namespace="optin"), LABELS)
    assert not scope.admits(deployment("d", namespace="team-a"), LABELS)


def test_a_kind_no_webhook_receives_is_out_of_scope():
    deployments_off = copy.deepcopy(MANIFEST)
    deployments_off["webhooks"] = [h for h in deployments_off["webhooks"] if not h["name"].startswith("deployments")]
    scope = scope_from_configuration(deployments_off)
    assert not scope.admits(deployment("d", namespace="team-a"), LABELS)
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "j", "namespace": "team-a"}}
    assert scope.admits(job, LABELS)


def test_a_missing_selector_is_the_api_servers_default_everything():
    scope = scope_from_configuration({"metadata": {"name": "x"}, "webhooks": [
        {"name": "d", "rules": MANIFEST["webhooks"][0]["rules"], "clientConfig": {"url": "https://h/mutate"}}]})
    assert scope.excluded_namespaces == frozenset()
    assert scope.admits(deployment("d", namespace="kube-system"), LABELS)


def test_the_release_namespace_is_never_in_scope_whatever_the_selectors():
    everything = {"metadata": {"name": "x"}, "webhooks": [
        {"name": "d", "rules": MANIFEST["webhooks"][0]["rules"], "namespaceSelector": {}, "objectSelector": {}}]}
    scope = scope_from_configuration(everything, {"rel"})
    assert not scope.admits(deployment("d", namespace="rel"), LABELS)
    assert scope.admits(deployment("d", namespace="kube-system"), LABELS)


def test_a_bad_selector_in_the_configuration_names_the_webhook():
    bad = copy.deepcopy(MANIFEST)
    bad["webhooks"][0]["objectSelector"] = {"matchExpressions": [{"key": "k", "operator": "In"}]}
    with pytest.raises(SelectorError, match=r"^MutatingWebhookConfiguration policylib-webhook: "
                                            r"deployments.policylib.io.objectSelector.matchExpressions\[0\].values: "
                                            "must be specified when operator is In$"):
        scope_from_configuration(bad)


def test_the_default_scope_is_the_manifests_selectors():
    shipped = MANIFEST["webhooks"][0]
    default = default_configuration()["webhooks"][0]
    assert default["namespaceSelector"] == shipped["namespaceSelector"]
    assert default["objectSelector"] == shipped["objectSelector"]
    scope = default_scope("rel")
    assert scope.excluded_namespaces == {"rel"}
    assert not scope.admits(deployment("d", namespace="rel"), LABELS)
    assert scope.admits(deployment("d", namespace="policylib-system"), LABELS)


@pytest.mark.parametrize("group, kind", sorted(k for k in RESOURCES if k[1] != "Pod"))
def test_without_a_configuration_every_kind_the_manifests_send_is_in_scope(group, kind):
    """The default scope (no configuration installed: ``check --cluster`` before the install, a controller
    whose configuration is gone) sends the kinds manifests/base sends: a Volcano Job given to ``check -f
    --cluster`` is not dropped because the default left its webhook out."""
    obj = {"apiVersion": f"{group}/v1" if group else "v1", "kind": kind,
           "metadata": {"name": "j", "namespace": "ml"}}
    shipped = scope_from_configuration(MANIFEST)
    assert shipped.admits(obj, LABELS)
    assert default_scope().admits(obj, LABELS)
