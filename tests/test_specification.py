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


CITATION = re.compile(r"\b[Rr]ules? ((?:[A-Z]\d+(?:-[A-Z]?\d+)?(?:, | and | or |/)?)+)")


def cited_rules(text: str) -> list[str]:
    """Every rule a text cites: one, a list (with commas, "and", "or"), or a range (expanded)."""
    out = []
    for m in CITATION.finditer(text):
        for first, last in re.findall(r"([A-Z]\d+)(?:-[A-Z]?(\d+))?", m.group(1)):
            out += [f"{first[0]}{n}" for n in range(int(first[1:]), int(last) + 1)] if last else [first]
    return out


def test_rules_cited_in_code_tests_and_charts_exist():
    """Rules renumbered when branches merge (W5 became W7, C8 became C9) leave citations that name another rule
    or none: every rule cited outside the docs' pages (which tests/test_docs.py checks) is one the specification has."""
    spec = {m["rule"] for m in rows()}
    assert cited_rules("rules W5, W6 and C8-C10; rule S22") == ["W5", "W6", "C8", "C9", "C10", "S22"]
    files = [p for top in ("policylib", "webhook", "tools", "bench", "tests", "charts", "manifests")
             for p in sorted((ROOT / top).rglob("*")) if p.suffix in (".py", ".yaml", ".tpl", ".txt", ".json")]
    files += [ROOT / "CHANGELOG.md", ROOT / "README.md"]
    citations = [(p, rule) for p in files for rule in cited_rules(p.read_text(encoding="utf-8"))]
    assert len(citations) > 300          # the pattern finds the project's citations
    missing = sorted({f"{p.relative_to(ROOT)}: {rule}" for p, rule in citations if rule not in spec})
    assert missing == []
