"""The API's names and the install's well-known values are defined once, in policylib.constants: a literal of
one of them anywhere else in policylib or webhook is a second definition, and the two drift apart.

Allowed elsewhere: docstrings (they explain; they decide nothing). tests/, bench/ and e2e/ write the literals on
purpose: they are the independent statement of what the API server and the install use."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import policylib.constants as constants

ROOT = Path(__file__).resolve().parents[1]
HOME = ROOT / "policylib" / "constants.py"

#: Values too short or too common to be told apart inside a longer string (a group, "apps", an address):
#: a string constant equal to one of these is a second definition; one containing it may be other text.
EXACT = {v for k, v in vars(constants).items()
         if k.endswith("_GROUP") or k in ("ANY_ADDRESS", "LOOPBACK_ADDRESS", "VOLCANO_DOMAIN", "CONFIG_KEY",
                                            "VOLCANO_VERSION")}
#: API versions, label keys, the taint and the namespace: found inside any string (a message, an f-string part).
ANYWHERE = {v for k, v in vars(constants).items()
            if isinstance(v, str) and (k.endswith(("_API_VERSION", "_LABEL", "_TAINT", "_NAME")) or k in (
                "INSTALL_NAMESPACE", "POD_TEMPLATE_HASH", "CONFIG_MAP"))}
NUMBERS = {constants.WEBHOOK_PORT, constants.CONTROLLER_PORT}


def _token(value: str) -> re.Pattern[str]:
    return re.compile(r"(?<![\w./-])" + re.escape(value) + r"(?![\w/-]|\.\w)")


TOKENS = [(v, _token(v)) for v in sorted(ANYWHERE)]


def docstrings(tree: ast.AST) -> set[int]:
    """The ids of every docstring's Constant node."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                found.add(id(first.value))
    return found


def literals(source: str) -> list[tuple[int, object]]:
    """(line, value) of every literal of a guarded value in ``source``, docstrings left out."""
    tree = ast.parse(source)
    skip = docstrings(tree)
    out: list[tuple[int, object]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or id(node) in skip or isinstance(node.value, bool):
            continue
        value = node.value
        if isinstance(value, int) and value in NUMBERS:
            out.append((node.lineno, value))
        elif isinstance(value, str):
            if value in EXACT:
                out.append((node.lineno, value))
            out += [(node.lineno, v) for v, pattern in TOKENS if pattern.search(value)]
    return out


def test_the_guard_knows_what_it_guards():
    assert {"kubernetes.io/hostname", "topology.kubernetes.io/zone", "policylib-system", "scheduling.k8s.io/v1alpha2",
            "scheduling.volcano.sh/v1beta1", "scheduling.sigs.k8s.io/v1alpha1", "pod-template-hash"} <= ANYWHERE
    assert {"kubeflow.org", "scheduling.k8s.io", "0.0.0.0"} <= EXACT
    assert {"policylib-webhook", "policylib-controller", "policylib-config", "events.k8s.io/v1",
            "admission.k8s.io/v1", "admissionregistration.k8s.io/v1"} <= ANYWHERE
    assert {"127.0.0.1", "config.yaml", "v1.15.1", "events.k8s.io", "admissionregistration.k8s.io"} <= EXACT
    assert {8443, 8081} == NUMBERS


def test_the_guard_catches_a_second_definition_and_leaves_docstrings():
    source = ('"""Reads kubernetes.io/hostname."""\n'
              'ZONE = "topology.kubernetes.io/zone"\n'
              'def f():\n    """policylib-system."""\n    return f"in {x} (namespace policylib-system)"\n'
              'GROUP = "kubeflow.org"\nPORT = 8443\nKEY = "scheduling.k8s.io/group-name"\nNAME = "policylib-systemd"\n')
    assert sorted(literals(source), key=str) == sorted(
        [(2, "topology.kubernetes.io/zone"), (5, "policylib-system"), (6, "kubeflow.org"), (7, 8443)], key=str)


def test_no_module_but_the_constants_writes_an_api_name_or_a_well_known_value():
    found = []
    for path in sorted(p for pkg in ("policylib", "webhook") for p in (ROOT / pkg).rglob("*.py")):
        if path == HOME:
            continue
        found += [f"{path.relative_to(ROOT)}:{line}: {value!r}" for line, value in literals(path.read_text("utf-8"))]
    assert found == []
