"""The webhook's scope (rules W5, W6): label selectors evaluated as k8s.io/apimachinery's
LabelSelectorAsSelector, and the installed MutatingWebhookConfiguration read as the API server reads it."""
import copy
from pathlib import Path

import pytest
import yaml

from policylib.scope import (
    RESOURCES,
    SelectorError,
    closed_scope,
    default_configuration,
    namespace_labels,
    scope_fields,
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


def test_the_default_configuration_is_the_manifests_selectors():
    shipped = MANIFEST["webhooks"][0]
    default = default_configuration()["webhooks"][0]
    assert default["namespaceSelector"] == shipped["namespaceSelector"]
    assert default["objectSelector"] == shipped["objectSelector"]
    scope = scope_from_configuration(default_configuration("rel"), {"rel"})
    assert scope.excluded_namespaces == {"rel"}
    assert not scope.admits(deployment("d", namespace="rel"), LABELS)
    assert scope.admits(deployment("d", namespace="policylib-system"), LABELS)
    # manifests/base's webhooks cover every kind of RESOURCES (JobSets, TrainJobs, StatefulSets too): so does the default scope.
    for group, kind in sorted(k for k in RESOURCES if k[1] != "Pod"):
        assert scope.admits({"apiVersion": f"{group}/v1", "kind": kind, "metadata": {"name": "j", "namespace": "ml"}},
                            LABELS), kind
    assert scope.admits({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                         "metadata": {"name": "j", "namespace": "ml"}}, LABELS)


@pytest.mark.parametrize("group, kind", sorted(k for k in RESOURCES if k[1] != "Pod"))
def test_a_closed_scope_admits_nothing_and_says_why(group, kind):
    """Rule W5 fails closed: without the configuration (the webhook not installed yet, every family off, a
    renamed one) no kind is in scope, whatever the namespace, and the scope says why."""
    obj = {"apiVersion": f"{group}/v1" if group else "v1", "kind": kind,
           "metadata": {"name": "j", "namespace": "ml"}}
    assert scope_from_configuration(MANIFEST).admits(obj, LABELS)
    closed = closed_scope("no MutatingWebhookConfiguration policylib-webhook is installed", {"rel"})
    assert not closed.admits(obj, LABELS)
    assert closed.stopped == "no MutatingWebhookConfiguration policylib-webhook is installed"
    assert closed.notes() == ["nothing is acted on: no MutatingWebhookConfiguration policylib-webhook is installed"]
    assert closed.excluded_namespaces == {"rel"}


def with_conditions(*hooks: str) -> dict:
    configuration = copy.deepcopy(MANIFEST)
    for hook in configuration["webhooks"]:
        if hook["name"] in hooks:
            hook["matchConditions"] = [{"name": "not-dry-run", "expression": "!request.dryRun"},
                                       {"name": "not-ci", "expression": "request.userInfo.username != 'ci'"}]
    return configuration


def test_a_webhook_with_match_conditions_adds_nothing_to_the_scope_and_is_named():
    """Rule W5: matchConditions are CEL the API server evaluates per request (its user, dry run, authorizer):
    the objects of a webhook that has them are not acted on, the others' are, and the scope says which."""
    scope = scope_from_configuration(with_conditions("deployments.policylib.io"))
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "j", "namespace": "team-a"}}
    assert not scope.admits(deployment("d", namespace="team-a"), LABELS)
    assert scope.admits(job, LABELS)
    assert [h.name for h in scope.skipped] == ["MutatingWebhookConfiguration policylib-webhook: deployments.policylib.io"]
    assert scope.skipped[0].match_conditions == ("not-dry-run", "not-ci")
    assert scope.stopped == ""
    assert scope.notes() == [
        "the objects of MutatingWebhookConfiguration policylib-webhook: deployments.policylib.io are not acted on: "
        "matchConditions not-ci, not-dry-run (CEL the API server evaluates per request: who sends it, a dry run, "
        "an authorizer check; no reading of the object decides them)"]


def test_match_conditions_on_every_webhook_stop_the_scope():
    """The chart's webhook.matchConditions go on every webhook: nothing is acted on, and the scope says why."""
    scope = scope_from_configuration(with_conditions(*(h["name"] for h in MANIFEST["webhooks"])))
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "j", "namespace": "team-a"}}
    assert not scope.admits(job, LABELS) and not scope.admits(deployment("d", namespace="team-a"), LABELS)
    assert scope.stopped == "every webhook of MutatingWebhookConfiguration policylib-webhook has matchConditions"
    [note] = scope.notes()
    assert note.startswith("nothing is acted on: every webhook of MutatingWebhookConfiguration policylib-webhook has "
                           "matchConditions (matchConditions not-ci, not-dry-run (CEL")


def test_a_configuration_without_webhooks_stops_the_scope():
    scope = scope_from_configuration({"metadata": {"name": "policylib-webhook"}, "webhooks": []})
    assert scope.stopped == "MutatingWebhookConfiguration policylib-webhook has no webhooks"


def test_match_conditions_are_part_of_what_the_scope_reads():
    """A change of matchConditions changes the scope (the controller plans every key again); a caBundle does not."""
    assert scope_fields(with_conditions("deployments.policylib.io")) != scope_fields(MANIFEST)
    rotated = copy.deepcopy(MANIFEST)
    rotated["webhooks"][0]["clientConfig"]["caBundle"] = "Zm9v"
    assert scope_fields(rotated) == scope_fields(MANIFEST)


def test_match_conditions_that_are_not_a_list_are_a_clear_error():
    bad = copy.deepcopy(MANIFEST)
    bad["webhooks"][0]["matchConditions"] = {"name": "x"}
    with pytest.raises(SelectorError, match=r"^MutatingWebhookConfiguration policylib-webhook: "
                                            r"deployments.policylib.io.matchConditions: must be a list$"):
        scope_from_configuration(bad)
