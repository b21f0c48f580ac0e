"""A real HTTP/1.1 server on 127.0.0.1 for the I/O tests: deterministic bodies, latency, faults.

The server is dlrs-io's loopback server (``dlrs_io::test_server``) run as ``dlrs serve --control``
in a child process: it keeps connections alive, serves many concurrent connections, records every
request, and never answers before a delay. This module is its client: it starts the process,
reads the two URLs it prints (the routes below, and a control port that takes the settings and
reports the records and counters in JSON), and stops it by closing its stdin.

Routes (GET and HEAD; a request body, if any, is read and ignored):

* ``/bytes/<n>?seed=<s>``  -> ``expected_body(n, s)`` (``seed`` defaults to 0)
* ``/item/<i>``            -> ``item_body(i)``; with ``?size=<n>`` -> ``item_body(i, n)``
* ``/echo``                -> JSON ``{"method", "path", "query", "headers", "params"}`` of the
                              request (``params``: query, defaults and scripted step merged)
* ``/status/<code>``       -> that status, like ``?status=<code>``
* ``/`` and ``/health``    -> ``ok``
* anything else            -> 404

Query parameters understood on every route (a scripted step, see :meth:`HttpTestServer.script`,
uses the same names and is merged over the query):

* ``delay=<s>``            sleep before answering
* ``status=<code>``        answer with that status and a short body instead of the route's body
* ``retry_after=<value>``  add ``Retry-After: <value>`` to a non-2xx answer
* ``fault=reset``          abort the connection with a TCP RST (SO_LINGER 0); with ``after=<b>``,
                           after the headers and at most ``b`` body bytes
* ``fault=truncate``       send the headers (full Content-Length) and ``after`` body bytes
                           (default half of the body), then close the connection
* ``fault=stall``          send the headers and ``after`` body bytes (default 0), then wait
                           ``stall=<s>`` seconds (default 3600) or until the client leaves or the
                           server stops, then close the connection without finishing
* ``fail=<k>``             apply the fault (``status`` or ``fault``; ``status=503`` if neither is
                           given) to the first ``k`` requests of ``key=<name>`` (default: the path)
                           only; later ones are served normally
* ``chunked=1``            send the body with ``Transfer-Encoding: chunked`` (no Content-Length),
                           in chunks of ``chunk=<bytes>`` (default 16384)
* ``close=1``              answer with ``Connection: close`` and close the connection

A ``Range: bytes=a-b`` (or ``a-``, ``-n``) request header gets a 206 with ``Content-Range`` (416
when it starts past the end); several ranges or another unit are ignored (200, whole body).

Files put with :meth:`HttpTestServer.put_file` are served at their path (before the routes above)
with the ``ETag`` and ``Last-Modified`` given; ``If-Match`` (another ETag) and
``If-Unmodified-Since`` (another date) get a 412.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

from ._common import ManagedProcess
from .base import LocalServer

__all__ = [
    "BLOCK_SIZE",
    "HttpTestServer",
    "RequestRecord",
    "expected_body",
    "http_server",
    "item_body",
]

#: Bodies are made of pseudo-random blocks of this size (the last one cut short).
BLOCK_SIZE = 65536

_MASK = (1 << 64) - 1
_POOL_WORDS = 1 << 17
_POOL_SIZE = _POOL_WORDS * 8


def _mix(z: int) -> int:
    """splitmix64's output for ``z``: the one hash the Rust server computes too."""
    z = (z + 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


@functools.cache
def _pool() -> bytes:
    """Word ``k`` is ``_mix(k)``, little-endian; a block more so that any window fits."""
    return b"".join(_mix(k).to_bytes(8, "little") for k in range(_POOL_WORDS + BLOCK_SIZE // 8))


def _block(seed: int, index: int) -> bytes:
    """Block ``index`` of the bodies of ``seed``: the window of the pool at a hash of both."""
    offset = _mix(_mix(seed & _MASK) ^ index) % _POOL_SIZE
    return _pool()[offset : offset + BLOCK_SIZE]


def expected_body(n: int, seed: int = 0) -> bytes:
    """The body of ``/bytes/<n>?seed=<seed>``: ``n`` pseudo-random bytes, a pure function of both.

    Bodies of the same seed share prefixes: ``expected_body(m, s)`` starts ``expected_body(n, s)``
    for ``m <= n``.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    blocks = [_block(seed, index) for index in range(-(-n // BLOCK_SIZE))]
    return b"".join(blocks)[:n]


def item_body(i: int, size: int | None = None) -> bytes:
    """The body of ``/item/<i>`` (``b"item-<i>"``), or of ``/item/<i>?size=<size>``
    (``expected_body(size, seed=i)``)."""
    if size is None:
        return b"item-%d" % i
    return expected_body(size, seed=i)


@dataclass
class RequestRecord:
    """One request as the server saw it."""

    #: Sequence number of the request on this server, from 0.
    index: int
    method: str
    #: Decoded path without the query, e.g. ``/bytes/10``.
    path: str
    #: The raw request target, e.g. ``/bytes/10?seed=3``.
    target: str
    #: Query parameters (the last value of a repeated name wins).
    query: dict[str, str]
    #: Header names lower-cased (the last value of a repeated header wins).
    headers: dict[str, str]
    #: ``time.monotonic()`` when the request head had been read (within a few hundred µs).
    time: float
    #: Which connection carried it (sequence number of the connection on this server, from 0).
    connection: int
    #: What the server did: ``"ok"``, ``"status:<code>"``, ``"reset"``, ``"truncate"``,
    #: ``"stall"``, ``"client-gone"`` (the client left while the answer was being sent), or
    #: ``"pending"`` while the request is in progress.
    outcome: str = "pending"
    #: The parameters that applied (query, defaults and scripted step merged).
    params: dict[str, str] = field(default_factory=dict)


def _normalize_step(step: str | Mapping[str, Any] | None) -> dict[str, str]:
    if step is None:
        return {}
    if isinstance(step, str):
        return dict(parse_qsl(step.lstrip("?"), keep_blank_values=True))
    return {str(k): str(v) for k, v in step.items()}


def _dlrs() -> list[str]:
    """The ``dlrs`` command of this interpreter's dataloader_rs."""
    script = Path(sys.executable).with_name("dlrs")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from dataloader_rs._cli import main; sys.exit(main())"]


class HttpTestServer(LocalServer):
    """An HTTP/1.1 server on ``127.0.0.1`` at a free port, serving the routes of this module.

    Use it as a context manager or call :meth:`start` and :meth:`stop`. ``defaults`` are query
    parameters applied to every request under its own query (e.g. ``delay="0.01"`` for a server
    that always answers after 10 ms).
    """

    name = "dlrs-serve"

    def __init__(self, *, idle_timeout: float | None = None, **defaults: Any) -> None:
        super().__init__()
        self.idle_timeout = idle_timeout
        self._defaults = {str(k): str(v) for k, v in defaults.items()}
        self._control = ""
        # time.monotonic() minus the server's clock (seconds since its start)
        self._clock_offset = 0.0

    # ----------------------------------------------------------------- URLs

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``"""
        return self.endpoint

    def url(self, path: str, **query: Any) -> str:
        """The URL of ``path`` with ``query`` (values are str()-ed; ``None`` values dropped)."""
        if not path.startswith("/"):
            path = "/" + path
        q = {k: str(v) for k, v in query.items() if v is not None}
        return self.base_url + path + ("?" + urlencode(q) if q else "")

    def bytes_url(self, n: int, seed: int = 0, **query: Any) -> str:
        """URL of ``/bytes/<n>?seed=<seed>``: its body is ``expected_body(n, seed)``."""
        return self.url(f"/bytes/{n}", seed=seed, **query)

    def item_url(self, i: int, **query: Any) -> str:
        """URL of ``/item/<i>``: its body is ``item_body(i, query.get("size"))``."""
        return self.url(f"/item/{i}", **query)

    # ----------------------------------------------------------------- life cycle

    def _launch(self, resources: contextlib.ExitStack) -> int:
        argv = [*_dlrs(), "serve", "--control"]
        if self.idle_timeout is not None:
            argv += ["--idle-timeout", str(self.idle_timeout)]
        self._proc = ManagedProcess(argv, name=self.name, stdin=True)
        resources.callback(self._end_process)
        base, self._control = self._proc.first_lines(2, timeout=self.ready_timeout)
        if self._defaults:
            self.set_defaults(**self._defaults)
        before = time.monotonic()
        now = self._counters()["now"]
        self._clock_offset = (before + time.monotonic()) / 2 - now
        return int(base.rpartition(":")[2])

    def _call(self, method: str, route: str, body: bytes | None = None, /, **query: str) -> Any:
        """The JSON answer of the control port to ``method route?query`` with ``body``."""
        if not self._control:
            raise RuntimeError("server not started")
        url = self._control + route + ("?" + urlencode(query) if query else "")
        req = urllib.request.Request(url, data=body, method=method)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:500]
            exc.close()
            raise RuntimeError(f"{method} {route}: HTTP {exc.code}: {detail}") from None

    def _counters(self) -> dict[str, Any]:
        return dict(self._call("GET", "/counters"))

    # ----------------------------------------------------------------- scripting

    def script(self, path: str, steps: list[str | Mapping[str, Any] | None]) -> None:
        """Queues one step per coming request to ``path`` (exact path, no query).

        A step is a query string (``"status=503&retry_after=1"``, ``"fault=reset"``), a mapping
        of the same parameters, or ``None``/``""`` for a normal answer. Each request to ``path``
        takes the next step and merges it over its own query; once the steps are used up,
        requests are answered as their query says. Calling ``script`` again appends steps.
        """
        normalized = [_normalize_step(s) for s in steps]
        self._call("POST", "/script", json.dumps(normalized).encode(), path=path)

    def fail_first(self, path: str, k: int, step: str | Mapping[str, Any] = "status=503") -> None:
        """The next ``k`` requests to ``path`` get ``step`` (by default a 503); later ones succeed."""
        self.script(path, [step] * k)

    def put_file(self, path: str, body: bytes, *, etag: str | None = None, last_modified: str | None = None) -> None:
        """Serves ``body`` at ``path`` (replacing what was there), with these ``ETag`` and
        ``Last-Modified`` headers (none when None); ranges and faults apply as to any route."""
        headers = {"etag": etag, "last_modified": last_modified}
        self._call("PUT", "/file", bytes(body), path=path, **{k: v for k, v in headers.items() if v is not None})

    def remove_file(self, path: str) -> None:
        """Stops serving ``path`` (a 404 from now on)."""
        self._call("DELETE", "/file", path=path)

    def set_defaults(self, **defaults: Any) -> None:
        """Replaces the parameters applied under every request's query."""
        self._defaults = {str(k): str(v) for k, v in defaults.items()}
        self._call("PUT", "/defaults", json.dumps(self._defaults).encode())

    def reset(self) -> None:
        """Forgets the recorded requests, the ``fail=`` counters, the pending scripted steps and
        the maxima (current counts stay)."""
        self._call("POST", "/reset", b"")

    # ----------------------------------------------------------------- observations

    @property
    def requests(self) -> list[RequestRecord]:
        """A copy of the requests recorded so far, in arrival order."""
        records = self._call("GET", "/requests")
        for record in records:
            record["time"] += self._clock_offset
        return [RequestRecord(**record) for record in records]

    def requests_for(self, path: str) -> list[RequestRecord]:
        """The recorded requests whose path is ``path``."""
        return [r for r in self.requests if r.path == path]

    @property
    def in_flight(self) -> int:
        """Requests whose head has been read and whose answer is not finished."""
        return int(self._counters()["in_flight"])

    @property
    def max_in_flight(self) -> int:
        """The most requests in flight at once since start (or :meth:`reset`)."""
        return int(self._counters()["max_in_flight"])

    @property
    def open_connections(self) -> int:
        return int(self._counters()["open_connections"])

    @property
    def max_open_connections(self) -> int:
        return int(self._counters()["max_open_connections"])

    @property
    def connections_opened(self) -> int:
        """How many connections were accepted since start (never reset)."""
        return int(self._counters()["connections_opened"])

    @property
    def errors(self) -> list[BaseException]:
        """Unexpected exceptions raised while serving: the Rust server has none to report (a
        request it cannot parse gets a 400), so this stays empty."""
        return []


#: ``with http_server(**defaults) as server:`` starts an :class:`HttpTestServer` and stops it.
http_server = HttpTestServer
