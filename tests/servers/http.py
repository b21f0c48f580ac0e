"""A real HTTP/1.1 server on 127.0.0.1 for the I/O tests: deterministic bodies, latency, faults.

The server runs an asyncio event loop on one background thread (joined by :meth:`HttpTestServer.stop`),
keeps connections alive, serves any number of concurrent connections, and records every request.

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

import asyncio
import concurrent.futures
import contextlib
import hashlib
import itertools
import json
import random
import socket
import struct
import threading
import time
from collections import defaultdict, deque
from collections.abc import Coroutine, Iterator, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode

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

_FAULTS = ("reset", "truncate", "stall")
_MAX_HEAD = 65536


_POOL_SIZE = 4 * 1024 * 1024
_pool: bytes | None = None
_pool_lock = threading.Lock()


def _random_pool() -> bytes:
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = random.Random("dlrs-test-body-pool").randbytes(_POOL_SIZE + BLOCK_SIZE)
    return _pool


def _block(seed: int, index: int) -> bytes:
    """Block ``index`` of the bodies of ``seed``: a 64 KiB window of a fixed pseudo-random pool
    at an offset hashed from (seed, index) — slicing, not generating, keeps the server fast."""
    digest = hashlib.blake2b(b"%d/%d" % (seed, index), digest_size=8).digest()
    offset = int.from_bytes(digest, "little") % _POOL_SIZE
    return _random_pool()[offset : offset + BLOCK_SIZE]


def _body_blocks(n: int, seed: int, start: int = 0) -> Iterator[bytes]:
    """Yields the bytes ``start..n`` of ``expected_body(n, seed)`` without building it whole."""
    pos = start
    while pos < n:
        index, offset = divmod(pos, BLOCK_SIZE)
        block = _block(seed, index)
        end = min(BLOCK_SIZE, offset + (n - pos))
        yield block[offset:end]
        pos += end - offset


def expected_body(n: int, seed: int = 0) -> bytes:
    """The body of ``/bytes/<n>?seed=<seed>``: ``n`` pseudo-random bytes, a pure function of both.

    Bodies of the same seed share prefixes: ``expected_body(m, s)`` starts ``expected_body(n, s)``
    for ``m <= n``.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    return b"".join(_body_blocks(n, seed))


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
    #: ``time.monotonic()`` when the request head had been read.
    time: float
    #: Which connection carried it (sequence number of the connection on this server, from 0).
    connection: int
    #: What the server did: ``"ok"``, ``"status:<code>"``, ``"reset"``, ``"truncate"``,
    #: ``"stall"``, ``"client-gone"`` (the client left while the answer was being sent), or
    #: ``"pending"`` while the request is in progress.
    outcome: str = "pending"
    #: The parameters that applied (query, defaults and scripted step merged).
    params: dict[str, str] = field(default_factory=dict)


class _BadRequest(Exception):
    pass


class _Body:
    """A response body: its length and a way to stream it from a byte offset."""

    def __init__(self, length: int, blocks: Any) -> None:
        self.length = length
        self._blocks = blocks

    def blocks(self, start: int = 0, stop: int | None = None) -> Iterator[bytes]:
        """Yields the bytes ``start..stop`` of the body in pieces."""
        remaining = (self.length if stop is None else min(stop, self.length)) - start
        for block in self._blocks(start):
            if remaining <= 0:
                return
            piece = block[:remaining]
            remaining -= len(piece)
            yield piece

    def slice(self, start: int, stop: int) -> _Body:
        """The bytes ``start..stop`` of this body."""
        return _Body(stop - start, lambda offset: self.blocks(start + offset, stop))

    def whole(self) -> bytes:
        return b"".join(self.blocks())

    @classmethod
    def of_bytes(cls, data: bytes) -> _Body:
        return cls(len(data), lambda start: iter([data[start:]]))

    @classmethod
    def random(cls, n: int, seed: int) -> _Body:
        return cls(n, lambda start: _body_blocks(n, seed, start))


def _int_param(params: Mapping[str, str], name: str, default: int | None = None) -> int | None:
    value = params.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise _BadRequest(f"{name} must be an integer, got {value!r}") from None


