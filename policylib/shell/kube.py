"""The one way policylib talks to the API server: a resource registry, typed errors, paginated lists
and resumable watches, over the ``kubernetes`` client's configuration (auth, TLS, proxy).

Part of the shell (:mod:`policylib.shell`): the policies never import it; the CLI's ``--cluster``
imports it lazily, the controller and the webhook's HPA cache at start. Objects travel as the API
server's JSON, never as the client's model classes, so the policies see exactly what the server
stores, with ``apiVersion`` and ``kind`` filled in (list items omit them).
"""
from __future__ import annotations

import functools
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterator, cast

from ..constants import (
    ADMISSIONREGISTRATION_GROUP,
    APPS_GROUP,
    AUTOSCALING_GROUP,
    CONFIG_KEY,
    CONFIG_MAP,
    CONTROLLER_NAME,
    COORDINATION_GROUP,
    EVENTS_GROUP,
    HYPERNODE_GROUP,
    KUBEFLOW_GROUP,
    KUBEFLOW_VERSION,
    MPI_V2_VERSION,
    NATIVE_GANG_GROUP,
    NATIVE_GANG_V1ALPHA2,
    NATIVE_GANG_V1BETA1,
    NATIVE_GANG_VERSIONS,
    POD_TEMPLATE_HASH,
    SIGS_GROUP,
    VOLCANO_PODGROUP_VERSION,
    VOLCANO_SCHEDULING_GROUP,
    WEBHOOK_NAME,
    X_K8S_GROUP,
)
from ..documents import no_gc

try:
    import orjson as _orjson
except ImportError:  # pragma: no cover -- policylib without the webhook's dependencies
    _orjson = None  # type: ignore[assignment]

PAGE = 500
#: Objects per page where the objects are projected as they come (rule W7: the watches' lists, ``plan``,
#: ``check`` and ``simulate --cluster``). A page is decoded whole before it is projected: measured with
#: realistic Deployments, a page of 500 peaks about 100 MB above what is held, 100 about 17 MB, and the
#: memory a page took stays with the process (docs/figures.md, "Scale").
PROJECTED_PAGE = 100
JSON_PATCH = "application/json-patch+json"
#: Connect timeout, and read timeout over a watch's own ``timeoutSeconds``.
CONNECT_SECONDS = 5
READ_MARGIN_SECONDS = 30


