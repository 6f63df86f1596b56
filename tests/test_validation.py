"""The API server's topologySpreadConstraints rules, ported from kubernetes
pkg/apis/core/validation/validation.go (validateTopologySpreadConstraints)."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policylib import validate_topology_spread_constraints as validate
from policylib.labels import label_value_errors, qualified_name_errors
from policylib.validation import repeated_pairs

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


DUP = "{topologyKey, whenUnsatisfiable}"


def test_several_duplicates_are_each_reported_on_every_entry_a_later_one_repeats_in_order():
    """Rule K4 as ValidateSpreadConstraintNotRepeat reports it: the error is on each entry whose pair a later entry
    repeats (every occurrence but the last), interleaved in order with the entries' other errors."""
    rack = c(topologyKey="rack")
    errors = validate([c(), rack, c(maxSkew=0), c(whenUnsatisfiable="ScheduleAnyway"), rack, "x", c(),
                       dict(rack, maxSkew=3)])
    assert [(e.field, e.message) for e in errors] == [
        (f"{P}[0].{DUP}", 'Duplicate value: "{kubernetes.io/hostname, DoNotSchedule}"'),
        (f"{P}[1].{DUP}", 'Duplicate value: "{rack, DoNotSchedule}"'),
        (f"{P}[2].maxSkew", "Invalid value: 0: must be greater than zero"),
        (f"{P}[2].{DUP}", 'Duplicate value: "{kubernetes.io/hostname, DoNotSchedule}"'),
        (f"{P}[4].{DUP}", 'Duplicate value: "{rack, DoNotSchedule}"'),
        (f"{P}[5]", 'Invalid value: "x": must be an object'),
    ]


def old_repeated(constraints):
    """Rule K4 as it was written first, comparing each constraint with every later one: the reference."""
    def pair(x):
        return x.get("topologyKey"), x.get("whenUnsatisfiable")
    return {i for i, x in enumerate(constraints) if isinstance(x, dict)
            and any(isinstance(o, dict) and pair(o) == pair(x) for o in constraints[i + 1:])}


_VALUES = st.one_of(st.sampled_from(["a", "b", "DoNotSchedule", "ScheduleAnyway", ""]), st.none(),
                    st.integers(-1, 2), st.booleans(), st.floats(allow_nan=False),
                    st.lists(st.sampled_from(["a", 1]), max_size=2),
                    st.dictionaries(st.sampled_from(["k", "v"]), st.sampled_from([1, 1.0, True, "x"]), max_size=2))
_ENTRIES = st.one_of(st.fixed_dictionaries({}, optional={"topologyKey": _VALUES, "whenUnsatisfiable": _VALUES,
                                                         "maxSkew": st.just(1)}),
                     st.sampled_from(["x", 3, None, []]))


@settings(max_examples=300, deadline=None)
@given(st.lists(_ENTRIES, max_size=12))
def test_duplicates_found_in_one_pass_are_those_the_pairwise_comparison_finds(constraints):
    """The set-based rule K4 finds exactly the entries the pairwise comparison finds, whatever the values (lists,
    maps, numbers equal across types: 1 == 1.0 == True), and reports them in the same place."""
    assert repeated_pairs(constraints) == old_repeated(constraints)
    found = [e.field for e in validate(constraints) if e.field.endswith(DUP)]
    assert found == [f"{P}[{i}].{DUP}" for i in sorted(old_repeated(constraints))]


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
