"""The patch writer (rule P3): the pointers already written are looked up by ancestor in a set, and the patch is
the one the pairwise check wrote, operation for operation (that every patch applies and reproduces the policy's
object is tests/test_properties.py's and the fuzz's)."""
from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from policylib.patch import Draft, _covered, _diff_values, _has, _pointer, diff_owned


def pairwise_covered(ptr: str, emitted: list[str]) -> bool:
    """Whether an operation already written replaces ``ptr`` or an ancestor, by comparing it with every one: the
    reference the set lookup must agree with."""
    return any(ptr == e or ptr.startswith(e + "/") for e in emitted)


def pairwise_diff_owned(original: dict[str, Any], mutated: dict[str, Any], owned: list[tuple[Any, ...]]) -> list[dict]:
    """diff_owned as first written (a list of the pointers written, each new one compared with all of them)."""
    ops: list[dict[str, Any]] = []
    emitted: list[str] = []
    for path in owned:
        a: Any = original
        b: Any = mutated
        for depth, key in enumerate(path):
            a_has, b_has = _has(a, key), _has(b, key)
            if a_has and b_has:
                a, b = a[key], b[key]
                continue
            if a_has or b_has:
                ptr = _pointer(path[:depth + 1])
                if not pairwise_covered(ptr, emitted):
                    ops.append({"op": "add", "path": ptr, "value": b[key]} if b_has else {"op": "remove", "path": ptr})
                    emitted.append(ptr)
            break
        else:
            if a is not b:
                ptr = _pointer(path)
                if not pairwise_covered(ptr, emitted):
                    _diff_values(ptr, a, b, ops)
                    emitted.append(ptr)
    return ops


TOKENS = st.sampled_from(["a", "b", "", "~", "/", "a/b", "~1", "0", "1"])


@settings(max_examples=500, deadline=None)
@given(st.lists(st.lists(TOKENS, max_size=4), max_size=8), st.lists(TOKENS, max_size=5))
def test_a_pointer_is_covered_exactly_when_the_pairwise_check_says_so(written, path):
    emitted = [_pointer(tuple(p)) for p in written]
    ptr = _pointer(tuple(path))
    assert _covered(ptr, set(emitted)) == pairwise_covered(ptr, emitted)


def test_covered_by_itself_an_ancestor_or_the_root_never_by_a_sibling_with_a_common_prefix():
    assert _covered("/spec/tasks/1/policies", {"/spec/tasks/1"})
    assert _covered("/spec/tasks/1", {"/spec/tasks/1"})
    assert _covered("/a", {""})   # the whole document replaced
    assert not _covered("/spec/tasks/10", {"/spec/tasks/1"})
    assert not _covered("/metadata/annotations", {"/metadata/annotations~1x", "/spec"})
    assert _covered("/a~1b/c", {"/a~1b"}) and not _covered("/a~1b", {"/a"})   # an escaped "/" is no boundary


SCALARS = st.one_of(st.integers(-2, 2), st.sampled_from(["x", "y", ""]), st.none(), st.booleans())
KEYS = st.sampled_from(["a", "b", "c/d", "e~f"])
JSON = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                    st.dictionaries(KEYS, inner, max_size=3)), max_leaves=12)
PATHS = st.lists(st.one_of(KEYS, st.integers(0, 2)), min_size=1, max_size=3).map(tuple)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(KEYS, JSON, max_size=4), st.lists(st.tuples(PATHS, JSON), max_size=4),
       st.lists(PATHS, min_size=1, max_size=6))
def test_the_patch_is_the_one_the_pairwise_check_wrote(original, edits, owned):
    """Edits through a Draft at random paths, owned paths that overlap (an ancestor and its descendants, repeats):
    the same operations in the same order as the pairwise check wrote, and the input unchanged."""
    sent = copy.deepcopy(original)
    draft = Draft(original)
    for path, value in edits:
        if isinstance(path[-1], str) and all(isinstance(k, str) for k in path):
            draft.set(path, value)
    ops = diff_owned(original, draft.root, owned)
    assert ops == pairwise_diff_owned(original, draft.root, owned)
    assert original == sent   # the input is never changed
