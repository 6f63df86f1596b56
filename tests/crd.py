"""Validate objects against upstream CRD schemas from ../shared/schemas with jsonschema.

The CRD's ``openAPIV3Schema`` is used as JSON Schema, made strict the way the
API server's pruning would surface mistakes: an object schema with
``properties`` and no ``additionalProperties`` or
``x-kubernetes-preserve-unknown-fields`` rejects unknown fields, so a field we
emit with a typo fails instead of being silently pruned.
"""
from __future__ import annotations

import functools

import jsonschema
import pytest
import yaml

from tests.helpers import shared_path


def _strict(node):
    if isinstance(node, dict):
        out = {k: _strict(v) for k, v in node.items()}
        if "properties" in out and "additionalProperties" not in out \
                and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        if out.get("x-kubernetes-int-or-string"):
            out.pop("type", None)
            out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        if out.get("nullable") and "type" in out:
            out["type"] = [out["type"], "null"]
        return out
    if isinstance(node, list):
        return [_strict(v) for v in node]
    return node


@functools.lru_cache(maxsize=None)
def crd_validator(*parts: str, version: str = "v1alpha1") -> jsonschema.Draft7Validator:
    """A validator for one version of the CRD at ``../shared/<parts>``; skips when absent."""
    path = shared_path(*parts)
    if not path.exists():
        pytest.skip(f"{path} not found: the upstream CRD schemas live in ../shared beside the project")
    crd = next(d for d in yaml.safe_load_all(path.read_text()) if d)
    schema = next(v["schema"]["openAPIV3Schema"] for v in crd["spec"]["versions"] if v["name"] == version)
    return jsonschema.Draft7Validator(_strict(schema))


def assert_valid(obj: dict, *parts: str, version: str = "v1alpha1") -> None:
    errors = sorted(crd_validator(*parts, version=version).iter_errors(obj), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in errors[:10])


def file_validator(path, version: str) -> jsonschema.Draft7Validator:
    """A validator for one version of the CRD in the file ``path`` (a Go module's copy, say); skips when absent."""
    if not path.exists():
        pytest.skip(f"{path} not found: the CRD comes from its Go module (go mod download)")
    crd = next(d for d in yaml.safe_load_all(path.read_text()) if d)
    schema = next(v["schema"]["openAPIV3Schema"] for v in crd["spec"]["versions"] if v["name"] == version)
    return jsonschema.Draft7Validator(_strict(schema))
