"""Cluster facts for the policies: a watch-backed HPA cache, or the object alone.

A background thread lists every HorizontalPodAutoscaler (``autoscaling/v2``)
once, then watches for changes, with the controller's
:class:`~webhook.informer.Reflector` and :class:`~webhook.informer.Store` (one
list-watch in the project: resume from the last version seen, list again on 410
Gone, stale events ignored). Reviews read that cache, with one exception (rule
W4): a Deployment CREATE for which the cache has no HPA reads the namespace's
HPAs from the API server once (:class:`ConfirmedHpas`), because an HPA applied
just before its Deployment (``kubectl apply`` of a file, HPA first) may not
have reached the watch yet, and the Deployment would then be stored for its own
``spec.replicas``: the stored result would depend on timing.

Without cluster access (``make run`` on a laptop) :class:`ObjectOnlyFacts`
stands in and policies fall back to what the object says (``spec.replicas``,
the ``policylib.io/autoscaling-min-replicas`` annotation).
"""
from __future__ import annotations

import functools
import http.client
import logging
import os
import socket
import ssl
import threading
import time
import urllib.parse
from typing import Any, Callable, Iterable, TypeVar, cast

import httptools

from policylib.constants import APPS_API_VERSION, AUTOSCALING_API_VERSION
from policylib.facts import ClusterFacts, hpa_target, hpa_targets
from policylib.projection import project
from policylib.shell import kube

from .discovery import WorkloadApiDiscovery
from .informer import Reflector, Store

log = logging.getLogger(__name__)

OBJECT_ONLY, WATCH = "object-only", "watch"
HPA_API_VERSION = AUTOSCALING_API_VERSION
WATCH_SECONDS = 300
MAX_BACKOFF = 30.0
#: The confirming read's (connect, read) timeout: well inside the webhook configuration's
#: ``timeoutSeconds`` (3), so a slow API server costs a cache answer, never a failed admission.
CONFIRM_TIMEOUT = (0.5, 1.0)
#: How long the confirming read reuses the credentials it asked the API client for (a rotated token is
#: picked up within this many seconds; tokens live for minutes to hours).
CREDENTIALS_SECONDS = 1.0
#: The confirming read is one request: the first this many HPAs of the namespace.
CONFIRM_LIMIT = 500
#: Kept-alive connections held for the read at most (one per concurrent read up to this; extras are closed).
MAX_IDLE = 16
#: Bytes asked of the socket per read of an answer.
RECV_BYTES = 65536
#: Characters a header value must not hold: it would end the header (request splitting).
UNSAFE_HEADER_CHARS = ("\r", "\n", "\0")
R = TypeVar("R")
#: ``result`` label values of the confirming reads' counter.
CONFIRMED_FOUND, CONFIRMED_NONE, CONFIRMED_ERROR = "found", "none", "error"


class ObjectOnlyFacts(ClusterFacts):
    """No cluster access: no HPAs or Nodes are known, the object itself is the only fact."""

    mode = OBJECT_ONLY
    ready = True

    def __init__(self, reason: str):
        super().__init__()
        self.reason = reason

    def hpas_for(self, namespace: str, name: str) -> list[dict[str, Any]]:
        return []

    def status(self) -> dict[str, Any]:
        return {"facts": self.mode, "reason": self.reason}

    def start(self) -> "ObjectOnlyFacts":
        return self

    def stop(self) -> None:
        pass


def slim_hpa(obj: dict[str, Any]) -> dict[str, Any]:
    """The fields a policy reads of an HPA (policylib.facts, policylib.spread; listed in
    :data:`policylib.projection.FIELDS`); the rest is dropped."""
    return cast("dict[str, Any]", project(dict(obj, apiVersion=HPA_API_VERSION, kind="HorizontalPodAutoscaler")))


