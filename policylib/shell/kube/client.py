"""The client: an ``ApiClient`` from a kubeconfig or the pod's service account, and :class:`Api`, its typed calls
(get, create, update, patch, paged lists, watches), every answer the server's JSON as dicts."""
from __future__ import annotations

import functools
import os
from typing import Any, Callable, Iterator, cast

from .errors import error_for
from .resources import METADATA_LIST, Resource, typed
from .wire import PAGE, continue_token, decode, one_by_one, read_ahead

JSON_PATCH = "application/json-patch+json"
#: Connect timeout, and read timeout over a watch's own ``timeoutSeconds``.
CONNECT_SECONDS = 5
READ_MARGIN_SECONDS = 30


class KubeconfigNotFound(RuntimeError):
    """Neither a kubeconfig nor a pod's service account: says where it looked."""


def kubeconfig_path(kubeconfig: str | None = None) -> str:
    """The kubeconfig that would be read: ``kubeconfig``, the first of ``$KUBECONFIG``, or ~/.kube/config."""
    path = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    return path.split(os.pathsep)[0]


def api_client(context: str | None = None, kubeconfig: str | None = None) -> Any:
    """A ``kubernetes.client.ApiClient`` from a kubeconfig (``kubeconfig``, ``$KUBECONFIG`` read now,
    ~/.kube/config), or from the pod's service account inside a cluster."""
    from kubernetes import config
    path = kubeconfig_path(kubeconfig)
    if os.path.exists(path):
        return config.new_client_from_config(config_file=path, context=context)
    if context or kubeconfig or not os.environ.get("KUBERNETES_SERVICE_HOST"):
        looked = f"{path}" + ("" if kubeconfig else " ($KUBECONFIG, then ~/.kube/config)")
        raise KubeconfigNotFound(f"no kubeconfig found at {looked}, and not running in a pod")
    return in_cluster_client()


def in_cluster_client() -> Any:
    """A ``kubernetes.client.ApiClient`` from the pod's service account."""
    from kubernetes import client, config
    cfg = client.Configuration()
    config.load_incluster_config(client_configuration=cfg)
    return client.ApiClient(configuration=cfg)


