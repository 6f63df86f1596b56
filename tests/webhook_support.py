"""Shared builders for the webhook tests: real AdmissionReview JSON from webhook/samples."""
from __future__ import annotations

import base64
import copy
import json
from pathlib import Path

import jsonpatch

SAMPLES = Path(__file__).resolve().parent.parent / "webhook" / "samples"
SAMPLE_NAMES = sorted(p.name for p in SAMPLES.glob("*.json"))
SVC_HOST = "policylib-webhook.policylib-system.svc"


def sample(name: str) -> dict:
    return json.loads((SAMPLES / name).read_text())


def review_of(obj: dict | None, operation: str = "CREATE", old: dict | None = None, uid: str = "uid-1",
              namespace: str | None = None, dry_run: bool = False) -> dict:
    """An admission.k8s.io/v1 AdmissionReview for ``obj`` (kind taken from its apiVersion/kind)."""
    source = obj or old or {"apiVersion": "v1", "kind": "ConfigMap"}
    group, _, version = source["apiVersion"].rpartition("/")
    meta = source.get("metadata") or {}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": group, "version": version, "kind": source["kind"]},
        "resource": {"group": group, "version": version, "resource": source["kind"].lower() + "s"},
        "name": meta.get("name"), "namespace": namespace or meta.get("namespace"), "operation": operation,
        "userInfo": {"username": "tester"}, "object": copy.deepcopy(obj), "oldObject": copy.deepcopy(old),
        "dryRun": dry_run}}


def patch_of(response: dict) -> list[dict]:
    """The decoded JSON patch of an AdmissionReview response (``[]`` when there is none)."""
    if "patch" not in response:
        assert "patchType" not in response
        return []
    assert response["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(response["patch"]))


def patched(obj: dict, response: dict) -> dict:
    """``obj`` with the response's patch applied by the jsonpatch library."""
    return jsonpatch.apply_patch(obj, patch_of(response))