@dataclass(frozen=True)
class Resource:
    """An API resource: where it lives and what its objects are called."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    #: A ``fieldSelector`` every list and watch carries (``metadata.name=X``: RBAC may then name the object).
    field_selector: str = ""
    #: A ``labelSelector`` every list and watch carries (the controller's pod watch, rule S27).
    label_selector: str = ""
    #: Lists ask for the objects' metadata only (``PartialObjectMetadataList``, as kubectl and controller-runtime's
    #: metadata clients do): what is counted by name, namespace, labels and owner, never read whole.
    metadata_only: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace and self.namespaced:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base


DEPLOYMENTS = Resource(APPS_GROUP, "v1", "deployments", "Deployment")
HPAS = Resource(AUTOSCALING_GROUP, "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler")
TFJOBS = Resource(KUBEFLOW_GROUP, KUBEFLOW_VERSION, "tfjobs", "TFJob")
PYTORCHJOBS = Resource(KUBEFLOW_GROUP, KUBEFLOW_VERSION, "pytorchjobs", "PyTorchJob")
MPIJOBS = Resource(KUBEFLOW_GROUP, KUBEFLOW_VERSION, "mpijobs", "MPIJob")
#: The MPI Operator's API; a cluster serves mpijobs.kubeflow.org from one operator or the other.
MPIJOBS_V2 = Resource(KUBEFLOW_GROUP, MPI_V2_VERSION, "mpijobs", "MPIJob")
KUBEFLOW_JOBS = (TFJOBS, PYTORCHJOBS, MPIJOBS, MPIJOBS_V2)
PODGROUPS = (Resource(X_K8S_GROUP, "v1alpha1", "podgroups", "PodGroup"),
             Resource(SIGS_GROUP, "v1alpha1", "podgroups", "PodGroup"))


def native_gang_resources(version: str) -> tuple[Resource, Resource]:
    """Kubernetes' own Workload and PodGroup in one version of the Workload API (gang method workload, rules
    G18, G22)."""
    return (Resource(NATIVE_GANG_GROUP, version, "workloads", "Workload"),
            Resource(NATIVE_GANG_GROUP, version, "podgroups", "PodGroup"))


#: Kubernetes 1.37's Workload and PodGroup (scheduling.k8s.io/v1beta1), and 1.36's (v1alpha2).
WORKLOADS, NATIVE_PODGROUPS = native_gang_resources(NATIVE_GANG_V1BETA1)
WORKLOADS_V1ALPHA2, NATIVE_PODGROUPS_V1ALPHA2 = native_gang_resources(NATIVE_GANG_V1ALPHA2)
#: Every version policylib writes, the newest first: the controller watches them all (a version the cluster does not
#: serve lists nothing, and its reflector looks again later), so an upgrade that changes the served one is followed.
NATIVE_GANG = tuple(r for v in NATIVE_GANG_VERSIONS for r in native_gang_resources(v))
#: Volcano's PodGroups, which policylib makes for gang.scheduler volcano (rule G21); watched only then
#: (Volcano's own controller makes one per pod of every other workload it schedules).
VOLCANO_PODGROUPS = Resource(VOLCANO_SCHEDULING_GROUP, VOLCANO_PODGROUP_VERSION, "podgroups", "PodGroup")
LEASES = Resource(COORDINATION_GROUP, "v1", "leases", "Lease")
EVENTS = Resource(EVENTS_GROUP, "v1", "events", "Event")
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
MUTATING_WEBHOOKS = Resource(ADMISSIONREGISTRATION_GROUP, "v1", "mutatingwebhookconfigurations",
                             "MutatingWebhookConfiguration", namespaced=False)


def webhook_configuration(name: str) -> Resource:
    """The one MutatingWebhookConfiguration ``name``, listed and watched by name (rule W5)."""
    return Resource(MUTATING_WEBHOOKS.group, MUTATING_WEBHOOKS.version, MUTATING_WEBHOOKS.plural,
                    MUTATING_WEBHOOKS.kind, namespaced=False, field_selector=f"metadata.name={name}")


PODS = Resource("", "v1", "pods", "Pod")
#: Volcano's HyperNodes (cluster-scoped): what a partition's network topology is met by (rule V26).
HYPERNODES = Resource(HYPERNODE_GROUP, "v1alpha1", "hypernodes", "HyperNode", namespaced=False)
#: Rule S27: the pods a Deployment's ReplicaSets made (the Deployment controller labels every one), no other.
DEPLOYMENT_PODS = Resource("", "v1", "pods", "Pod", label_selector=POD_TEMPLATE_HASH)
#: Rule P9: the kinds that run pods and that no family handles (:data:`policylib.families.UNHANDLED_WORKLOADS`),
#: each in the version its project serves now; ``check --cluster`` counts those in scope by their metadata.
UNHANDLED_WORKLOADS = tuple(Resource(group, version, plural, kind, metadata_only=True) for group, version, plural, kind in (
    (APPS_GROUP, "v1", "statefulsets", "StatefulSet"), (APPS_GROUP, "v1", "daemonsets", "DaemonSet"),
    (APPS_GROUP, "v1", "replicasets", "ReplicaSet"), ("batch", "v1", "jobs", "Job"), ("batch", "v1", "cronjobs", "CronJob"),
    ("trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob"), ("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet"),
    ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet"),
    (KUBEFLOW_GROUP, KUBEFLOW_VERSION, "paddlejobs", "PaddleJob"),
    (KUBEFLOW_GROUP, KUBEFLOW_VERSION, "xgboostjobs", "XGBoostJob"),
    (KUBEFLOW_GROUP, KUBEFLOW_VERSION, "jaxjobs", "JAXJob"), ("ray.io", "v1", "rayjobs", "RayJob"),
    ("ray.io", "v1", "rayclusters", "RayCluster"), ("ray.io", "v1", "rayservices", "RayService")))
#: What a metadata-only list asks for (kube-apiserver's ``as=PartialObjectMetadataList``).
METADATA_LIST = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"
#: What ``policylib plan --cluster`` reads.
SNAPSHOT_RESOURCES = (DEPLOYMENTS, HPAS) + KUBEFLOW_JOBS + PODGROUPS + (VOLCANO_PODGROUPS,) + NATIVE_GANG

REGISTRY: dict[tuple[str, str], Resource] = {
    (r.api_version, r.kind): r
    for r in (DEPLOYMENTS, HPAS, LEASES, EVENTS, NODES, PODS, NAMESPACES, CONFIGMAPS, MUTATING_WEBHOOKS)
    + KUBEFLOW_JOBS + PODGROUPS + (VOLCANO_PODGROUPS,)
    + NATIVE_GANG}


def resource_for(api_version: str, kind: str) -> Resource:
    """The registered resource of ``kind`` in ``api_version``; ValueError names an unknown one."""
    try:
        return REGISTRY[(api_version, kind)]
    except KeyError:
        raise ValueError(f"no resource registered for {kind} in {api_version}") from None


# --- errors ------------------------------------------------------------------------------------------

class ApiError(RuntimeError):
    """A non-2xx answer, with the status code, the Status reason and its message."""

    def __init__(self, status: int, message: str, reason: str = ""):
        self.status, self.reason, self.message = status, reason, message
        super().__init__(f"HTTP {status}{' ' + reason if reason else ''}: {message}")


class NotFound(ApiError):
    """404: the object does not exist, or the cluster does not serve the resource (a CRD not installed)."""


class Conflict(ApiError):
    """409: the object changed since the resourceVersion we sent, or it already exists."""


class Gone(ApiError):
    """410: the resourceVersion is older than what the server keeps; list again."""


class Forbidden(ApiError):
    """403: RBAC does not allow it."""


_ERRORS = {403: Forbidden, 404: NotFound, 409: Conflict, 410: Gone}


def error_for(status: int, body: Any) -> ApiError:
    """The typed error for an answer (``body`` a Status object, or anything else the server sent)."""
    if isinstance(body, dict):
        message, reason = str(body.get("message", "")), str(body.get("reason", ""))
    else:
        message, reason = str(body), ""
    return _ERRORS.get(status, ApiError)(status, message, reason)


def _loads(raw: bytes | str) -> Any:
    """orjson where installed: it decodes a page of realistic Deployments in half the standard
    library's time (docs/figures.md, "Scale"; the API server's numbers are int64 or float64, which orjson
    reads as they are); the standard library for anything orjson refuses."""
    if _orjson is not None:
        try:
            return _orjson.loads(raw)
        except _orjson.JSONDecodeError:
            pass
    return json.loads(raw)


def decode(raw: bytes | str | None) -> Any:
    """A JSON answer, or a non-JSON one as ``{"message": text}``: the API server answers a group or
    resource it does not serve with a plain-text ``404 page not found``."""
    if not raw:
        return {}
    try:
        return _loads(raw)
    except ValueError:
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        return {"message": text.strip()[:1000]}


def continue_token(raw: bytes) -> str | None:
    """A list answer's ``metadata.continue`` (None on the last page), read from the answer's head without
    decoding its items: the API server writes ``metadata`` before ``items``. An answer whose head is not
    that is decoded whole."""
    cut = raw.find(b',"items":')
    head: Any = None
    if cut > 0:
        try:
            head = _loads(raw[:cut] + b"}")
        except ValueError:   # "items" came first, or the cut fell inside it: read the whole answer
            head = None
    if not (isinstance(head, dict) and isinstance(head.get("metadata"), dict)):
        head = decode(raw)
    meta = head.get("metadata") if isinstance(head, dict) else None
    token = meta.get("continue") if isinstance(meta, dict) else None
    return str(token) if token else None


#: One page: its body as the server sent it and the continue token of the next, given this one's token.
Fetch = Callable[[str | None], tuple[bytes, str | None]]


def _one_by_one(fetch: Fetch) -> Iterator[bytes]:
    """Each page's body, the next asked for when the caller is done with this one."""
    raw, token = fetch(None)
    yield raw
    while token:
        raw, token = fetch(token)
        yield raw