def _float_param(params: Mapping[str, str], name: str, default: float) -> float:
    value = params.get(name)
    if value is None or value == "":
        return default
    try:
        out = float(value)
    except ValueError:
        raise _BadRequest(f"{name} must be a number, got {value!r}") from None
    if out < 0:
        raise _BadRequest(f"{name} must be >= 0, got {value!r}")
    return out


def _truthy(value: str | None) -> bool:
    return value is not None and value.lower() in ("1", "true", "yes", "on")


def _normalize_step(step: str | Mapping[str, Any] | None) -> dict[str, str]:
    if step is None:
        return {}
    if isinstance(step, str):
        return dict(parse_qsl(step.lstrip("?"), keep_blank_values=True))
    return {str(k): str(v) for k, v in step.items()}


class HttpTestServer(LocalServer):
    """An HTTP/1.1 server on ``127.0.0.1`` at a free port, serving the routes of this module.

    Use it as a context manager or call :meth:`start` and :meth:`stop`. ``defaults`` are query
    parameters applied to every request under its own query (e.g. ``delay="0.01"`` for a server
    that always answers after 10 ms).
    """

    def __init__(self, *, idle_timeout: float | None = None, **defaults: Any) -> None:
        super().__init__()
        self.idle_timeout = idle_timeout
        self._defaults = {str(k): str(v) for k, v in defaults.items()}
        self._lock = threading.Lock()
        self._records: list[RequestRecord] = []
        self._scripts: dict[str, deque[dict[str, str]]] = {}
        self._counters: defaultdict[str, int] = defaultdict(int)
        self._in_flight = 0
        self._max_in_flight = 0
        self._open_connections = 0
        self._max_open_connections = 0
        self._connection_ids = itertools.count()
        self._connection_count = 0
        self._errors: list[BaseException] = []
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._connections: set[_Connection] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._files: dict[str, tuple[bytes, str | None, str | None]] = {}

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
        # binds a free port on 127.0.0.1 in the server thread, which reports it through `ready`
        ready: concurrent.futures.Future[int] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._run, args=(ready,), name="dlrs-test-http", daemon=True)
        resources.callback(self._join)
        self._thread.start()
        return ready.result(timeout=10)

    def _join(self) -> None:
        """Closes every connection, stops the loop and joins the server thread."""
        thread, loop, stop_event = self._thread, self._loop, self._stop_event
        if thread is None:
            return
        if loop is not None and stop_event is not None and thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop is already closed
                loop.call_soon_threadsafe(stop_event.set)
        thread.join(timeout=15)
        if thread.is_alive():
            raise RuntimeError("HTTP test server thread did not stop within 15 s")
        self._thread = None

    def _alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # ----------------------------------------------------------------- scripting

    def script(self, path: str, steps: list[str | Mapping[str, Any] | None]) -> None:
        """Queues one step per coming request to ``path`` (exact path, no query).

        A step is a query string (``"status=503&retry_after=1"``, ``"fault=reset"``), a mapping
        of the same parameters, or ``None``/``""`` for a normal answer. Each request to ``path``
        takes the next step and merges it over its own query; once the steps are used up,
        requests are answered as their query says. Calling ``script`` again appends steps.
        """
        normalized = [_normalize_step(s) for s in steps]
        with self._lock:
            self._scripts.setdefault(path, deque()).extend(normalized)

    def fail_first(self, path: str, k: int, step: str | Mapping[str, Any] = "status=503") -> None:
        """The next ``k`` requests to ``path`` get ``step`` (by default a 503); later ones succeed."""
        self.script(path, [step] * k)

    def put_file(self, path: str, body: bytes, *, etag: str | None = None, last_modified: str | None = None) -> None:
        """Serves ``body`` at ``path`` (replacing what was there), with these ``ETag`` and
        ``Last-Modified`` headers (none when None); ranges and faults apply as to any route."""
        with self._lock:
            self._files[path] = (bytes(body), etag, last_modified)

    def remove_file(self, path: str) -> None:
        """Stops serving ``path`` (a 404 from now on)."""
        with self._lock:
            self._files.pop(path, None)

    def set_defaults(self, **defaults: Any) -> None:
        """Replaces the parameters applied under every request's query."""
        with self._lock:
            self._defaults = {str(k): str(v) for k, v in defaults.items()}

    def reset(self) -> None:
        """Forgets the recorded requests, the ``fail=`` counters, the pending scripted steps and
        the maxima (current counts stay)."""
        with self._lock:
            self._records.clear()
            self._scripts.clear()
            self._counters.clear()
            self._max_in_flight = self._in_flight
            self._max_open_connections = self._open_connections

    # ----------------------------------------------------------------- observations

    @property
    def requests(self) -> list[RequestRecord]:
        """A copy of the requests recorded so far, in arrival order."""
        with self._lock:
            return list(self._records)

    def requests_for(self, path: str) -> list[RequestRecord]:
        """The recorded requests whose path is ``path``."""
        return [r for r in self.requests if r.path == path]

    @property
    def in_flight(self) -> int:
        """Requests whose head has been read and whose answer is not finished."""
        with self._lock:
            return self._in_flight

    @property
    def max_in_flight(self) -> int:
        """The most requests in flight at once since start (or :meth:`reset`)."""
        with self._lock:
            return self._max_in_flight

    @property
    def open_connections(self) -> int:
        with self._lock:
            return self._open_connections

    @property
    def max_open_connections(self) -> int:
        with self._lock:
            return self._max_open_connections

    @property
    def connections_opened(self) -> int:
        """How many connections were accepted since start (never reset)."""
        with self._lock:
            return self._connection_count

    @property
    def errors(self) -> list[BaseException]:
        """Unexpected exceptions raised while serving (should stay empty)."""
        with self._lock:
            return list(self._errors)

    # ----------------------------------------------------------------- server thread

    def _run(self, ready: concurrent.futures.Future[int]) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._main(ready))
            loop.run_until_complete(loop.shutdown_asyncgens())
        except BaseException as exc:  # reported through `ready` or `errors`
            if not ready.done():
                ready.set_exception(exc)
            else:
                with self._lock:
                    self._errors.append(exc)
        finally:
            loop.close()
            self._loop = None

    async def _main(self, ready: concurrent.futures.Future[int]) -> None:
        loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        server = await loop.create_server(
            lambda: _Connection(self),
            host=self.host,
            port=0,
            family=socket.AF_INET,
            backlog=1024,
        )
        port = server.sockets[0].getsockname()[1]
        ready.set_result(port)
        try:
            await self._stop_event.wait()
        finally:
            server.close()
            for conn in list(self._connections):
                conn.abort()
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await server.wait_closed()
            # A connection accepted while the server was closing arrives after the aborts
            # above: abort it too, and let the loop close its socket before the loop ends.
            for _ in range(10):
                await asyncio.sleep(0)
                if not self._connections:
                    break
                for conn in list(self._connections):
                    conn.abort()

    # ----------------------------------------------------------------- requests

    def _begin(self, conn: _Connection, head: bytes) -> None:
        """Handles a request head read by ``conn`` (which is busy until :meth:`_finish`)."""
        lines = head[:-4].decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            conn.write_close(_simple_response(400, "bad request line", False))
            return
        method, target, version = parts
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        raw_path, _, raw_query = target.partition("?")
        raw_path = raw_path.partition("#")[0]
        path = unquote(raw_path) if "%" in raw_path else raw_path
        query = _parse_query(raw_query.partition("#")[0])
        conn_header = headers.get("connection", "").lower()
        keep_alive = conn_header != "close" if version == "HTTP/1.1" else conn_header == "keep-alive"

        with self._lock:
            params = dict(self._defaults)
            params.update(query)
            steps = self._scripts.get(path)
            if steps:
                params.update(steps.popleft())
            record = RequestRecord(
                index=len(self._records),
                method=method,
                path=path,
                target=target,
                query=query,
                headers=headers,
                time=time.monotonic(),
                connection=conn.id,
                params=params,
            )
            self._records.append(record)
            self._in_flight += 1
            if self._in_flight > self._max_in_flight:
                self._max_in_flight = self._in_flight
        req = _Request(conn, record, keep_alive)
        conn.current = req
        try:
            delay = _float_param(params, "delay", 0.0)
        except _BadRequest as exc:
            self._answer_bad_request(req, exc)
            return
        if delay > 0:
            assert self._loop is not None
            req.timer = self._loop.call_later(delay, self._answer, req)
        else:
            self._answer(req)

    def _answer(self, req: _Request) -> None:
        req.timer = None
        if req.done:
            return
        try:
            self._answer_or_raise(req)
        except _BadRequest as exc:
            self._answer_bad_request(req, exc)
        except Exception as exc:  # kept for the tests to see
            with self._lock:
                self._errors.append(exc)
            req.conn.abort()
            self._finish(req, keep_alive=False)

    def _answer_bad_request(self, req: _Request, exc: _BadRequest) -> None:
        req.record.outcome = "status:400"
        req.conn.write(_simple_response(400, str(exc), req.keep_alive))
        self._finish(req, req.keep_alive)

    def _answer_or_raise(self, req: _Request) -> None:
        record, params = req.record, req.record.params
        status = _int_param(params, "status")
        fault = params.get("fault") or None
        if fault is not None and fault not in _FAULTS:
            raise _BadRequest(f"fault must be one of {', '.join(_FAULTS)}, got {fault!r}")
        fail = _int_param(params, "fail")
        if fail is not None:
            key = params.get("key") or record.path
            with self._lock:
                self._counters[key] += 1
                count = self._counters[key]
            if count <= fail:
                if status is None and fault is None:
                    status = 503
            else:
                status, fault = None, None

        with self._lock:
            served = self._files.get(record.path)
        file_headers: dict[str, str] = {}
        if served is not None:
            data, etag, last_modified = served
            route_status, body = 200, _Body.of_bytes(data)
            if etag is not None:
                file_headers["ETag"] = etag
            if last_modified is not None:
                file_headers["Last-Modified"] = last_modified
            if_match = record.headers.get("if-match")
            if_unmodified = record.headers.get("if-unmodified-since")
            if (if_match is not None and if_match != "*" and if_match != etag) or (
                if_unmodified is not None and last_modified is not None and if_unmodified != last_modified
            ):
                route_status, body = 412, _Body.of_bytes(b"status 412\n")
        else:
            route_status, body = self._route(record)
        if status is None:
            status = route_status
        keep_alive = req.keep_alive and not _truthy(params.get("close"))
        head_only = record.method == "HEAD"

        if fault == "reset" and params.get("after") is None:
            record.outcome = "reset"
            req.conn.reset()
            self._finish(req, keep_alive=False)
            return

        extra: dict[str, str] = dict(file_headers)
        ok_status = 200
        if status == 200 and "range" in record.headers:
            byte_range = _parse_range(record.headers["range"], body.length)
            if byte_range == "unsatisfiable":
                status = 416
                extra["Content-Range"] = f"bytes */{body.length}"
            elif isinstance(byte_range, tuple):
                first, stop = byte_range
                extra["Content-Range"] = f"bytes {first}-{stop - 1}/{body.length}"
                body = body.slice(first, stop)
                ok_status = 206

        if status != 200:
            record.outcome = f"status:{status}"
            if status == 408:
                keep_alive = False
            if params.get("retry_after"):
                extra["Retry-After"] = params["retry_after"]
            text = body if route_status == status else None
            data = text.whole() if text is not None else f"status {status}\n".encode()
            head = _head(status, len(data), False, keep_alive, extra, "text/plain")
            req.conn.write(head if head_only else head + data)
            self._finish(req, keep_alive)
            return

        chunked = _truthy(params.get("chunked"))
        chunk = _int_param(params, "chunk", 16384)
        assert chunk is not None
        if chunk < 1:
            raise _BadRequest(f"chunk must be >= 1, got {chunk}")
        content_type = "application/json" if record.path == "/echo" else "application/octet-stream"
        if fault is None:
            record.outcome = "ok"  # decided now; becomes "client-gone" if the client leaves
            head = _head(ok_status, body.length, chunked, keep_alive, extra, content_type)
            if head_only:
                req.conn.write(head)
                self._finish(req, keep_alive)
            elif not chunked and body.length <= _INLINE_BODY:
                req.conn.write(head + body.whole())
                self._finish(req, keep_alive)
            else:
                self._spawn(req, self._stream(req, head, body, chunked, chunk, keep_alive))
            return

        default_after = body.length // 2 if fault == "truncate" else 0
        after = _int_param(params, "after", default_after)
        assert after is not None
        stall = _float_param(params, "stall", 3600.0)
        record.outcome = fault
        head = _head(ok_status, body.length, chunked, False, extra, content_type)
        self._spawn(req, self._fault(req, fault, head, body, chunked, chunk, after, stall, head_only))

    def _spawn(self, req: _Request, coro: Coroutine[Any, Any, None]) -> None:
        assert self._loop is not None
        task = self._loop.create_task(coro)
        req.task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _stream(
        self,
        req: _Request,
        head: bytes,
        body: _Body,
        chunked: bool,
        chunk: int,
        keep_alive: bool,
    ) -> None:
        try:
            await req.conn.write_blocks(head, body.blocks(), chunked, chunk, terminate=True)
        except ConnectionError:
            req.record.outcome = "client-gone"
            self._finish(req, keep_alive=False)
            return
        self._finish(req, keep_alive)

    async def _fault(
        self,
        req: _Request,
        fault: str,
        head: bytes,
        body: _Body,
        chunked: bool,
        chunk: int,
        after: int,
        stall: float,
        head_only: bool,
    ) -> None:
        conn = req.conn
        try:
            blocks = iter(()) if head_only else body.blocks(0, after)
            await conn.write_blocks(head, blocks, chunked, chunk, terminate=False)
            if fault == "reset":
                await conn.flush()
                conn.reset()
            elif fault == "stall":
                await conn.flush()
                try:
                    # ends early when the client sends anything, closes, or leaves
                    async with asyncio.timeout(stall):
                        await conn.client_activity()
                except TimeoutError:
                    pass
        except ConnectionError:
            pass
        self._finish(req, keep_alive=False)

    def _finish(self, req: _Request, keep_alive: bool) -> None:
        """Ends ``req`` (once): counts it out, then closes the connection or reads the next request."""
        if req.done:
            return
        req.done = True
        if req.timer is not None:
            req.timer.cancel()
            req.timer = None
        with self._lock:
            self._in_flight -= 1
        conn = req.conn
        conn.current = None
        if keep_alive and not conn.closed:
            conn.next_request()
        else:
            conn.close()

    def _client_gone(self, req: _Request) -> None:
        """``req``'s connection was lost before its answer was finished."""
        if req.done:
            return
        if req.record.outcome in ("pending", "ok") or req.record.outcome.startswith("status:"):
            req.record.outcome = "client-gone"
        if req.task is not None and not req.task.done():
            req.task.cancel()
        self._finish(req, keep_alive=False)

    def _connection_opened(self) -> int:
        with self._lock:
            self._connection_count += 1
            self._open_connections += 1
            if self._open_connections > self._max_open_connections:
                self._max_open_connections = self._open_connections
            return next(self._connection_ids)

    def _connection_closed(self) -> None:
        with self._lock:
            self._open_connections -= 1

    def _route(self, record: RequestRecord) -> tuple[int, _Body]:
        path = record.path
        params = record.params
        segments = path.strip("/").split("/")
        if path in ("/", "/health"):
            return 200, _Body.of_bytes(b"ok")
        if len(segments) == 2 and segments[0] == "bytes":
            n = _parse_int_segment(segments[1])
            if n is None or n < 0:
                return 404, _Body.of_bytes(b"not found\n")
            seed = _int_param(params, "seed", 0)
            assert seed is not None
            return 200, _Body.random(n, seed)
        if len(segments) == 2 and segments[0] == "item":
            i = _parse_int_segment(segments[1])
            if i is None:
                return 404, _Body.of_bytes(b"not found\n")
            size = _int_param(params, "size")
            if size is not None and size < 0:
                raise _BadRequest(f"size must be >= 0, got {size}")
            if size is None:
                return 200, _Body.of_bytes(item_body(i))
            return 200, _Body.random(size, i)
        if path == "/echo":
            doc = {
                "method": record.method,
                "path": record.path,
                "query": record.query,
                "headers": record.headers,
                "params": record.params,
            }
            return 200, _Body.of_bytes(json.dumps(doc, sort_keys=True).encode())
        if len(segments) == 2 and segments[0] == "status":
            code = _parse_int_segment(segments[1])
            if code is None or not 100 <= code <= 599:
                return 404, _Body.of_bytes(b"not found\n")
            return code, _Body.of_bytes(f"status {code}\n".encode())
        return 404, _Body.of_bytes(b"not found\n")


