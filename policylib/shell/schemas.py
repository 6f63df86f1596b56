"""The Kubernetes OpenAPI schemas of the built-in kinds, as the package ``kubernetes-validate`` ships
them (the same schemas tests/test_manifests.py validates the install manifests against), read from its
package data: the strict JSON schema of one kind and the ``_definitions.json`` its ``$ref``s point into.
No network. :func:`policylib.notices.unknown_fields` walks them (rule D2).
"""
from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources
from typing import Any

from kubernetes_validate import utils


def kubernetes_version() -> str:
    """The newest Kubernetes version whose schemas are installed (``1.37.0``)."""
    return str(utils.latest_version())


def schema_version(minor: int | None) -> str:
    """The installed schemas of Kubernetes 1.``minor`` (``1.36.0``), or the newest when that minor's are not
    installed (or ``minor`` is None)."""
    wanted = f"1.{minor}.0"
    return wanted if minor is not None and wanted in utils.all_versions() else kubernetes_version()


@cache
def _read(name: str, version: str | None = None) -> dict[str, Any] | None:
    ref = resources.files("kubernetes_validate").joinpath(
        f"kubernetes-json-schema/v{version or kubernetes_version()}-local-strict/{name}")
    try:
        data = json.loads(ref.read_text(encoding="utf-8"))
    except (FileNotFoundError, OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def definitions(version: str | None = None) -> dict[str, Any]:
    return _read("_definitions.json", version) or {}


def kind_schema(kind: str, api_version: str, version: str | None = None) -> dict[str, Any] | None:
    """The strict schema of ``kind`` in ``api_version`` (of Kubernetes ``version``, default the newest
    installed), or None when it is not a built-in kind (a custom resource: TFJob, a Volcano Job) of that
    Kubernetes version."""
    group, _, version_name = api_version.rpartition("/")
    file_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)   # apps/v1 -> apps-v1
    schema = _read(f"{kind.lower()}-{file_version}.json", version)
    if schema is None:
        return None
    gvks = schema.get("x-kubernetes-group-version-kind") or []
    if not any(isinstance(g, dict) and (g.get("group") or "") == group and g.get("version") == version_name
               and g.get("kind") == kind for g in gvks):
        return None   # another API group that shortens to the same file name (scheduling.x-k8s.io)
    return schema
