"""The server's answers as it sends them: decoded (orjson where installed), a list page's continue token read
from its head, and the pages of a list fetched one by one or each next one ahead."""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterator

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


def one_by_one(fetch: Fetch) -> Iterator[bytes]:
    """Each page's body, the next asked for when the caller is done with this one."""
    raw, token = fetch(None)
    yield raw
    while token:
        raw, token = fetch(token)
        yield raw


def read_ahead(fetch: Fetch) -> Iterator[bytes]:
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
