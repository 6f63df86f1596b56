"""The API server's topologySpreadConstraints rules, ported from kubernetes
pkg/apis/core/validation/validation.go (validateTopologySpreadConstraints)."""
import pytest

from policylib import validate_topology_spread_constraints as validate
from policylib.labels import label_value_errors, qualified_name_errors

P = "spec.template.spec.topologySpreadConstraints"


def c(**over):
    base = {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}}}
    base.update(over)
    return {k: v for k, v in base.items() if v is not None}


def paths(errors):
    return [e.field for e in errors]


def test_valid_constraints_have_no_errors():
    assert validate([c(minDomains=3, nodeTaintsPolicy="Honor", nodeAffinityPolicy="Ignore",
                       matchLabelKeys=["pod-template-hash"]),
                     c(topologyKey="topology.kubernetes.io/zone", whenUnsatisfiable="ScheduleAnyway")]) == []
    assert validate(None) == [] and validate([]) == []


@pytest.mark.parametrize("constraint,path,fragment", [
    (c(maxSkew=0), f"{P}[0].maxSkew", "must be greater than zero"),
    (c(maxSkew=-1), f"{P}[0].maxSkew", "must be greater than zero"),
    (c(topologyKey=""), f"{P}[0].topologyKey", "can not be empty"),
    (c(whenUnsatisfiable="Sometimes"), f"{P}[0].whenUnsatisfiable", "Unsupported value"),
    (c(minDomains=0), f"{P}[0].minDomains", "must be greater than zero"),
    (c(minDomains=3, whenUnsatisfiable="ScheduleAnyway"), f"{P}[0].minDomains",
     "can only use minDomains if whenUnsatisfiable=DoNotSchedule, not ScheduleAnyway"),
    (c(nodeTaintsPolicy="Always"), f"{P}[0].nodeTaintsPolicy", '"Honor", "Ignore"'),
    (c(nodeAffinityPolicy="honor"), f"{P}[0].nodeAffinityPolicy", '"Honor", "Ignore"'),
    (c(matchLabelKeys=["pod-template-hash"], labelSelector=None), f"{P}[0].matchLabelKeys",
     "must not be specified when labelSelector is not set"),
    (c(matchLabelKeys=["app"]), f"{P}[0].matchLabelKeys[0]", "exists in both matchLabelKeys and labelSelector"),
    (c(matchLabelKeys=["bad key"]), f"{P}[0].matchLabelKeys[0]", "name part must consist"),
    (c(labelSelector={"matchExpressions": [{"key": "app", "operator": "In"}]}),
     f"{P}[0].labelSelector.matchExpressions[0].values", "must be specified"),
    (c(labelSelector={"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["x"]}]}),
     f"{P}[0].labelSelector.matchExpressions[0].values", "may not be specified"),
    (c(labelSelector={"matchExpressions": [{"key": "app", "operator": "Has"}]}),
     f"{P}[0].labelSelector.matchExpressions[0].operator", "not a valid selector operator"),
    (c(labelSelector={"matchLabels": {"app": "no spaces"}}), f"{P}[0].labelSelector.matchLabels", "value"),
])
def test_each_rule_reports_its_field_path(constraint, path, fragment):
    errors = validate([constraint])
    assert path in paths(errors)
    assert any(fragment in e.message for e in errors if e.field == path)


def test_duplicate_topology_key_and_when_unsatisfiable_pair():
    errors = validate([c(), c(maxSkew=2)])
    assert paths(errors) == [f"{P}[0].{{topologyKey, whenUnsatisfiable}}"]
    assert 'Duplicate value: "{kubernetes.io/hostname, DoNotSchedule}"' in errors[0].message
    assert validate([c(), c(whenUnsatisfiable="ScheduleAnyway")]) == []


def test_errors_are_collected_not_raised_one_at_a_time():
    errors = validate([c(maxSkew=0, topologyKey="", whenUnsatisfiable="x", minDomains=0)])
    assert set(paths(errors)) == {f"{P}[0].maxSkew", f"{P}[0].topologyKey", f"{P}[0].whenUnsatisfiable",
                                  f"{P}[0].minDomains"}


@pytest.mark.parametrize("key,ok", [
    ("pod-template-hash", True), ("example.com/rack", True), ("a", True), ("A_b.c-d", True),
    ("", False), ("-a", False), ("a/", False), ("/a", False), ("Example.com/a", False),
    ("a/b/c", False), ("x" * 63, True), ("x" * 64, False), ("a" * 254 + "/b", False),
])
def test_qualified_names(key, ok):
    assert (qualified_name_errors(key) == []) is ok


@pytest.mark.parametrize("value,ok", [("", True), ("v1.2_3-x", True), ("-x", False), ("x" * 64, False),
                                      ("a b", False)])
def test_label_values(value, ok):
    assert (label_value_errors(value) == []) is ok
