"""Reading a live cluster with the ``kubernetes`` client: the CLI's edge, not the policy core.

Only ``policylib plan --cluster`` (and the controller) import this module;
the policies never do. Lists are paginated and read as raw JSON
(``_preload_content=False``) so objects reach the policies exactly as the API
server serves them, with ``apiVersion`` and ``kind`` filled in (list items
omit them).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, Iterator

PAGE = 500


@dataclass(frozen=True)
class Resource:
    """A listable resource: core/apps via typed APIs, CRDs via the custom objects API."""

    group: str
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
HPAS = Resource("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler")
KUBEFLOW_JOBS = (Resource("kubeflow.org", "v1", "tfjobs", "TFJob"),
                 Resource("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob"),
                 Resource("kubeflow.org", "v1", "mpijobs", "MPIJob"))
PODGROUPS = (Resource("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup"),
             Resource("scheduling.sigs.k8s.io", "v1alpha1", "podgroups", "PodGroup"))
SNAPSHOT_RESOURCES = (DEPLOYMENTS, HPAS) + KUBEFLOW_JOBS + PODGROUPS


def api_client(context: str | None = None, kubeconfig: str | None = None):
    """An ApiClient from kubeconfig (``$KUBECONFIG`` read now, ``--context``), or the
    in-cluster service account inside a pod. Each call builds its own configuration."""
    import os

    from kubernetes import client, config
    path = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    first = path.split(os.pathsep)[0]
    if os.path.exists(first):
        return config.new_client_from_config(config_file=first, context=context)
    if context:
        raise config.ConfigException(f"kubeconfig {first} not found (needed for --context {context})")
    cfg = client.Configuration()
    config.load_incluster_config(client_configuration=cfg)
    return client.ApiClient(configuration=cfg)


def _path(res: Resource, namespace: str | None) -> str:
    base = f"/api/{res.version}" if not res.group else f"/apis/{res.group}/{res.version}"
    return f"{base}/namespaces/{namespace}/{res.plural}" if namespace else f"{base}/{res.plural}"


class ApiError(RuntimeError):
    """A non-2xx answer from the API server, with its status and message."""

    def __init__(self, status: int, message: str):
        self.status = status
        super().__init__(f"HTTP {status}: {message}")


def request(api, method: str, path: str, query: list | None = None, body: object = None,
            content_type: str | None = None) -> tuple[int, dict]:
    """One raw API call through the client's configuration (auth, TLS, proxy); JSON in and out."""
    headers = {"Accept": "application/json"}
    if content_type:
        headers["Content-Type"] = content_type
    method, url, headers, body, post = api.param_serialize(method, path, query_params=query or [],
                                                           header_params=headers, body=body,
                                                           auth_settings=["BearerToken"])
    resp = api.call_api(method, url, header_params=headers, body=body, post_params=post)
    resp.read()
    return resp.status, _body(resp.data)


def _body(raw: bytes) -> dict:
    """A JSON answer, or a non-JSON one as ``{"message": text}``: the API server answers a group or
    resource it does not serve (a CRD not installed) with a plain-text ``404 page not found``."""
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except ValueError:
        return {"message": raw.decode("utf-8", "replace").strip()[:1000]}


def get_json(api, path: str, query: list | None = None) -> dict | None:
    """GET ``path``: the body, None on 404, :class:`ApiError` on any other failure."""
    status, data = request(api, "GET", path, query)
    if status == 404:
        return None
    if not 200 <= status < 300:
        raise ApiError(status, data.get("message", "") if isinstance(data, dict) else str(data))
    return data


def list_objects(api, res: Resource, namespace: str | None = None) -> Iterator[list[dict]]:
    """Pages of ``res`` objects as dicts. A resource the cluster does not serve (404) yields nothing."""
    token = None
    while True:
        query = [("limit", PAGE)] + ([("continue", token)] if token else [])
        resp = get_json(api, _path(res, namespace), query)
        if resp is None:
            return
        body = resp
        items = body.get("items") or []
        for item in items:
            item.setdefault("apiVersion", res.api_version)
            item.setdefault("kind", res.kind)
        yield items
        token = (body.get("metadata") or {}).get("continue")
        if not token:
            return


def snapshot(api, namespace: str | None = None, resources=SNAPSHOT_RESOURCES,
             progress: Callable[[str, int], None] | None = None) -> list[dict]:
    """Every object the planners read, listed page by page."""
    objects: list[dict] = []
    for res in resources:
        count = 0
        for page in list_objects(api, res, namespace):
            objects += page
            count += len(page)
            if progress:
                progress(res.plural, count)
    return objects
