"""Tests of the local test servers in tests/servers: each starts, serves, injects the faults it
declares, and stops without leaving threads, processes or listening ports behind."""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import os
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import wait_until
from servers._common import (
    ALLOW_MISSING_ENV,
    METADATA_BLACKHOLE,
    ServiceUnavailable,
    cloud_isolation_env,
)
from servers.azure import ACCOUNT, ACCOUNT_KEY, AzuriteServer, _sign, azurite_binary

# the fixtures, as a conftest would bring them in
from servers.fixtures import *  # noqa: F403, RUF100
from servers.fixtures import (
    ObjectStoreCase,
    missing_service,
    requires_azurite,
    requires_gcs,
    requires_s3,
    start_or_skip,
)
from servers.gcs import GcsTestServer
from servers.http import (
    BLOCK_SIZE,
    HttpTestServer,
    expected_body,
    item_body,
)
from servers.s3 import S3TestServer

pytestmark = pytest.mark.timeout(60)


# --------------------------------------------------------------------------- helpers


def _get(url: str, headers: dict[str, str] | None = None, timeout: float = 10) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return (
                resp.status,
                {k.lower(): v for k, v in resp.getheaders()},
                resp.read(),
            )
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()


def _raw_exchange(port: int, request: bytes, timeout: float = 10) -> tuple[bytes, BaseException | None]:
    """Sends ``request`` on a new connection and reads until EOF, a reset or the timeout.

    Returns what arrived and the exception that ended the read (None for a clean EOF).
    """
    chunks: list[bytes] = []
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request)
        while True:
            try:
                data = sock.recv(65536)
            except OSError as exc:
                return b"".join(chunks), exc
            if not data:
                return b"".join(chunks), None
            chunks.append(data)


def _exchange(
    port: int, target: str, more_headers: str = ""
) -> tuple[BaseException | None, int, dict[str, str], bytes]:
    """:func:`_raw_exchange` of a GET of ``target`` (``more_headers``: header lines, each ending
    with CRLF): the exception that ended the read and the answer's status, headers and body."""
    raw, err = _raw_exchange(port, f"GET {target} HTTP/1.1\r\nHost: x\r\n{more_headers}\r\n".encode())
    return (err, *_split_response(raw))


