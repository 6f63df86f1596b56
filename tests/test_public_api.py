"""The public API and its promise (docs/library.md#versioning-and-deprecation): the names are exactly the
``__all__`` of the public modules, docs/library.md lists each with its recorded signature and an example,
and a name that disappears or changes its signature fails here until CHANGELOG.md names it and the
record (tests/data/public_api.txt) is rewritten on purpose by tools/api_snapshot.py (rule L2)."""
from __future__ import annotations

import importlib.util
import re
import subprocess
import sys

from tests.helpers import REPO


def _tool():
    spec = importlib.util.spec_from_file_location("api_snapshot", REPO / "tools" / "api_snapshot.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


API = _tool()
LIBRARY = (REPO / "docs" / "library.md").read_text(encoding="utf-8")
CHANGELOG = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")


def test_the_public_names_are_the_all_of_the_public_modules_and_each_exists():
    import policylib
    objects = API.public_objects()
    assert len([n for n in objects if n.count(".") == 1]) == len(policylib.__all__) == len(set(policylib.__all__))
    assert {"policylib.mutate", "policylib.plan.plan", "policylib.validation.validate_volcano_job"} <= set(objects)
    # internal packages keep an __all__ for their own modules, and are not part of the promise
    assert not any(n.startswith(("policylib.gang.", "policylib.simulate.")) for n in objects)


def test_every_public_callable_is_annotated():
    """What a downstream mypy needs (py.typed): every parameter and the return of each public function, method
    and constructor has an annotation (an ``__init__`` returns None without one, as mypy reads it)."""
    import inspect
    unannotated = []
    for qualified, obj in API.public_objects().items():
        members = [(qualified, obj)]
        if inspect.isclass(obj):
            members = [(f"{qualified}.__init__", obj.__init__)] if "__init__" in vars(obj) else []
            members += [(f"{qualified}.{n}", m) for n, m in vars(obj).items()
                        if not n.startswith("_") and inspect.isfunction(m)]
        for name, function in members:
            if not callable(function):
                continue
            sig = inspect.signature(function)
            params = [p for p in sig.parameters.values() if p.name not in ("self", "cls")]
            returns = sig.return_annotation is not sig.empty or name.endswith(".__init__")
            if not returns or any(p.annotation is p.empty for p in params):
                unannotated.append(name)
    assert unannotated == []


def test_the_recorded_signatures_are_the_codes_and_every_change_has_a_changelog_entry():
    current, recorded = API.signatures(), API.read_snapshot()
    changed = API.changed_names(recorded, current)
    missing = API.without_entry(changed, CHANGELOG)
    assert missing == [], (f"public API changed without a CHANGELOG.md [Unreleased] entry naming it: {missing}; "
                           "add the entry, then run `python tools/api_snapshot.py`")
    assert changed == [], f"public API changed: {changed}; record it on purpose: `python tools/api_snapshot.py`"


def test_a_disappeared_or_changed_name_needs_an_entry_naming_it():
    before = ["policylib.mutate: function(obj: dict[str, Any]) -> Result",
              "policylib.Result: class(object: dict[str, Any]) -> None",
              "policylib.Result.changed: property -> bool",
              "policylib.plan.plan: function(objects: Iterable[dict[str, Any]]) -> list[Write]"]
    after = ["policylib.mutate: function(obj: dict[str, Any], *, strict: bool = False) -> Result",
             "policylib.Result: class(object: dict[str, Any]) -> None",
             "policylib.plan.plan: function(objects: Iterable[dict[str, Any]]) -> list[Write]",
             "policylib.explain: function(result: Result) -> str"]
    changed = API.changed_names(before, after)
    assert changed == ["policylib.Result.changed", "policylib.explain", "policylib.mutate"]
    changelog = ("# Changelog\n\n## [Unreleased]\n\n### Added\n\n- `policylib.explain(result)`\n\n"
                 "### Changed\n\n- `mutate` takes `strict`\n\n## [0.1.0] - 2026-11-30\n\n- `Result.changed`\n")
    # the entry for Result.changed is in a released section: it does not count
    assert API.without_entry(changed, changelog) == ["policylib.Result.changed"]
    changelog = changelog.replace("`mutate` takes", "`Result.changed` is gone; `mutate` takes")
    assert API.without_entry(changed, changelog) == []
    assert API.changed_names(before, before) == []


def test_the_tool_refuses_to_rewrite_the_record_while_the_code_differs_from_it_check_mode():
    out = subprocess.run([sys.executable, str(REPO / "tools" / "api_snapshot.py"), "--check"],
                         capture_output=True, text=True, timeout=120)
    assert (out.returncode, out.stderr) == (0, "")


def test_library_md_lists_exactly_the_public_names_with_signatures_and_an_example_each():
    sections = API.library_sections(LIBRARY)
    current = API.signatures()
    assert list(sections) == API.top_level(current)
    assert API.with_signatures(LIBRARY, current) == LIBRARY, "docs/library.md's signatures are stale: " \
                                                             "run `python tools/api_snapshot.py`"
    reference = LIBRARY.split("\n## Reference\n", 1)[1]
    bodies = re.split(r"^### `[\w.]+`$", reference, flags=re.M)[1:]
    assert len(bodies) == len(sections)
    assert [name for name, body in zip(sections, bodies, strict=True) if "\n>>> " not in body] == []
