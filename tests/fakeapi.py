"""A recorded Kubernetes API on loopback: the real ``kubernetes`` client talks HTTP to it.

No API server can run here, so tests replay recorded API responses: a route
maps (method, path) to a handler returning (status, body); every request is
recorded with its query, headers and body so tests can assert exactly which
calls were made.
"""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable
from urllib.parse import parse_qs, urlparse

Handler = Callable[[dict], tuple]


class FakeAPI:
    def __init__(self):
        self.routes: dict[tuple[str, str], Handler] = {}
        self.requests: list[dict] = []
        #: Watch events waiting for the next watch of a path (``push``); served once, then the watch ends.
        self.watches: dict[str, list[tuple[str, dict]]] = {}
        api = self

        class _H(BaseHTTPRequestHandler):
            def _serve(self):
                url = urlparse(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                req = {"method": self.command, "path": url.path, "query": {k: v[0] for k, v in parse_qs(url.query).items()},
                       "headers": {k.lower(): v for k, v in self.headers.items()}, "body": json.loads(raw) if raw else None}
                api.requests.append(req)
                handler = api.routes.get((self.command, url.path))
                if self.command == "GET" and req["query"].get("watch") in ("true", "True") and url.path in api.watches:
                    events = api.watches.pop(url.path)
                    handler = lambda req: (200, watch_stream(events))  # noqa: E731
                # A path nothing serves gets what the real API server answers for a group or resource it
                # does not serve (a CRD not installed): plain text, not a Status object.
                status, body = handler(req) if handler else (404, b"404 page not found\n")
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def route(self, method: str, path: str, handler: Handler | tuple) -> None:
        self.routes[(method, path)] = handler if callable(handler) else (lambda req, h=handler: h)

    def push(self, path: str, events: list[tuple[str, dict]]) -> None:
        """Serve ``events`` to the next watch of ``path`` (a finished watch: the client sees it end)."""
        self.watches.setdefault(path, []).extend(events)

    def kubeconfig(self, path) -> str:
        return kubeconfig_for(self.url, path)


def kubeconfig_for(server: str, path) -> str:
    """A kubeconfig at ``path`` for ``server`` with a bearer token; returns its path."""
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u"}}]}))
    return str(path)


def watch_stream(events: list[tuple[str, dict]]) -> bytes:
    """A finished watch response: one JSON event per line."""
    return b"".join(json.dumps({"type": t, "object": o}).encode() + b"\n" for t, o in events)


def paged_list(kind: str, items: list[dict], page: int) -> Handler:
    """A list endpoint that honours ``limit`` and ``continue`` like the API server."""
    def handler(req: dict) -> tuple:
        start = int(req["query"].get("continue") or 0)
        limit = int(req["query"].get("limit") or page)
        chunk = items[start:start + min(limit, page)]
        nxt = start + len(chunk)
        meta = {"resourceVersion": "100"}
        if nxt < len(items):
            meta["continue"] = str(nxt)
        return 200, {"apiVersion": "v1", "kind": f"{kind}List", "metadata": meta, "items": chunk}
    return handler


#: What each Kubernetes minor's API server lists of scheduling.k8s.io once the Workload API is enabled (its
#: discovery documents, k8s.io/kubernetes v1.36.3 and v1.37.2): the version of Workload and PodGroup, and the
#: server's gitVersion.
WORKLOAD_API = {36: ("v1alpha2", "v1.36.3"), 37: ("v1beta1", "v1.37.2")}


def serve_workload_api(api: FakeAPI, minor: int, enabled: bool = True) -> None:
    """Route ``/version`` and the ``scheduling.k8s.io`` discovery documents as Kubernetes 1.``minor``'s API server
    answers them, with the Workload API enabled or not (then the group lists v1 only, for PriorityClasses)."""
    version, git = WORKLOAD_API[minor]
    api.route("GET", "/version", (200, {"major": "1", "minor": str(minor), "gitVersion": git}))
    listed = [{"groupVersion": "scheduling.k8s.io/v1", "version": "v1"}]
    if enabled:
        listed.insert(0, {"groupVersion": f"scheduling.k8s.io/{version}", "version": version})
    api.route("GET", "/apis/scheduling.k8s.io", (200, {"kind": "APIGroup", "apiVersion": "v1",
                                                       "name": "scheduling.k8s.io", "versions": listed,
                                                       "preferredVersion": listed[-1]}))
    resources = [{"name": "workloads", "namespaced": True, "kind": "Workload"},
                 {"name": "podgroups", "namespaced": True, "kind": "PodGroup"},
                 {"name": "podgroups/status", "namespaced": True, "kind": "PodGroup"}]
    for other in {v for v, _ in WORKLOAD_API.values()}:
        api.routes.pop(("GET", f"/apis/scheduling.k8s.io/{other}"), None)
    if enabled:
        api.route("GET", f"/apis/scheduling.k8s.io/{version}", (200, {
            "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"scheduling.k8s.io/{version}",
            "resources": resources}))