class HpaIndex(Store):
    """HPAs by the Deployment they target, with ``hpas_for`` as in ``policylib.ClusterFacts``: an
    :class:`~webhook.informer.Store` (with its stale-event guard) that keeps only what policies read."""

    def __init__(self) -> None:
        super().__init__({"target": hpa_targets})

    def hpas_for(self, namespace: str, name: str) -> list[dict[str, Any]]:
        return self.by_index("target", (namespace, name))

    def apply(self, event_type: str, obj: dict[str, Any]) -> tuple[bool, dict[str, Any] | None]:
        return super().apply(event_type, slim_hpa(obj))

    def replace(self, objs: Iterable[dict[str, Any]]) -> list[tuple[str, dict[str, Any], dict[str, Any] | None]]:
        return super().replace(slim_hpa(o) for o in objs)

    def put(self, obj: dict[str, Any]) -> None:
        self.apply("MODIFIED", obj)

    def remove(self, obj: dict[str, Any]) -> None:
        self.apply("DELETED", obj)


class HpaCache(ClusterFacts):
    """List-then-watch HPAs in a daemon thread with the controller's
    :class:`~webhook.informer.Reflector`; ``ready`` once the first list is in.

    A :class:`~policylib.ClusterFacts` whose ``hpas_for`` reads the live index;
    Nodes are not watched (the webhook's RBAC covers HPAs only), so ``nodes``
    stays empty.
    """

    mode = WATCH

    def __init__(self, api_client: Any, source: str):
        super().__init__()
        self.api = kube.Api(api_client)
        self.read = HpaRead(api_client)
        self.source = source
        self.index = HpaIndex()
        self.reflector = Reflector(self.api, kube.HPAS, self.index, lambda event_type, obj, old: None,
                                   watch_seconds=WATCH_SECONDS, max_backoff=MAX_BACKOFF)
        #: Rule G22: what the API server serves of the Workload API, read again every REFRESH_SECONDS (the
        #: gang-pods entry refuses a pod whose PodGroup cannot be made, rule G23).
        self.discovery = WorkloadApiDiscovery(self.api, self._workload_api_changed)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._discovery_thread: threading.Thread | None = None

    def _workload_api_changed(self, api: Any) -> None:
        self.workload_api = api

    @property
    def ready(self) -> bool:
        """The HPAs are listed and the served Workload API versions were asked for once (rule G22)."""
        return self.reflector.synced.is_set() and self.discovery.attempted.is_set()

    @property
    def last_error(self) -> str | None:
        return self.reflector.last_error

    def hpas_for(self, namespace: str, name: str) -> list[dict[str, Any]]:
        return self.index.hpas_for(namespace, name)

    def status(self) -> dict[str, Any]:
        return {"facts": self.mode, "source": self.source, "synced": self.ready,
                "horizontalPodAutoscalers": len(self.index), "lastError": self.last_error,
                "workloadApi": self.discovery.status()}

    def start(self) -> "HpaCache":
        self._thread = threading.Thread(target=self.reflector.run, args=(self._stop,), name="hpa-watch", daemon=True)
        self._thread.start()
        self._discovery_thread = threading.Thread(target=self.discovery.run, args=(self._stop,),
                                                  name="workload-api-discovery", daemon=True)
        self._discovery_thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()