def _split_response(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, body


def _port_closed(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return False
    except ConnectionRefusedError:
        return True


def _serve_children() -> set[int]:
    """The children of this process that run ``dlrs serve``."""
    children = set()
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            ppid = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            if ppid == os.getpid() and b"serve" in (entry / "cmdline").read_bytes().split(b"\0"):
                children.add(int(entry.name))
    return children


def _process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


# --------------------------------------------------------------------------- bodies


@pytest.mark.parametrize("n", [0, 1, 100, BLOCK_SIZE - 1, BLOCK_SIZE, BLOCK_SIZE + 1, 3 * BLOCK_SIZE + 17])
def test_expected_body_has_length_and_shares_prefixes(n: int) -> None:
    body = expected_body(n, seed=5)
    assert len(body) == n
    longer = expected_body(n + 1000, seed=5)
    assert longer[:n] == body
    assert expected_body(n, seed=5) == body  # a pure function


def test_expected_body_depends_on_seed_and_is_not_constant() -> None:
    a, b = expected_body(4096, seed=1), expected_body(4096, seed=2)
    assert a != b
    assert len(set(a)) > 200  # pseudo-random bytes, not a fill pattern
    # blocks differ from one another (a repeated block would hide a misplaced range)
    big = expected_body(2 * BLOCK_SIZE, seed=1)
    assert big[:BLOCK_SIZE] != big[BLOCK_SIZE:]
    with pytest.raises(ValueError, match="n must be >= 0"):
        expected_body(-1)


def test_item_body() -> None:
    assert item_body(7) == b"item-7"
    assert item_body(-3) == b"item--3"
    assert item_body(7, 1000) == expected_body(1000, seed=7)


# --------------------------------------------------------------------------- HTTP: routes


@pytest.mark.parametrize("n", [0, 1, 65536, 200_001])
def test_http_bytes_route_serves_expected_body(http_server: HttpTestServer, n: int) -> None:
    status, headers, body = _get(http_server.bytes_url(n, seed=9))
    assert status == 200
    assert headers["content-length"] == str(n)
    assert body == expected_body(n, 9)


def test_http_item_route_and_urls(http_server: HttpTestServer) -> None:
    assert http_server.item_url(3) == f"http://127.0.0.1:{http_server.port}/item/3"
    assert http_server.url("echo", a=1, b=None) == f"http://127.0.0.1:{http_server.port}/echo?a=1"
    assert _get(http_server.item_url(3))[2] == b"item-3"
    assert _get(http_server.item_url(3, size=70000))[2] == expected_body(70000, 3)
    # the server's bodies are Rust's: negative and 64-bit seeds agree with Python's too
    assert _get(http_server.item_url(-3, size=1000))[2] == item_body(-3, 1000)
    assert _get(http_server.bytes_url(1000, seed=2**63 + 5))[2] == expected_body(1000, 2**63 + 5)
    assert _get(http_server.url("/health"))[2] == b"ok"
    assert _get(http_server.url("/nope"))[0] == 404
    assert _get(http_server.url("/bytes/abc"))[0] == 404


def test_http_large_body_streams_intact(http_server: HttpTestServer) -> None:
    n = 24 * 1024 * 1024 + 3
    digest = hashlib.sha256()
    received = 0
    with urllib.request.urlopen(http_server.bytes_url(n, seed=1), timeout=30) as resp:
        assert resp.headers["Content-Length"] == str(n)
        while chunk := resp.read(1 << 20):
            digest.update(chunk)
            received += len(chunk)
    assert received == n
    assert digest.hexdigest() == hashlib.sha256(expected_body(n, 1)).hexdigest()


def test_http_head(http_server: HttpTestServer) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", http_server.port, timeout=10)
    try:
        conn.request("HEAD", "/bytes/1234")
        resp = conn.getresponse()
        assert resp.status == 200
        assert resp.getheader("Content-Length") == "1234"
        assert resp.read() == b""
        # the connection is still usable afterwards
        conn.request("GET", "/item/1")
        assert conn.getresponse().read() == b"item-1"
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("header", "status", "content_range", "start", "stop"),
    [
        ("bytes=0-9", 206, "bytes 0-9/1000", 0, 10),
        ("bytes=990-", 206, "bytes 990-999/1000", 990, 1000),
        ("bytes=-5", 206, "bytes 995-999/1000", 995, 1000),
        ("bytes=995-2000", 206, "bytes 995-999/1000", 995, 1000),
        ("bytes=0-", 206, "bytes 0-999/1000", 0, 1000),
        ("bytes=1000-", 416, "bytes */1000", 0, 0),
        ("bytes=0-1,5-6", 200, None, 0, 1000),  # several ranges: ignored, whole body
        ("items=0-1", 200, None, 0, 1000),
    ],
)
def test_http_range_requests(
    http_server: HttpTestServer, header: str, status: int, content_range: str | None, start: int, stop: int
) -> None:
    got_status, headers, body = _get(http_server.bytes_url(1000, seed=2), headers={"Range": header})
    assert got_status == status
    assert headers.get("content-range") == content_range
    if status != 416:
        assert headers["content-length"] == str(stop - start)
        assert body == expected_body(1000, 2)[start:stop]


def test_http_range_of_a_large_body_with_a_fault(http_server: HttpTestServer) -> None:
    n = 3 * BLOCK_SIZE
    status, headers, body = _get(http_server.bytes_url(n, seed=1), headers={"Range": "bytes=70000-200000"})
    assert (status, headers["content-range"]) == (206, f"bytes 70000-{n - 1}/{n}")
    assert body == expected_body(n, 1)[70000:]
    url = http_server.bytes_url(n, seed=1, fault="truncate")
    with pytest.raises(http.client.IncompleteRead):
        urllib.request.urlopen(urllib.request.Request(url, headers={"Range": "bytes=10-109"}), timeout=10).read()


def test_http_echo_returns_request_headers(http_server: HttpTestServer) -> None:
    status, headers, body = _get(
        http_server.url("/echo", q="x y"),
        headers={"Authorization": "Bearer s3cret", "X-Custom": "1"},
    )
    assert status == 200
    assert headers["content-type"] == "application/json"
    doc = json.loads(body)
    assert doc["method"] == "GET"
    assert doc["path"] == "/echo"
    assert doc["query"] == {"q": "x y"}
    assert doc["headers"]["authorization"] == "Bearer s3cret"
    assert doc["headers"]["x-custom"] == "1"
    assert doc["params"] == {"q": "x y"}


def test_http_records_requests(http_server: HttpTestServer) -> None:
    _get(http_server.url("/item/1", seed=4), headers={"Authorization": "Basic abc"})
    _get(http_server.url("/item/2"))
    first, second = http_server.requests
    assert (first.index, first.method, first.path, first.target) == (
        0,
        "GET",
        "/item/1",
        "/item/1?seed=4",
    )
    assert first.query == {"seed": "4"}
    assert first.headers["authorization"] == "Basic abc"
    assert first.outcome == "ok"
    assert second.path == "/item/2"
    assert "authorization" not in second.headers
    assert first.time <= second.time
    assert [r.path for r in http_server.requests_for("/item/2")] == ["/item/2"]
    http_server.reset()
    assert http_server.requests == []


# --------------------------------------------------------------------------- HTTP: connections


def test_http_keeps_connections_alive(http_server: HttpTestServer) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", http_server.port, timeout=10)
    try:
        for i in range(5):
            conn.request("GET", f"/item/{i}")
            resp = conn.getresponse()
            assert resp.getheader("Connection") == "keep-alive"
            assert resp.read() == item_body(i)
    finally:
        conn.close()
    assert {r.connection for r in http_server.requests} == {0}
    assert http_server.connections_opened == 1


def test_http_idle_timeout_closes_idle_connections(
    http_server_factory: Callable[..., HttpTestServer],
) -> None:
    server = http_server_factory(idle_timeout=0.2)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"GET /item/4 HTTP/1.1\r\nHost: x\r\n\r\n")
        got = b""
        while not got.endswith(b"item-4"):
            got += sock.recv(65536)
        assert sock.recv(65536) == b""  # closed by the server once idle, well before the 10 s timeout
    assert wait_until(lambda: server.open_connections == 0, timeout=20)