def _read_ahead(fetch: Fetch) -> Iterator[bytes]:
    """Each page's body, the next asked for on a thread while the caller decodes and uses this one: the API
    server's work and the client's overlap (docs/figures.md, "Scale"). At most one page waits."""
    with ThreadPoolExecutor(1, thread_name_prefix="policylib-list") as pool:
        raw, token = fetch(None)
        while True:
            following = pool.submit(fetch, token) if token else None
            yield raw
            if following is None:
                return
            raw, token = following.result()


# --- the client -----------------------------------------------------------------------------------

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
        for raw in (_read_ahead(fetch) if ahead else _one_by_one(fetch)):
            body = decode(raw)
            items = [self._typed(res, item) for item in body.get("items") or []]
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
                    yield kind, self._typed(res, obj)
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

    @classmethod
    def _one(cls, res: Resource, answer: Any) -> dict[str, Any]:
        """The server's answer for one object (a dict: the API answers JSON objects)."""
        return cast("dict[str, Any]", cls._typed(res, answer))

    @staticmethod
    def _typed(res: Resource, obj: Any) -> Any:
        if isinstance(obj, dict) and obj.get("metadata") is not None:
            obj.setdefault("apiVersion", res.api_version)
            obj.setdefault("kind", res.kind)
        return obj