class Api:
    """Typed calls on one ``ApiClient``; every answer is the server's JSON as dicts."""

    def __init__(self, client: Any):
        self.client = client

    def request(self, method: str, path: str, *, query: list[tuple[str, Any]] | None = None, body: object = None,
                content_type: str | None = None, timeout: float | tuple[float, float] | None = None) -> Any:
        status, raw = self.send(method, path, query=query, body=body, content_type=content_type, timeout=timeout)
        data = decode(raw)
        if not 200 <= status < 300:
            raise error_for(status, data)
        return data

    def send(self, method: str, path: str, *, query: list[tuple[str, Any]] | None = None, body: object = None,
             content_type: str | None = None, timeout: float | tuple[float, float] | None = None,
             accept: str = "application/json") -> tuple[int, bytes]:
        """One call: the answer's status and its body as the server sent it (JSON, not decoded)."""
        headers = {"Accept": accept}
        if content_type:
            headers["Content-Type"] = content_type
        method, url, headers, body, post = self.client.param_serialize(
            method, path, query_params=query or [], header_params=headers, body=body, auth_settings=["BearerToken"])
        resp = self.client.call_api(method, url, header_params=headers, body=body, post_params=post,
                                    _request_timeout=timeout or (CONNECT_SECONDS, 60))
        resp.read()
        return int(resp.status), bytes(resp.data or b"")

    def get(self, res: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        return self._one(res, self.request("GET", res.path(namespace, name)))

    def create(self, res: Resource, namespace: str | None, obj: dict[str, Any]) -> dict[str, Any]:
        return self._one(res, self.request("POST", res.path(namespace), body=obj, content_type="application/json"))

    def update(self, res: Resource, namespace: str | None, name: str, obj: dict[str, Any], *,
               timeout: float | tuple[float, float] | None = None) -> dict[str, Any]:
        return self._one(res, self.request("PUT", res.path(namespace, name), body=obj,
                                             content_type="application/json", timeout=timeout))

    def patch(self, res: Resource, namespace: str | None, name: str, patch: list[dict[str, Any]]) -> dict[str, Any]:
        """An RFC 6902 JSON patch."""
        return self._one(res, self.request("PATCH", res.path(namespace, name), body=patch, content_type=JSON_PATCH))

    def list(self, res: Resource, namespace: str | None = None,
             timeout: float | tuple[float, float] | None = None) -> tuple[list[dict[str, Any]], str]:
        """Every object, page by page, and the list's resourceVersion (where a watch starts).
        NotFound when the cluster does not serve the resource. ``timeout`` bounds each page's request
        (connect, read)."""
        items: list[dict[str, Any]] = []
        for page in self.pages(res, namespace, timeout=timeout):
            items += page["items"]
            version = page["resourceVersion"]
        return items, version

    def pages(self, res: Resource, namespace: str | None = None,
              timeout: float | tuple[float, float] | None = None, limit: int = PAGE,
              ahead: bool = False) -> Iterator[dict[str, Any]]:
        """Pages ``{"items", "resourceVersion"}`` of ``res`` (``limit``/``continue``). ``ahead``: each next
        page is asked for on a thread as soon as this one has come (its continue token read from its head,
        :func:`continue_token`), so the API server answers it while this one is decoded and used."""
        fetch = functools.partial(self._page, res, namespace, timeout, limit)
        for raw in (read_ahead(fetch) if ahead else one_by_one(fetch)):
            body = decode(raw)
            items = [typed(res, item) for item in body.get("items") or []]
            if res.metadata_only:   # each item says PartialObjectMetadata: name what it is the metadata of
                items = [dict(item, apiVersion=res.api_version, kind=res.kind) for item in items if isinstance(item, dict)]
            yield {"items": items, "resourceVersion": (body.get("metadata") or {}).get("resourceVersion", "")}

    def _page(self, res: Resource, namespace: str | None, timeout: float | tuple[float, float] | None, limit: int,
              token: str | None) -> tuple[bytes, str | None]:
        """One page of ``res`` as the server sent it, and the continue token of the next (None: the last)."""
        query: list[tuple[str, Any]] = [("limit", limit)] + ([("continue", token)] if token else [])
        if res.field_selector:
            query.append(("fieldSelector", res.field_selector))
        if res.label_selector:
            query.append(("labelSelector", res.label_selector))
        status, raw = self.send("GET", res.path(namespace), query=query, timeout=timeout,
                                accept=METADATA_LIST if res.metadata_only else "application/json")
        if not 200 <= status < 300:
            raise error_for(status, decode(raw))
        return raw, continue_token(raw)

    def watch(self, res: Resource, resource_version: str | None, timeout: int) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(type, object)`` events after ``resource_version`` until the server ends the watch after
        ``timeout`` seconds. BOOKMARK events carry only a resourceVersion. Raises Gone when the version
        is too old (at the start, or as an ERROR event), another ApiError for other failures."""
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException
        options: dict[str, Any] = dict(resource_version=resource_version, allow_watch_bookmarks=True,
                                       timeout_seconds=timeout,
                                       _request_timeout=(CONNECT_SECONDS, timeout + READ_MARGIN_SECONDS))
        try:
            for event in watch.Watch().stream(self._watch_request(res), **options):  # plain dicts
                kind, obj = event.get("type"), event.get("raw_object")
                if kind == "ERROR":
                    raise error_for(int((obj or {}).get("code") or 500), obj)
                if isinstance(obj, dict):
                    yield kind, typed(res, obj)
        except ApiException as e:
            raise error_for(e.status or 500, decode(e.body) if e.body else e.reason) from None

    def _watch_request(self, res: Resource) -> Callable[..., Any]:
        """The request ``kubernetes.watch.Watch`` streams: ``res``'s watch, its events left as dicts. Not the
        generated ``CoreV1Api``: importing it loads every model of the client, about 20 MiB of resident
        memory in each process that watches (docs/figures.md, "Scale")."""
        def request(watch: bool, resource_version: str | None, allow_watch_bookmarks: bool, timeout_seconds: int,
                    _request_timeout: tuple[float, float], _preload_content: bool = False) -> Any:
            query: list[tuple[str, Any]] = [("watch", watch), ("allowWatchBookmarks", allow_watch_bookmarks),
                                            ("timeoutSeconds", timeout_seconds)]
            query += [("resourceVersion", resource_version)] if resource_version else []
            query += [("fieldSelector", res.field_selector)] if res.field_selector else []
            query += [("labelSelector", res.label_selector)] if res.label_selector else []
            method, url, headers, body, post = self.client.param_serialize(
                "GET", res.path(), query_params=query, header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"])
            resp = self.client.call_api(method, url, header_params=headers, body=body, post_params=post,
                                        _request_timeout=_request_timeout)
            if not 200 <= resp.status < 300:
                resp.read()
                raise error_for(resp.status, decode(resp.data))
            return resp.response   # the urllib3 response, streamed line by line
        return request

    @staticmethod
    def _one(res: Resource, answer: Any) -> dict[str, Any]:
        """The server's answer for one object (a dict: the API answers JSON objects)."""
        return cast("dict[str, Any]", typed(res, answer))