class _Answer:
    """httptools' callbacks for one answer: its status, body, whether the server keeps the connection (read
    when the headers are in: llhttp resets it once the message is complete) and whether it is complete. An
    interim answer (1xx) is skipped; a body with neither a length nor chunks ends when the server closes."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.body: list[bytes] = []
        self.status = 0
        self.started = self.headers_done = self.delimited = self.keep_alive = self.complete = False

    def on_message_begin(self) -> None:
        self.started, self.headers_done, self.delimited, self.body = True, False, False, []

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() in (b"content-length", b"transfer-encoding"):
            self.delimited = True

    def on_headers_complete(self) -> None:
        self.headers_done = True
        self.status, self.keep_alive = self.parser.get_status_code(), self.parser.should_keep_alive()

    def on_body(self, data: bytes) -> None:
        self.body.append(data)

    def on_message_complete(self) -> None:
        self.complete = not 100 <= self.status < 200

    def closed(self) -> bool:
        """The server closed the connection: whether that ends this answer (a body delimited by the close)."""
        if self.headers_done and not self.delimited and not self.complete and self.status >= 200:
            self.complete, self.keep_alive = True, False
        return self.complete


class KeptConnection:
    """One kept-alive HTTP/1.1 connection to the API server: a request written whole in one write, its answer
    parsed by httptools (llhttp, the parser Node.js uses; chunked and length-delimited bodies alike)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock

    def send(self, request: bytes) -> None:
        self.sock.sendall(request)

    def answer(self) -> tuple[int, bytes, bool]:
        """The status, body and whether the server keeps the connection open; ``RemoteDisconnected`` when
        the server closed it before answering (a kept-alive connection it had closed meanwhile),
        ``IncompleteRead`` when it closed it mid-answer, ``httptools.HttpParserError`` for a malformed one."""
        answer = _Answer()
        while not answer.complete:
            data = self.sock.recv(RECV_BYTES)
            if not data:
                if not answer.started:
                    raise http.client.RemoteDisconnected("the API server closed the connection without an answer")
                if answer.closed():
                    break
                raise http.client.IncompleteRead(b"".join(answer.body))
            answer.parser.feed_data(data)
        return answer.status, b"".join(answer.body), answer.keep_alive

    def close(self) -> None:
        self.sock.close()