def snapshot_resources(config: Any) -> tuple[Resource, ...]:
    """What ``plan --cluster`` and ``check --cluster`` read for ``config`` (a :class:`policylib.Config`):
    Deployments, HPAs, Kubeflow jobs and scheduler-plugins' PodGroups always; Volcano's PodGroups only for
    gang method podgroup on scheduler volcano (rule G21; a Volcano cluster has one per pod), Kubernetes' own
    Workloads and PodGroups only for method workload (G18). A user who may read only some groups then
    needs no more than the settings use."""
    gang = config.gang
    extra: tuple[Resource, ...] = ()
    if gang.enabled and gang.method == "podgroup" and gang.scheduler == "volcano":
        extra = (VOLCANO_PODGROUPS,)
    elif gang.enabled and gang.method == "workload":
        extra = NATIVE_GANG
    return (DEPLOYMENTS, HPAS) + KUBEFLOW_JOBS + PODGROUPS + extra


def snapshot(api: Api, namespace: str | None = None, resources: tuple[Resource, ...] = SNAPSHOT_RESOURCES,
             progress: Callable[[str, int], None] | None = None,
             project: Callable[[Any], Any] | None = None, limit: int = PAGE,
             share: bool = False) -> list[dict[str, Any]]:
    """Every object the planners read, listed page by page, the next page read ahead while this one is
    decoded; resources the cluster does not serve contribute nothing. ``project`` (rule W7) is applied to
    each object as its page is decoded, and what it keeps is held :class:`Interner`'s way (its strings once;
    with ``share``, each equal part once: read such objects, never change them in place, as the policies do),
    so the memory a snapshot takes is what it keeps plus one page decoded and the next as the server sent it."""
    objects: list[dict[str, Any]] = []
    hold = Interner(share)
    keep = (lambda obj: hold(project(obj))) if project else hold
    with no_gc():   # decoded JSON has no cycles: the cyclic GC would pass over every object held, page after page
        for res in resources:
            count = 0
            try:
                for page in api.pages(res, namespace, limit=limit, ahead=True):
                    objects += map(keep, page["items"])
                    count += len(page["items"])
                    if progress:
                        progress(res.plural, count)
            except NotFound:
                continue
    return objects


