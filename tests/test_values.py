"""JSON values as keys (policylib.values): equal keys exactly for equal values, so membership is one set lookup."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from policylib.errors import errors_not_in, invalid, required
from policylib.values import json_key

SCALARS = st.one_of(st.integers(-1, 2), st.sampled_from([1.0, 0.0, 2.5]), st.booleans(), st.none(),
                    st.sampled_from(["", "a", "1"]))
JSON = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                    st.dictionaries(st.sampled_from(["a", "b"]), inner, max_size=2)),
                    max_leaves=8)


@settings(max_examples=500, deadline=None)
@given(JSON, JSON)
def test_keys_are_equal_exactly_when_the_values_are(a, b):
    """``==`` decides: 1 == 1.0 == True, maps whatever their order, a list never equal to a map."""
    assert (json_key(a) == json_key(b)) == (a == b)
    assert hash(json_key(a)) == hash(json_key(a))


def test_a_value_too_deep_to_key_equals_nothing_but_is_no_error():
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    assert json_key(deep) != json_key(deep)


FIELD_ERRORS = st.builds(lambda f, v, d: invalid(f, v, d) if d else required(f),
                         st.sampled_from(["spec.a", "spec.b"]), JSON, st.sampled_from(["", "bad", "worse"]))


@settings(max_examples=300, deadline=None)
@given(st.lists(FIELD_ERRORS, max_size=8), st.lists(FIELD_ERRORS, max_size=8))
def test_new_errors_are_those_not_in_the_known_ones_in_order(errors, known):
    assert errors_not_in(errors, known) == [e for e in errors if e not in known]