_INLINE_BODY = 4 * 1024 * 1024


def _head(
    status: int,
    length: int,
    chunked: bool,
    keep_alive: bool,
    extra: Mapping[str, str],
    content_type: str,
) -> bytes:
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Unknown"
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {length}"
    connection = "keep-alive" if keep_alive else "close"
    text = (
        f"HTTP/1.1 {status} {reason}\r\nServer: dlrs-test\r\n"
        f"Content-Type: {content_type}\r\n{framing}\r\nConnection: {connection}\r\n"
    )
    for k, v in extra.items():
        text += f"{k}: {v}\r\n"
    return (text + "\r\n").encode("latin-1")


def _simple_response(status: int, text: str, keep_alive: bool) -> bytes:
    body = (text + "\n").encode()
    return _head(status, len(body), False, keep_alive, {}, "text/plain") + body


def _chunk_encode(block: bytes, chunk: int) -> bytes:
    return b"".join(
        b"%x\r\n" % len(block[off : off + chunk]) + block[off : off + chunk] + b"\r\n"
        for off in range(0, len(block), chunk)
    )


class _Request:
    """A request being answered on a connection."""

    __slots__ = ("conn", "done", "keep_alive", "record", "task", "timer")

    def __init__(self, conn: _Connection, record: RequestRecord, keep_alive: bool) -> None:
        self.conn = conn
        self.record = record
        self.keep_alive = keep_alive
        self.done = False
        self.timer: asyncio.TimerHandle | None = None
        self.task: asyncio.Task[None] | None = None