class Interner:
    """Copies of decoded JSON in which every string (key or value) is interned, and (``share``) every mapping or
    list equal to one copied before, value for value and type for type, is that one: the same label value,
    quantity or scheduler name in 50,000 objects is held once, and with ``share`` so is the same container
    ``resources``, port list, pod template spec or status. What ``check --cluster`` keeps of realistic
    Deployments is mostly such parts; what ``plan --cluster`` keeps has few, and sharing them would cost it more
    CPU than it saves memory (docs/figures.md, "check --cluster within 300 MiB"). The table holds one hash per
    part kept and goes with the interner."""

    def __init__(self, share: bool = True) -> None:
        self.share = share
        self.held: dict[int, Any] = {}

    def __call__(self, value: Any) -> Any:
        if isinstance(value, str):
            return sys.intern(value)
        if isinstance(value, dict):
            value = {sys.intern(k) if isinstance(k, str) else k: self(v) for k, v in value.items()}
        elif isinstance(value, list):
            value = [self(v) for v in value]
        else:
            return value
        if not self.share:
            return value
        key = _shape(value)
        found = self.held.setdefault(hash(key), value)
        return found if found is not value and _shape(found) == key else value


def _shape(value: dict[str, Any] | list[Any]) -> tuple[Any, ...]:
    """What makes two copied mappings or lists the same: their keys in order and, per item, the copied part
    itself (already held once: the same object) or the scalar with its type (``1``, ``1.0`` and ``True``
    compare equal in Python but not in JSON)."""
    items = value.items() if isinstance(value, dict) else enumerate(value)
    return (type(value), *((k, id(v)) if isinstance(v, (dict, list)) else (k, type(v), v) for k, v in items))


def served_api_groups(api: Api) -> list[str]:
    """``group/version`` of every version of every API group the server serves (``/apis``, an APIGroupList)."""
    found = api.request("GET", "/apis") or {}
    return [str(v.get("groupVersion")) for g in found.get("groups") or [] if isinstance(g, dict)
            for v in g.get("versions") or [] if isinstance(v, dict) and v.get("groupVersion")]


def server_version(api: Api, timeout: float | tuple[float, float] | None = None) -> str:
    """The API server's ``gitVersion`` (``/version``)."""
    return str(api.request("GET", "/version", timeout=timeout).get("gitVersion", ""))


def served_workload_versions(api: Api, versions: tuple[str, ...] = NATIVE_GANG_VERSIONS,
                             timeout: float | tuple[float, float] | None = None) -> tuple[str, ...]:
    """Rule G22: the versions of ``scheduling.k8s.io`` (of ``versions``) whose discovery document lists both
    ``workloads`` and ``podgroups``: the group's document names the versions served, each version's its
    resources (a version enabled without the GenericWorkload gate lists none). NotFound for the group is
    none served; any other failure raises."""
    try:
        group = api.request("GET", f"/apis/{NATIVE_GANG_GROUP}", timeout=timeout) or {}
    except NotFound:
        return ()
    listed = {v.get("version") for v in group.get("versions") or [] if isinstance(v, dict)}
    served = []
    for version in versions:
        if version not in listed:
            continue
        try:
            found = api.request("GET", f"/apis/{NATIVE_GANG_GROUP}/{version}", timeout=timeout) or {}
        except NotFound:
            continue
        names = {r.get("name") for r in found.get("resources") or [] if isinstance(r, dict)}
        if {"workloads", "podgroups"} <= names:
            served.append(version)
    return tuple(served)


def stored_count(api: Api, res: Resource) -> int | None:
    """How many objects of ``res`` the cluster stores (one page per 500; None when it does not serve ``res``)."""
    count = 0
    try:
        for page in api.pages(res, limit=PAGE):
            count += len(page["items"])
    except NotFound:
        return None
    return count


# --- what the controller uses: its webhook configuration's scope, its config -----------------------

def labelled(api: Api, res: Resource, selector: str, namespace: str | None = None) -> list[dict[str, Any]]:
    """Every object of ``res`` carrying the labels ``selector`` (a label selector string)."""
    items: list[dict[str, Any]] = []
    token = None
    while True:
        query: list[tuple[str, Any]] = [("labelSelector", selector), ("limit", PAGE)]
        body = api.request("GET", res.path(namespace), query=query + ([("continue", token)] if token else []))
        items += [Api._typed(res, item) for item in body.get("items") or []]
        token = (body.get("metadata") or {}).get("continue")
        if not token:
            return items