def request_bytes(host: str, path: str, headers: dict[str, str]) -> bytes:
    """A ``GET`` of ``path`` as HTTP/1.1 bytes; a header value that could end its line is refused."""
    lines = [f"GET {path} HTTP/1.1", f"Host: {host}"]
    for key, value in headers.items():
        if any(c in key or c in value for c in UNSAFE_HEADER_CHARS):
            raise ValueError(f"header {key!r} holds a line break or NUL: refused")
        lines.append(f"{key}: {value}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def hpa_page_path(namespace: str) -> str:
    """The path and query of the read: the first page of ``namespace``'s HPAs, the namespace quoted."""
    return f"{kube.HPAS.path(urllib.parse.quote(namespace, safe=''))}?limit={CONFIRM_LIMIT}"


class HpaRead:
    """Rule W4's read, as cheap as it can be: one ``GET`` of the namespace's HPAs (``limit``:
    :data:`CONFIRM_LIMIT`) on a :class:`KeptConnection` (one per concurrent read, reused), with the API
    client's TLS settings and current credentials (``Configuration.auth_settings()``, which refreshes a pod's
    rotated token), its answer parsed by httptools and orjson (:func:`policylib.shell.kube.decode`).
    Measured (``bench/bench_hpa_read.py``): a fraction of the client CPU of the same read through urllib3, the
    generated client's transport, or ``http.client``, whose header parsing alone cost more than the rest.
    Through a proxy (a kubeconfig's ``proxy-url``) the read goes through the generated client's own pool
    instead."""

    def __init__(self, api_client: Any):
        self.configuration = cfg = api_client.configuration
        self.pool = api_client.rest_client.pool_manager
        url = urllib.parse.urlsplit(cfg.host)
        self.https = url.scheme == "https"
        self.host, self.port = url.hostname or "localhost", url.port or (443 if self.https else 80)
        self.prefix = url.path.rstrip("/")
        self.proxied = bool(getattr(cfg, "proxy", None))
        self._context: ssl.SSLContext | None = None
        self._headers: dict[str, str] | None = None
        self._headers_until = 0.0
        self.server_hostname = getattr(cfg, "tls_server_name", None) or self.host
        self.host_header = url.netloc.rpartition("@")[2]
        self._idle: list[KeptConnection] = []
        self._lock = threading.Lock()

    def headers(self) -> dict[str, str]:
        """The request's headers, the credentials asked of the client at most once a second
        (:data:`CREDENTIALS_SECONDS`: a kubeconfig's refresh hook reloads its settings on every call)."""
        now = time.monotonic()
        if self._headers is None or now >= self._headers_until:
            headers = {"Accept": "application/json"}
            for auth in self.configuration.auth_settings().values():
                if auth.get("in") == "header" and auth.get("value"):
                    headers[auth["key"]] = auth["value"]
            self._headers, self._headers_until = headers, now + CREDENTIALS_SECONDS
        return self._headers

    def context(self) -> ssl.SSLContext:
        """The TLS context, made on first use: in the serving worker, after gevent patched ``ssl`` (a context
        made before would block the whole worker on each read)."""
        if self._context is None:
            cfg = self.configuration
            context = ssl.create_default_context(cafile=cfg.ssl_ca_cert,
                                                 cadata=getattr(cfg, "ca_cert_data", None) or None)
            if cfg.cert_file:
                context.load_cert_chain(cfg.cert_file, cfg.key_file)
            if not cfg.verify_ssl:
                context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
            elif cfg.assert_hostname is False:
                context.check_hostname = False
            self._context = context
        return self._context

    def _connect(self) -> KeptConnection:
        sock = socket.create_connection((self.host, self.port), CONFIRM_TIMEOUT[0])
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.https:
                sock = self.context().wrap_socket(sock, server_hostname=self.server_hostname)
            sock.settimeout(CONFIRM_TIMEOUT[1])
        except BaseException:
            sock.close()
            raise
        return KeptConnection(sock)

    def __call__(self, namespace: str) -> dict[str, Any]:
        """The first page of ``namespace``'s HPAs, a consistent read (no resourceVersion); raises
        :class:`~policylib.shell.kube.ApiError` for an error status, ``OSError`` or
        ``http.client.HTTPException`` for the network."""
        return self.send(namespace)()

    def send(self, namespace: str) -> Callable[[], dict[str, Any]]:
        """Put the read's request on the wire now; returns what waits for its answer (and raises as
        :meth:`__call__` does). The caller works while the API server answers: no thread or greenlet, the
        answer simply waits on the connection (a connection whose answer is never collected is never reused).
        Through a proxy the whole read is made when its answer is asked for."""
        headers = self.headers()
        if self.proxied:
            return lambda: self._proxied(namespace, headers)
        return self.send_path(hpa_page_path(namespace), headers)

    def send_path(self, path: str, headers: dict[str, str] | None = None) -> Callable[[], dict[str, Any]]:
        """:meth:`send` of any ``GET`` of the API (a path and query under the server's URL)."""
        request = request_bytes(self.host_header, f"{self.prefix}{path}", headers or self.headers())
        with self._lock:
            idle = self._idle.pop() if self._idle else None
        try:
            conn, reused = self._send(idle, request)
        except OSError as e:
            return failed_read(e)
        return lambda: self._answer(conn, reused, request)

    def _proxied(self, namespace: str, headers: dict[str, str]) -> dict[str, Any]:
        response = self.pool.request("GET", f"{self.configuration.host}{hpa_page_path(namespace)}",
                                     headers=headers, retries=False, timeout=CONFIRM_TIMEOUT[1])
        return self._page(response.status, response.data)

    @staticmethod
    def _page(status: int, raw: bytes) -> dict[str, Any]:
        data = kube.decode(raw)
        if not 200 <= status < 300:
            raise kube.error_for(status, data)
        return cast("dict[str, Any]", data)

    def _send(self, conn: KeptConnection | None, request: bytes) -> tuple[KeptConnection, bool]:
        """The request on an idle kept-alive connection, or a new one; a reused connection the server closed
        meanwhile is tried once more on a new one (a GET changes nothing). Returns the connection and whether
        it was reused."""
        for attempt in (0, 1):
            reused = conn is not None
            if conn is None:
                conn = self._connect()
            try:
                conn.send(request)
                return conn, reused
            except (ConnectionResetError, BrokenPipeError):
                conn.close()
                conn = None
                if reused and attempt == 0:
                    continue
                raise
            except OSError:
                conn.close()
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _answer(self, conn: KeptConnection, reused: bool, request: bytes) -> dict[str, Any]:
        """The answer to the request :meth:`_send` put on ``conn``; the connection goes back to the idle ones
        unless the server closes it. A reused connection the server had closed before the request reached it
        is asked again on a new one, once: never after a timeout (the review's own deadline, the webhook's
        timeoutSeconds, has no room for it)."""
        try:
            status, raw, keep_alive = conn.answer()
        except (ConnectionResetError, BrokenPipeError):   # RemoteDisconnected is a ConnectionResetError
            conn.close()
            if not reused:
                raise
            conn, _ = self._send(None, request)
            return self._answer(conn, False, request)
        except (OSError, http.client.HTTPException, httptools.HttpParserError):
            conn.close()
            raise
        if not keep_alive:
            conn.close()
        else:
            with self._lock:
                keep = len(self._idle) < MAX_IDLE
                if keep:
                    self._idle.append(conn)
            if not keep:
                conn.close()
        return self._page(status, raw)


def failed_read(error: Exception) -> Callable[[], dict[str, Any]]:
    """What waits for a read that could not be sent: it raises the error when the answer is asked for."""
    def answer() -> dict[str, Any]:
        raise error
    return answer


class ConfirmedHpas(ClusterFacts):
    """Rule W4: the facts of one Deployment CREATE. The cache answers when it knows an HPA for the
    Deployment; otherwise one namespaced list from the API server (a consistent read: it includes
    every HPA whose create returned before this request) confirms there is none, or finds the one
    the watch has not delivered yet. A failed read falls back to the cache's answer, counted
    and logged. ``counted(result)`` is called once per confirming read.

    :meth:`start` sends the read before the policy runs, so the API server answers it while the
    policy works (:func:`decide_overlapped`); :meth:`hpas_for` then waits for that answer."""

    def __init__(self, cache: "HpaCache", counted: Callable[[str], None]):
        super().__init__()
        self.cache, self.counted = cache, counted
        self.workload_api = cache.workload_api   # rule G22: the cache's discovery
        self._pending: dict[tuple[str, str], Callable[[], list[dict[str, Any]] | None]] = {}

    @property
    def ready(self) -> bool:
        return self.cache.ready

    def needs_read(self, namespace: str | None, name: object) -> bool:
        """Whether :meth:`hpas_for` of this Deployment would ask the API server."""
        return bool(namespace and isinstance(name, str) and name and not self.cache.hpas_for(namespace, name))

    def start(self, namespace: str, name: str) -> None:
        """Send the read now; its answer is collected by :meth:`hpas_for` or :meth:`found`."""
        if (namespace, name) not in self._pending:
            try:
                answer = self.cache.read.send(namespace)
            except Exception as e:  # noqa: BLE001 -- credentials or the request's making: reported as the read's failure
                answer = failed_read(e)
            # collected once, by whichever asks first (functools.cache of a call without arguments)
            self._pending[(namespace, name)] = functools.cache(lambda: self._confirm(namespace, name, answer))

    def found(self, namespace: str, name: str) -> bool:
        """Whether the read :meth:`start` sent found an HPA the cache did not have (waits for it)."""
        return bool(self.hpas_for(namespace, name))

    def hpas_for(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """Rule W4: the cache's HPAs for the Deployment, else the API server's."""
        cached = self.cache.hpas_for(namespace, name)
        if cached or not namespace or not name:
            return cached
        pending = self._pending.get((namespace, name))
        confirmed = pending() if pending is not None else self._confirm(namespace, name)
        return cached if confirmed is None else confirmed

    def _confirm(self, namespace: str, name: str,
                 answer: Callable[[], dict[str, Any]] | None = None) -> list[dict[str, Any]] | None:
        """The namespace's HPAs targeting the Deployment (from ``answer``, a read :meth:`start` sent, else a read
        now), or None when the read cannot tell."""
        try:
            page = answer() if answer is not None else self.cache.read(namespace)
            found = [slim_hpa(h) for h in page.get("items") or [] if hpa_target(h) == (namespace, name)]
        except Exception as e:  # noqa: BLE001 -- any failure of the read or of its answer: the cache's answer stands
            log.warning("HPA read failed, using the watch cache",
                        extra={"namespace": namespace, "deployment": name, "error": str(e)})
            self.counted(CONFIRMED_ERROR)
            return None
        if not found and (page.get("metadata") or {}).get("continue"):
            # One request only, so the read stays within its timeout: past the first page, the watch's answer.
            log.warning("HPA read: more HPAs in the namespace than one page, using the watch cache",
                        extra={"namespace": namespace, "deployment": name, "page": CONFIRM_LIMIT})
            self.counted(CONFIRMED_ERROR)
            return None
        self.counted(CONFIRMED_FOUND if found else CONFIRMED_NONE)
        return found


def decide_overlapped(decide: Callable[[Any], R], facts: ConfirmedHpas, namespace: str | None,
                      obj: dict[str, Any] | None) -> R:
    """Rule W4 without waiting for the read: for a Deployment the cache knows no HPA for, the read is
    sent, the policy decides with the cache's facts while the API server answers, and decides again
    only when the read found an HPA (rare: the HPA applied just before its Deployment). The answer is
    the one deciding with ``facts`` gives: without an HPA both see none, with one the second decision
    has it, and a failed read leaves the cache's answer."""
    name = ((obj or {}).get("metadata") or {}).get("name") if isinstance(obj, dict) else None
    deployment = isinstance(obj, dict) and obj.get("kind") == "Deployment" and obj.get("apiVersion") == APPS_API_VERSION
    if not deployment or not facts.needs_read(namespace, name):
        return decide(facts)
    assert namespace is not None and isinstance(name, str)  # needs_read checked them
    facts.start(namespace, name)
    first = decide(facts.cache)
    return decide(facts) if facts.found(namespace, name) else first


def for_review(facts: ClusterFacts, operation: str, counted: Callable[[str], None]) -> ClusterFacts:
    """The facts a review reads: :class:`ConfirmedHpas` over a watch cache for a CREATE (rule W4),
    else ``facts`` itself."""
    if operation == "CREATE" and isinstance(facts, HpaCache):
        return ConfirmedHpas(facts, counted)
    return facts


def facts_source(mode: str = "auto", kubeconfig: str | None = None) -> ObjectOnlyFacts | HpaCache:
    """Where facts come from: ``none``; ``auto`` (in-cluster if running in a pod, else a
    kubeconfig only when one is named); ``watch`` (in-cluster or kubeconfig, required).

    The cache's thread is not started here; call ``start()`` in the serving process.
    """
    if mode == "none":
        return ObjectOnlyFacts("disabled (--facts none)")
    from kubernetes import config
    try:
        if kubeconfig:
            return HpaCache(kube.api_client(kubeconfig=kubeconfig), f"kubeconfig {kubeconfig}")
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            return HpaCache(kube.in_cluster_client(), "in-cluster service account")
    except (config.ConfigException, kube.KubeconfigNotFound, OSError, ValueError) as e:
        if mode == "watch":
            raise
        return ObjectOnlyFacts(f"no cluster access: {e}")
    if mode == "watch":
        raise config.ConfigException("--facts watch needs a pod's service account or --kubeconfig")
    return ObjectOnlyFacts("no cluster access: not running in a pod and no --kubeconfig")
