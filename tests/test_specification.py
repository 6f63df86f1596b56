"""docs/specification.md cannot rot: every rule names a function that exists and cites the rule in its
docstring, and a test that exists."""
import ast
import importlib
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "docs" / "specification.md"
ROW = re.compile(r"^\| (?P<rule>[A-Z]\d+) \| (?P<text>.+?) \| `(?P<function>[\w.]+)` \| `(?P<test>[\w/.]+::\w+)` \|$")


def rows():
    lines = [line for line in SPEC.read_text(encoding="utf-8").splitlines() if re.match(r"^\| [A-Z]\d+ \|", line)]
    return [ROW.match(line) for line in lines]


def resolve(dotted: str):
    """The object a ``module.attribute`` name points at: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(dotted)


@cache
def functions_in(path: str) -> set[str]:
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}


def test_every_rule_row_is_well_formed_and_numbered_once():
    lines = [line for line in SPEC.read_text(encoding="utf-8").splitlines() if re.match(r"^\| [A-Z]\d+ \|", line)]
    assert lines and not [line for line in lines if not ROW.match(line)]
    found = rows()
    ids = [m["rule"] for m in found]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


@pytest.mark.parametrize("row", rows(), ids=lambda m: m["rule"] if m else "?")
def test_rule_points_at_a_function_that_cites_it_and_a_test_that_exists(row):
    function = resolve(row["function"])
    doc = function.__doc__ or ""
    cited = {f"{letter}{n}" for letter, first, last in re.findall(r"\b([A-Z])(\d+)-\1?(\d+)\b", doc)
             for n in range(int(first), int(last) + 1)} | set(re.findall(r"\b[A-Z]\d+\b", doc))
    assert row["rule"] in cited, f"{row['function']}'s docstring does not cite rule {row['rule']}"
    path, test = row["test"].split("::")
    assert test in functions_in(path), f"{row['test']} does not exist"


def test_docstrings_cite_no_document_outside_the_repository():
    offenders = []
    for path in sorted((ROOT / "policylib").rglob("*.py")) + sorted((ROOT / "webhook").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node) or ""
                if re.search(r"\bseed 00\d\b|\bseeds?\b.*\"", doc, re.IGNORECASE):
                    offenders.append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 1)}")
    assert not offenders, offenders