def installed_scope(api: Api, name: str, release_namespace: str | None = None) -> tuple[Any, dict[str, dict[str, str]]]:
    """Rule W5 for ``plan``/``check --cluster``: the :class:`policylib.scope.Scope` of the installed
    MutatingWebhookConfiguration ``name`` and every Namespace's labels. As the controller's, it fails
    closed: nothing is in it when the configuration is not installed, or the user may not read it or list
    the Namespaces (their labels decide the selectors); its ``closed`` says why. ``release_namespace`` is
    never in scope (rule W6)."""
    from ..scope import closed_scope, namespace_labels, scope_from_configuration
    excluded = {release_namespace} if release_namespace else set()
    try:
        configuration = api.get(MUTATING_WEBHOOKS, None, name)
    except NotFound:
        return closed_scope(f"no MutatingWebhookConfiguration {name} is installed", excluded), {}
    except Forbidden:   # a user who may read workloads but not admission configurations: say so
        return closed_scope(f"MutatingWebhookConfiguration {name} cannot be read (forbidden)", excluded), {}
    scope = scope_from_configuration(configuration, excluded)
    try:
        namespaces, _ = api.list(NAMESPACES)
    except NotFound:   # no Namespace list served: each has only the name label the API server sets
        namespaces = []
    except Forbidden:
        return closed_scope(f"Namespaces cannot be listed (forbidden): the selectors of {scope.source} match their "
                            "labels", scope.excluded_namespaces, scope.source), {}
    return scope, namespace_labels(namespaces)


#: The labels the chart and manifests/ put on the controller's Deployment and on the config's ConfigMap.
CONTROLLER_LABELS = f"app.kubernetes.io/name={CONTROLLER_NAME}"
CONFIG_LABELS = f"app.kubernetes.io/name={WEBHOOK_NAME}"


def _configmap_volumes(deployment: dict[str, Any]) -> list[str]:
    spec = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    return [v["configMap"]["name"] for v in spec.get("volumes") or []
            if isinstance(v, dict) and isinstance(v.get("configMap"), dict) and v["configMap"].get("name")]


class AmbiguousInstall(ValueError):
    """More than one installed policylib config, and nothing says which: the message names them."""


def installed_config(api: Api, release: str | None = None,
                     namespace: str | None = None) -> tuple[dict[str, Any] | None, str]:
    """Rule C10: the ConfigMap holding the config the installed controller reads (the one its Deployment
    mounts; else the chart's labelled ``policylib-config``), as (the ConfigMap, its namespace/name), or
    (None, why none) when nothing is installed. ``release`` keeps the objects of that Helm release
    (``app.kubernetes.io/instance``); ``namespace`` prefers, then requires, that namespace when more
    than one is found. Raises :class:`AmbiguousInstall` naming the candidates when it cannot choose."""
    instance = f",app.kubernetes.io/instance={release}" if release else ""
    found: dict[tuple[str, str], str] = {}
    for d in labelled(api, DEPLOYMENTS, CONTROLLER_LABELS + instance):
        ns = (d.get("metadata") or {}).get("namespace") or "default"
        for cm in _configmap_volumes(d):
            found[(ns, cm)] = f"mounted by Deployment {ns}/{d['metadata'].get('name')}"
    if not found:
        try:
            configmaps = labelled(api, CONFIGMAPS, CONFIG_LABELS + instance)
        except NotFound:
            configmaps = []
        for configmap in configmaps:
            meta = configmap.get("metadata") or {}
            if str(meta.get("name", "")).startswith(CONFIG_MAP) and CONFIG_KEY in (configmap.get("data") or {}):
                found[(meta.get("namespace") or "default", meta["name"])] = "labelled " + CONFIG_LABELS
    if len(found) > 1 and namespace:
        found = {k: v for k, v in found.items() if k[0] == namespace} or found
    if len(found) > 1:
        names = ", ".join(f"{ns}/{name}" for ns, name in sorted(found))
        raise AmbiguousInstall(f"more than one installed policylib config ({names}): name one with --release "
                         "(and -n NAMESPACE), or give --config FILE")
    if not found:
        return None, (f"no policylib controller or config of release {release!r} found" if release else
                      "no policylib controller or config found")
    (ns, name), _how = next(iter(found.items()))
    return api.get(CONFIGMAPS, ns, name), f"{ns}/{name}"