def test_http_connection_close_request_closes(http_server: HttpTestServer) -> None:
    err, status, headers, body = _exchange(http_server.port, "/item/1", "Connection: close\r\n")
    assert err is None  # the server closed the connection cleanly after the answer
    assert (status, headers["connection"], body) == (200, "close", b"item-1")


def test_http_serves_64_concurrent_requests_and_counts_in_flight(
    http_server: HttpTestServer,
) -> None:
    n = 70
    results: list[bytes] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def fetch(i: int) -> None:
        try:
            # Long enough for all 70 threads to start and send under a heavy load (3 s was not
            # with two other processes busy on both CPUs: 52 of 70 at once).
            body = _get(http_server.item_url(i, delay=8), timeout=30)[2]
        except BaseException as exc:
            with lock:
                errors.append(exc)
            return
        with lock:
            results.append(body)

    threads = [threading.Thread(target=fetch, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    reached = wait_until(lambda: http_server.in_flight == n, timeout=30)
    for t in threads:
        t.join(timeout=40)
    assert reached, f"in flight peaked at {http_server.max_in_flight}"
    assert http_server.max_in_flight == n
    assert http_server.max_open_connections >= n
    assert errors == []
    assert sorted(results) == sorted(item_body(i) for i in range(n))
    assert wait_until(lambda: http_server.in_flight == 0, timeout=20)


def test_http_delay_default_and_query(
    http_server_factory: Callable[..., HttpTestServer],
) -> None:
    server = http_server_factory(delay=0.2)
    start = time.monotonic()
    assert _get(server.item_url(1))[2] == b"item-1"
    # a lower bound only: the answer cannot come before the delay
    assert time.monotonic() - start >= 0.19
    assert server.requests[0].params["delay"] == "0.2"
    start = time.monotonic()
    _get(server.item_url(2, delay=0))
    assert server.requests[1].params["delay"] == "0"


# --------------------------------------------------------------------------- HTTP: faults


@pytest.mark.parametrize("code", [404, 408, 429, 500, 503])
def test_http_status_faults(http_server: HttpTestServer, code: int) -> None:
    status, headers, body = _get(http_server.item_url(1, status=code, retry_after=2))
    assert status == code
    assert headers["retry-after"] == "2"
    assert body == f"status {code}\n".encode()
    assert http_server.requests[0].outcome == f"status:{code}"
    if code == 408:
        assert headers["connection"] == "close"


def test_http_status_route_and_retry_after_date(http_server: HttpTestServer) -> None:
    date = "Wed, 21 Oct 2015 07:28:00 GMT"
    status, headers, body = _get(http_server.url("/status/503", retry_after=date))
    assert (status, headers["retry-after"], body) == (503, date, b"status 503\n")
    status, headers, _ = _get(http_server.url("/status/500"))
    assert status == 500
    assert "retry-after" not in headers


def test_http_fail_first_k_per_key(http_server: HttpTestServer) -> None:
    statuses = [_get(http_server.item_url(1, fail=2, key="a"))[0] for _ in range(4)]
    assert statuses == [503, 503, 200, 200]
    # the counter is per key: another key starts afresh, the same key on another path does not
    assert _get(http_server.item_url(2, fail=1, key="b"))[0] == 503
    assert _get(http_server.item_url(3, fail=2, key="a"))[0] == 200
    # default key is the path; the fault can be any status or a connection fault
    assert [_get(http_server.item_url(9, fail=1, status=429))[0] for _ in range(2)] == [
        429,
        200,
    ]
    with pytest.raises((ConnectionError, http.client.RemoteDisconnected, urllib.error.URLError)):
        _get(http_server.item_url(10, fail=1, fault="reset"))
    assert _get(http_server.item_url(10, fail=1, fault="reset"))[2] == b"item-10"


def test_http_scripted_plan(http_server: HttpTestServer) -> None:
    http_server.script(
        "/item/5",
        ["status=503&retry_after=1", {"status": 429}, None, "fault=reset", ""],
    )
    got = [_get(http_server.item_url(5))[0] for _ in range(3)]
    assert got == [503, 429, 200]
    with pytest.raises((ConnectionError, http.client.RemoteDisconnected, urllib.error.URLError)):
        _get(http_server.item_url(5))
    assert _get(http_server.item_url(5))[0] == 200
    assert _get(http_server.item_url(5))[0] == 200  # steps used up: normal answers
    assert [r.outcome for r in http_server.requests_for("/item/5")] == [
        "status:503",
        "status:429",
        "ok",
        "reset",
        "ok",
        "ok",
    ]
    http_server.fail_first("/item/6", 2)
    assert [_get(http_server.item_url(6))[0] for _ in range(3)] == [503, 503, 200]
    # another path is not affected
    assert _get(http_server.item_url(7))[0] == 200


def test_http_reset_before_answer(http_server: HttpTestServer) -> None:
    raw, err = _raw_exchange(http_server.port, b"GET /item/1?fault=reset HTTP/1.1\r\nHost: x\r\n\r\n")
    assert raw == b""
    assert isinstance(err, ConnectionResetError)
    assert http_server.requests[0].outcome == "reset"


def test_http_reset_after_headers(http_server: HttpTestServer) -> None:
    err, status, headers, body = _exchange(http_server.port, "/bytes/100000?fault=reset&after=10")
    assert isinstance(err, ConnectionResetError)
    assert (status, headers["content-length"]) == (200, "100000")
    assert body == expected_body(100000)[: len(body)]
    assert len(body) <= 10


def test_http_truncated_body(http_server: HttpTestServer) -> None:
    err, status, headers, body = _exchange(http_server.port, "/bytes/1000?seed=2&fault=truncate")
    assert err is None  # closed with a FIN after half of the body
    assert (status, headers["content-length"], headers["connection"]) == (
        200,
        "1000",
        "close",
    )
    assert body == expected_body(1000, 2)[:500]
    with pytest.raises(http.client.IncompleteRead):
        urllib.request.urlopen(http_server.bytes_url(1000, fault="truncate", after=100), timeout=10).read()


def test_http_stall_sends_headers_then_nothing(http_server: HttpTestServer) -> None:
    with socket.create_connection(("127.0.0.1", http_server.port), timeout=10) as sock:
        sock.sendall(b"GET /bytes/1000?fault=stall&after=7 HTTP/1.1\r\nHost: x\r\n\r\n")
        got = b""
        while b"\r\n\r\n" not in got or len(got.partition(b"\r\n\r\n")[2]) < 7:
            got += sock.recv(65536)
        status, headers, body = _split_response(got)
        assert (status, headers["content-length"], body) == (
            200,
            "1000",
            expected_body(1000)[:7],
        )
        sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            sock.recv(65536)
        assert http_server.in_flight == 1
    # the client left: the server notices and ends the stall
    assert wait_until(lambda: http_server.in_flight == 0, timeout=20)
    assert http_server.requests[0].outcome == "stall"


def test_http_stall_with_duration_then_close(http_server: HttpTestServer) -> None:
    err, status, headers, body = _exchange(http_server.port, "/bytes/50?fault=stall&stall=0.2")
    assert err is None
    assert (status, headers["content-length"], body) == (200, "50", b"")


def test_http_chunked_body(http_server: HttpTestServer) -> None:
    target = "/bytes/1000?seed=3&chunked=1&chunk=300"
    err, status, headers, body = _exchange(http_server.port, target, "Connection: close\r\n")
    assert err is None
    assert status == 200
    assert headers["transfer-encoding"] == "chunked"
    assert "content-length" not in headers
    data = expected_body(1000, 3)
    expected = b"".join(b"%x\r\n" % len(data[i : i + 300]) + data[i : i + 300] + b"\r\n" for i in range(0, 1000, 300))
    assert body == expected + b"0\r\n\r\n"
    # a client decodes it
    assert _get(http_server.bytes_url(5_000_000, seed=3, chunked=1))[2] == expected_body(5_000_000, 3)


def test_http_chunked_truncated(http_server: HttpTestServer) -> None:
    with pytest.raises(http.client.IncompleteRead):
        urllib.request.urlopen(http_server.bytes_url(100_000, chunked=1, fault="truncate"), timeout=10).read()


def test_http_bad_parameters_are_400(http_server: HttpTestServer) -> None:
    for query in (
        {"delay": "x"},
        {"fault": "explode"},
        {"seed": "1.5"},
        {"delay": "-1"},
    ):
        status, _, body = _get(http_server.url("/bytes/10", **query))
        assert status == 400, query
        assert body.startswith(next(iter(query)).encode()), body


# --------------------------------------------------------------------------- HTTP: life cycle


def test_http_stop_ends_the_process_and_closes_connections() -> None:
    server = HttpTestServer().start()
    port, pid = server.port, server.pid
    assert pid is not None
    assert not _process_gone(pid)
    idle = socket.create_connection(("127.0.0.1", port), timeout=10)  # an idle keep-alive client
    stalled = socket.create_connection(("127.0.0.1", port), timeout=10)  # a stalled answer
    try:
        idle.sendall(b"GET /item/1 HTTP/1.1\r\nHost: x\r\n\r\n")
        got = b""
        while not got.endswith(b"item-1"):
            got += idle.recv(65536)
        stalled.sendall(b"GET /bytes/10?fault=stall HTTP/1.1\r\nHost: x\r\n\r\n")
        assert wait_until(lambda: server.in_flight == 1, timeout=20)
    finally:
        server.stop()
    assert not server.running
    assert _process_gone(pid)
    assert _port_closed(port)
    for sock in (idle, stalled):
        with sock:
            # the server closed it: EOF (or a reset) comes, not a timeout
            try:
                while sock.recv(65536):
                    pass
            except ConnectionResetError:
                pass
    server.stop()  # idempotent
    assert server.errors == []


def test_http_context_manager_and_restart_refused() -> None:
    with HttpTestServer() as server:
        assert server.running
        with pytest.raises(RuntimeError, match="already started"):
            server.start()
        assert _get(server.item_url(1))[2] == b"item-1"
    assert not server.running


# --------------------------------------------------------------------------- S3


@requires_s3
def test_s3_serves_signed_objects_and_refuses_unsigned(s3_server: S3TestServer, s3_bucket: str) -> None:
    body = expected_body(100_000, 4)
    s3_server.put_objects(s3_bucket, {"a/1.bin": body, "a/2.bin": b""})
    assert s3_server.get_object(s3_bucket, "a/1.bin") == body
    assert s3_server.get_object(s3_bucket, "a/2.bin") == b""
    status, _, _ = _get(f"{s3_server.endpoint}/{s3_bucket}/a/1.bin")
    assert status == 403
    assert s3_server.url(s3_bucket, "a/1.bin") == f"s3://{s3_bucket}/a/1.bin"


@requires_s3
def test_s3_options_and_env(s3_server: S3TestServer) -> None:
    opts = s3_server.options()
    assert opts == {
        "aws_endpoint": f"http://127.0.0.1:{s3_server.port}",
        "aws_allow_http": "true",
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
        "aws_region": "us-east-1",
    }
    env = s3_server.env()
    assert env["AWS_ENDPOINT"] == opts["aws_endpoint"]
    assert env["AWS_ACCESS_KEY_ID"] == "testing"


@requires_s3
def test_s3_stop_joins_threads_even_with_open_connections() -> None:
    before = set(threading.enumerate())
    server = start_or_skip(S3TestServer())
    port = server.port
    bucket = server.create_bucket()
    server.put_object(bucket, "k", b"v")
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)  # left open, idle
    conn.request("GET", f"/{bucket}/k")
    resp = conn.getresponse()
    resp.read()
    assert resp.status == 403
    server.stop()
    conn.close()
    assert _port_closed(port)
    leaked = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    assert leaked == []
    server.stop()  # idempotent


# --------------------------------------------------------------------------- GCS and Azure


def _put_and_get_back(
    put_many: Callable[[str, dict[str, bytes]], None],
    get: Callable[[str, str], bytes],
    bucket: str,
    body: bytes,
) -> None:
    """Uploads ``body``, a key with a space and an empty object; each reads back the same."""
    put_many(bucket, {"dir/a.bin": body, "dir/with space.bin": b"x", "empty": b""})
    assert get(bucket, "dir/a.bin") == body
    assert get(bucket, "dir/with space.bin") == b"x"
    assert get(bucket, "empty") == b""


def _assert_stop_ends_the_process(server: GcsTestServer | AzuriteServer) -> None:
    """Starts ``server``; stop() ends its process and closes its port, and stops it again."""
    start_or_skip(server)
    pid, port = server.pid, server.port
    assert pid is not None
    assert not _process_gone(pid)
    server.stop()
    assert _process_gone(pid)
    assert _port_closed(port)
    assert not server.running
    server.stop()


# --------------------------------------------------------------------------- GCS


@requires_gcs
def test_gcs_upload_and_download(gcs_server: GcsTestServer, gcs_bucket: str) -> None:
    body = expected_body(300_000, 6)
    _put_and_get_back(gcs_server.put_objects, gcs_server.get_object, gcs_bucket, body)
    # the path-style form object_store uses: <base>/<bucket>/<key>
    status, _, got = _get(f"{gcs_server.endpoint}/{gcs_bucket}/dir/a.bin")
    assert (status, got == body) == (200, True)
    status, _, _ = _get(f"{gcs_server.endpoint}/{gcs_bucket}/missing")
    assert status == 404
    listing = json.loads(_get(f"{gcs_server.endpoint}/storage/v1/b/{gcs_bucket}/o")[2])
    assert sorted(item["name"] for item in listing["items"]) == [
        "dir/a.bin",
        "dir/with space.bin",
        "empty",
    ]


@requires_gcs
def test_gcs_options(gcs_server: GcsTestServer) -> None:
    opts = gcs_server.options()
    assert set(opts) == {"google_service_account_key", "google_allow_http"}
    key = json.loads(opts["google_service_account_key"])
    assert key["gcs_base_url"] == f"http://127.0.0.1:{gcs_server.port}"
    assert key["disable_oauth"] is True
    assert gcs_server.env()["GOOGLE_SERVICE_ACCOUNT_KEY"] == opts["google_service_account_key"]
    assert gcs_server.base_url_options() == {
        "google_base_url": f"http://127.0.0.1:{gcs_server.port}",
        "google_skip_signature": "true",
        "google_allow_http": "true",
    }


@requires_gcs
def test_gcs_stop_ends_the_process() -> None:
    _assert_stop_ends_the_process(GcsTestServer())


# --------------------------------------------------------------------------- Azure


@requires_azurite
def test_azurite_upload_and_download(azurite_server: AzuriteServer, azure_container: str) -> None:
    body = expected_body(300_000, 8)
    _put_and_get_back(azurite_server.put_blobs, azurite_server.get_blob, azure_container, body)
    # unsigned reads are refused
    status, _, _ = _get(f"{azurite_server.account_url}/{azure_container}/dir/a.bin")
    assert status in (401, 403)
    assert os.environ["AZURITE_BLOB_STORAGE_URL"] == azurite_server.endpoint


@requires_azurite
def test_azurite_rejects_a_wrong_key(azurite_server: AzuriteServer, azure_container: str) -> None:
    azurite_server.put_blob(azure_container, "k", b"v")
    url = f"{azurite_server.account_url}/{azure_container}/k"
    headers = {
        "x-ms-date": "Mon, 30 Nov 2026 08:00:00 GMT",
        "x-ms-version": "2021-08-06",
    }
    wrong = "A" * 86 + "=="
    status, _, _ = _get(url, headers={**headers, "Authorization": _sign("GET", url, headers, key=wrong)})
    assert status == 403
    status, _, body = _get(url, headers={**headers, "Authorization": _sign("GET", url, headers)})
    assert (status, body) == (200, b"v")


@requires_azurite
def test_azurite_options(azurite_server: AzuriteServer) -> None:
    assert azurite_server.options() == {
        "azure_storage_use_emulator": "true",
        "azure_storage_account_name": ACCOUNT,
        "azure_storage_account_key": ACCOUNT_KEY,
    }
    assert azurite_server.endpoint_options() == {
        "azure_storage_account_name": ACCOUNT,
        "azure_storage_account_key": ACCOUNT_KEY,
        "azure_storage_endpoint": f"http://127.0.0.1:{azurite_server.port}/{ACCOUNT}",
        "azure_allow_http": "true",
    }
    assert azurite_server.env()["AZURITE_BLOB_STORAGE_URL"] == f"http://127.0.0.1:{azurite_server.port}"


@requires_azurite
def test_azurite_stop_ends_the_process() -> None:
    _assert_stop_ends_the_process(AzuriteServer())


# --------------------------------------------------------------------------- fixtures, availability


def test_object_store_case_round_trip(object_store_case: ObjectStoreCase) -> None:
    case = object_store_case
    case.put_many({"x/0.bin": expected_body(1000, 0), "x/1.bin": b"one"})
    assert case.get("x/0.bin") == expected_body(1000, 0)
    assert case.get("x/1.bin") == b"one"
    assert case.url("x/1.bin") == f"{case.scheme}://{case.bucket}/x/1.bin"
    assert case.options == case.server.options()


def test_cloud_isolation_env() -> None:
    remove, set_ = cloud_isolation_env(
        {
            "AWS_ACCESS_KEY_ID": "k",
            "GOOGLE_SERVICE_ACCOUNT": "p",
            "AZURE_STORAGE_ACCOUNT_KEY": "x",
            "STORAGE_EMULATOR_HOST": "h",
            "HOME": "/root",
            "PATH": "/bin",
        }
    )
    assert sorted(remove) == [
        "AWS_ACCESS_KEY_ID",
        "AZURE_STORAGE_ACCOUNT_KEY",
        "GOOGLE_SERVICE_ACCOUNT",
        "STORAGE_EMULATOR_HOST",
    ]
    assert METADATA_BLACKHOLE == "http://127.0.0.1:9"
    assert set_ == {
        "AWS_METADATA_ENDPOINT": "http://127.0.0.1:9",
        "GCE_METADATA_HOST": "127.0.0.1:9",
        "GCE_METADATA_IP": "127.0.0.1:9",
        "AZURE_MSI_ENDPOINT": "http://127.0.0.1:9/metadata/identity/oauth2/token",
    }


def test_bucket_fixtures_isolate_the_cloud_env(
    object_store_case: ObjectStoreCase,
) -> None:
    assert os.environ["AWS_METADATA_ENDPOINT"] == METADATA_BLACKHOLE
    assert os.environ["GCE_METADATA_HOST"] == "127.0.0.1:9"
    assert "AWS_ACCESS_KEY_ID" not in os.environ
    expected_azurite = [object_store_case.server.endpoint] if object_store_case.name == "azure" else []
    assert [v for k, v in os.environ.items() if k.startswith("AZURITE_")] == expected_azurite


def test_start_or_skip_fails_unless_missing_services_are_allowed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Missing:
        def start(self) -> None:
            raise ServiceUnavailable("not installed")

    monkeypatch.delenv(ALLOW_MISSING_ENV, raising=False)
    with pytest.raises(pytest.fail.Exception, match="not installed"):
        start_or_skip(Missing())  # type: ignore[type-var]
    monkeypatch.setenv(ALLOW_MISSING_ENV, "1")
    with pytest.raises(pytest.skip.Exception, match="not installed"):
        start_or_skip(Missing())  # type: ignore[type-var]


def test_missing_azurite_is_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]) -> None:
    monkeypatch.setenv("DLRS_AZURITE_BIN", os.path.join(tmp_path, "nope"))
    monkeypatch.setenv("DLRS_AZURITE_DIR", os.fspath(tmp_path))
    monkeypatch.setenv("PATH", os.fspath(tmp_path))
    with pytest.raises(ServiceUnavailable, match=r"install-test-services\.sh"):
        azurite_binary()
    assert "azurite-blob not found" in (missing_service("azure") or "")
    with pytest.raises(ValueError, match="unknown service"):
        missing_service("ftp")


@pytest.fixture(autouse=True)
def _no_leaked_http_servers() -> Iterator[None]:
    before = _serve_children()
    yield
    assert _serve_children() <= before