class _Connection(asyncio.Protocol):
    """One client connection: parses request heads and hands them to the server one at a time
    (requests pipelined behind wait in the buffer)."""

    def __init__(self, server: HttpTestServer) -> None:
        self.server = server
        self.id = -1
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.current: _Request | None = None
        self.closed = False
        self.eof = False
        self._paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._activity: asyncio.Future[None] | None = None
        self._idle: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.id = self.server._connection_opened()
        self.server._connections.add(self)
        self._arm_idle()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server._connections.discard(self)
        self.server._connection_closed()
        self._cancel_idle()
        self._wake_drain(ConnectionResetError("connection lost"))
        self._wake_activity()
        if self.current is not None:
            self.server._client_gone(self.current)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self._wake_activity()
        if self.current is None:
            self._process()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake_activity()
        # keep the transport open while an answer is being written; closed after it
        return self.current is not None

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_drain(None)

    # -- reading

    def _process(self) -> None:
        if self.closed or self.current is not None:
            return
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buffer) > _MAX_HEAD:
                self.write_close(_simple_response(431, "request head too large", False))
            elif self.eof:
                self.close()
            return
        head = bytes(self.buffer[: end + 4])
        need = 0
        lower = head.lower()
        if b"\r\ncontent-length:" in lower:
            value = lower.split(b"\r\ncontent-length:", 1)[1].split(b"\r\n", 1)[0]
            try:
                need = int(value.strip())
            except ValueError:
                self.write_close(_simple_response(400, "bad Content-Length", False))
                return
        elif b"\r\ntransfer-encoding:" in lower:
            self.write_close(_simple_response(501, "request bodies must have a Content-Length", False))
            return
        if len(self.buffer) < end + 4 + need:
            return  # the body is not all here yet
        del self.buffer[: end + 4 + need]
        self._cancel_idle()
        self.server._begin(self, head)

    def next_request(self) -> None:
        """The current answer is done: wait for (or handle) the next request."""
        self._arm_idle()
        if self.buffer or self.eof:
            asyncio.get_running_loop().call_soon(self._process)

    # -- writing

    def write(self, data: bytes) -> None:
        if not self.closed and self.transport is not None:
            self.transport.write(data)

    def write_close(self, data: bytes) -> None:
        self.write(data)
        self.close()

    async def write_blocks(
        self,
        head: bytes,
        blocks: Iterator[bytes],
        chunked: bool,
        chunk: int,
        terminate: bool,
    ) -> None:
        pending = head
        for block in blocks:
            data = _chunk_encode(block, chunk) if chunked else block
            self._checked_write(pending + data if pending else data)
            pending = b""
            await self.drain()
        if chunked and terminate:
            pending += b"0\r\n\r\n"
        if pending:
            self._checked_write(pending)
        await self.drain()

    def _checked_write(self, data: bytes) -> None:
        if self.closed or self.transport is None or self.transport.is_closing():
            raise ConnectionResetError("connection closed")
        self.transport.write(data)

    async def drain(self) -> None:
        if self.closed:
            raise ConnectionResetError("connection closed")
        if self._paused:
            waiter = asyncio.get_running_loop().create_future()
            self._drain_waiters.append(waiter)
            await waiter

    async def flush(self) -> None:
        """Waits until the transport handed everything to the kernel, then a moment more for
        the loopback to carry it (before a reset would discard it)."""
        transport = self.transport
        assert transport is not None
        for _ in range(200):
            if self.closed or transport.get_write_buffer_size() == 0:
                break
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.02)

    async def client_activity(self) -> None:
        """Returns when the client sends data, half-closes or the connection is lost."""
        if self.closed or self.eof:
            return
        self._activity = asyncio.get_running_loop().create_future()
        await self._activity

    def _wake_drain(self, exc: BaseException | None) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                if exc is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(exc)

    def _wake_activity(self) -> None:
        if self._activity is not None and not self._activity.done():
            self._activity.set_result(None)
        self._activity = None

    # -- closing

    def close(self) -> None:
        """Closes after what was written is sent (FIN)."""
        self._cancel_idle()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def abort(self) -> None:
        self._cancel_idle()
        if self.transport is not None:
            self.transport.abort()

    def reset(self) -> None:
        """Aborts with a TCP RST (SO_LINGER 0)."""
        if self.transport is not None:
            sock = self.transport.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.abort()

    def _arm_idle(self) -> None:
        timeout = self.server.idle_timeout
        if timeout is not None and not self.closed:
            self._cancel_idle()
            self._idle = asyncio.get_running_loop().call_later(timeout, self._idle_close)

    def _cancel_idle(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None

    def _idle_close(self) -> None:
        self._idle = None
        if self.current is None:
            self.close()


def _parse_range(value: str, length: int) -> tuple[int, int] | str:
    """``(start, stop)`` of a single ``bytes=`` range over ``length`` bytes; ``"ignore"`` for a
    header this server does not honour (several ranges, another unit, bad syntax: the whole body
    is sent with 200, as RFC 9110 allows); ``"unsatisfiable"`` for a 416."""
    unit, _, spec = value.strip().partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return "ignore"
    first_text, dash, last_text = spec.strip().partition("-")
    if not dash:
        return "ignore"
    try:
        if first_text == "":  # suffix: the last N bytes
            suffix = int(last_text)
            if suffix <= 0:
                return "unsatisfiable"
            return (max(0, length - suffix), length)
        first = int(first_text)
        last = int(last_text) if last_text else length - 1
    except ValueError:
        return "ignore"
    if first < 0 or (last_text and last < first):
        return "ignore"
    if first >= length:
        return "unsatisfiable"
    return (first, min(last, length - 1) + 1)


def _parse_query(raw: str) -> dict[str, str]:
    if not raw:
        return {}
    if "%" in raw or "+" in raw:
        return dict(parse_qsl(raw, keep_blank_values=True))
    out = {}
    for pair in raw.split("&"):
        if pair:
            name, _, value = pair.partition("=")
            out[name] = value
    return out


def _parse_int_segment(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


#: ``with http_server(**defaults) as server:`` starts an :class:`HttpTestServer` and stops it.
http_server = HttpTestServer
