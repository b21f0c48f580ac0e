"""HttpDataset, FileDataset and ObjectStoreDataset, alone and in PyDataloader, against real local
servers (tests/servers): order, concurrency, retries, faults, limits, errors, cancellation."""

from __future__ import annotations

import errno
import inspect
import json
import os
import pathlib
import threading
import time

import pytest

from dataloader_rs import FileDataset, HttpDataset, ObjectStoreDataset, PyDataloader, TarDataset

from conftest import ctrl_c_after, in_forked_child, wait_until
from servers._common import METADATA_BLACKHOLE
from servers.fixtures import requires_s3
from servers.http import expected_body, item_body

# The HTTP test server can leave one accepted socket unclosed when a client connects while it
# stops (hyper finishes connects in the background): a warning about the server's socket, not
# the loader's, which may surface in any later test.
SERVER_SOCKET_WARNING = (
    r"ignore:Exception ignored in. <(socket\.socket|function _SelectorTransport\.__del__)"
    ":pytest.PytestUnraisableExceptionWarning"
)
pytestmark = [pytest.mark.timeout(60), pytest.mark.filterwarnings(SERVER_SOCKET_WARNING)]


def _cpus() -> int:
    return len(os.sched_getaffinity(0))


# --------------------------------------------------------------------------- HTTP: loading


def test_items_are_bytes_in_order(http_server):
    ds = HttpDataset([http_server.item_url(i) for i in range(100)])
    assert len(ds) == 100
    loader = PyDataloader(ds, batch_size=10, num_workers=2, item_concurrency=8)
    batches = list(loader)
    assert batches == [[item_body(i) for i in range(b, b + 10)] for b in range(0, 100, 10)]
    assert all(type(item) is bytes for batch in batches for item in batch)
    assert http_server.errors == []


def test_without_workers_one_batch_is_in_flight(http_server):
    ds = HttpDataset([http_server.item_url(i) for i in range(7)])
    assert list(PyDataloader(ds, batch_size=3)) == [
        [item_body(0), item_body(1), item_body(2)],
        [item_body(3), item_body(4), item_body(5)],
        [item_body(6)],
    ]


def test_shuffle_and_return_indices_match_the_bodies(http_server):
    ds = HttpDataset([http_server.item_url(i, size=1000) for i in range(40)])
    settings = {"num_workers": 2, "item_concurrency": 4, "return_indices": True}
    loader = PyDataloader(ds, batch_size=8, shuffle=True, seed=3, **settings)
    seen = []
    for batch, indices in loader:
        assert batch == [item_body(i, 1000) for i in indices]
        seen += indices
    assert sorted(seen) == list(range(40))
    assert seen != list(range(40))


def test_getitem_fetches_one_item(http_server):
    ds = HttpDataset([http_server.item_url(i) for i in range(3)])
    assert ds[0] == b"item-0"
    assert ds[-1] == b"item-2"
    with pytest.raises(IndexError, match="out of range"):
        ds[3]
    with pytest.raises(IndexError):
        ds[-4]


def test_requests_in_flight_are_num_workers_times_item_concurrency(http_server_factory):
    server = http_server_factory(delay=0.3)
    ds = HttpDataset([server.item_url(i) for i in range(64)])
    loader = PyDataloader(ds, batch_size=16, num_workers=2, item_concurrency=8, prefetch_depth=1)
    assert sum(len(b) for b in loader) == 64
    # 2 batches of 8 items: every request of a wave is sent at once, and never more.
    assert 8 < server.max_in_flight <= 16


def test_by_default_one_batch_may_use_the_loaders_whole_budget(http_server_factory):
    # num_workers x item_concurrency = 8 slots, earliest batch first: an epoch of one batch
    # fetches 8 items at once, not item_concurrency's 4.
    server = http_server_factory(delay=0.2)
    ds = HttpDataset([server.item_url(i) for i in range(16)])
    loader = PyDataloader(ds, batch_size=16, num_workers=2, item_concurrency=4)
    assert loader.items_in_flight is None
    assert [x for b in loader for x in b] == [item_body(i) for i in range(16)]
    assert server.max_in_flight == 8


def test_items_in_flight_bounds_the_requests_of_all_batches_in_flight(http_server_factory):
    server = http_server_factory(delay=0.2)
    ds = HttpDataset([server.item_url(i) for i in range(48)])
    loader = PyDataloader(ds, batch_size=16, num_workers=2, item_concurrency=16, items_in_flight=6)
    assert loader.items_in_flight == 6
    assert [x for b in loader for x in b] == [item_body(i) for i in range(48)]
    # Two batches of 16 at once would be 32 requests; the budget holds them to 6, and uses them.
    assert server.max_in_flight == 6


def test_items_in_flight_is_checked(http_server):
    ds = HttpDataset([http_server.item_url(i) for i in range(4)])
    assert list(PyDataloader(ds, batch_size=4, items_in_flight=1)) == [[item_body(i) for i in range(4)]]
    for bad in (0, -3):
        with pytest.raises(ValueError, match=f"items_in_flight must be at least 1, got {bad}"):
            PyDataloader(ds, items_in_flight=bad)
    with pytest.raises(TypeError, match="items_in_flight must be an int"):
        PyDataloader(ds, items_in_flight=2.5)
    with pytest.raises(ValueError, match="items_in_flight bounds the fetches of Rust datasets"):
        PyDataloader(list(range(4)), items_in_flight=2)
    loader = PyDataloader(ds, items_in_flight=2)
    with pytest.raises(ValueError, match="items_in_flight cannot be changed once the loader is made"):
        loader.items_in_flight = 3


def test_one_client_keeps_connections_open(http_server):
    ds = HttpDataset([http_server.item_url(i) for i in range(60)])
    list(PyDataloader(ds, batch_size=10, num_workers=1, item_concurrency=2))
    assert len(http_server.requests) == 60
    assert http_server.connections_opened <= 4


def test_headers_are_sent(http_server):
    ds = HttpDataset(
        [http_server.url("/echo")] * 2,
        headers={"Authorization": "Bearer t0ken", "X-Tile": "7"},
    )
    for body in next(iter(PyDataloader(ds, batch_size=2))):
        headers = json.loads(body)["headers"]
        assert headers["authorization"] == "Bearer t0ken"
        assert headers["x-tile"] == "7"
        assert headers["user-agent"].startswith("dataloader-rs/")
    assert "t0ken" not in repr(ds)
    assert "Authorization" in repr(ds)


def test_transform_runs_on_the_pool_and_collate_on_a_worker(http_server):
    ds = HttpDataset([http_server.item_url(i) for i in range(32)])
    threads = set()
    lock = threading.Lock()

    def transform(index, body):
        with lock:
            threads.add(threading.get_ident())
        assert body == item_body(index)
        return index * 10

    loader = PyDataloader(ds, batch_size=8, num_workers=2, item_concurrency=4, transform=transform, collate_fn=tuple)
    assert list(loader) == [tuple(range(b * 10, (b + 8) * 10, 10)) for b in range(0, 32, 8)]
    assert threading.get_ident() not in threads
    assert loader._native.transform_threads == min(2 * 4, _cpus())
    one_arg = PyDataloader(ds, batch_size=4, transform=len)
    assert next(iter(one_arg)) == [6, 6, 6, 6]


def test_transform_pool_is_sized_per_the_spec(http_server):
    ds = HttpDataset([http_server.item_url(0)])
    for nw, k in [(0, 1), (1, 1), (2, 64), (3, 1)]:
        loader = PyDataloader(ds, num_workers=nw, item_concurrency=k, transform=lambda i, x: x)
        assert loader._native.transform_threads == min(max(nw, 1) * k, _cpus())
    assert PyDataloader(ds, num_workers=2, item_concurrency=4)._native.transform_threads == 0


def test_a_transform_error_keeps_its_type_and_the_next_batch_continues(http_server):
    ds = HttpDataset([http_server.item_url(i) for i in range(6)])
    boom = KeyError("no label for 3")

    def transform(index, body):
        if index == 3:
            raise boom
        return index

    it = iter(PyDataloader(ds, batch_size=2, num_workers=2, item_concurrency=2, transform=transform))
    assert next(it) == [0, 1]
    with pytest.raises(KeyError) as excinfo:
        next(it)
    assert excinfo.value is boom
    assert next(it) == [4, 5]
    with pytest.raises(StopIteration):
        next(it)


def test_runtime_threads(http_server):
    ds = HttpDataset([http_server.item_url(i) for i in range(4)])
    assert list(PyDataloader(ds, batch_size=4, runtime_threads=1)) == [[item_body(i) for i in range(4)]]
    assert len(list(PyDataloader(ds, runtime_threads=1024))) == 4
    for bad in (0, 1025, -1):
        with pytest.raises(ValueError, match="runtime_threads"):
            PyDataloader(ds, runtime_threads=bad)
    with pytest.raises(TypeError, match="runtime_threads"):
        PyDataloader(ds, runtime_threads=2.0)


# --------------------------------------------------------------------------- HTTP: faults


def test_503_and_429_are_retried_with_retry_after(http_server):
    http_server.fail_first("/item/1", 2, "status=503&retry_after=0")
    http_server.fail_first("/item/2", 1, "status=429&retry_after=1")
    ds = HttpDataset([http_server.item_url(i) for i in range(3)], retries=3, backoff=0.01, max_backoff=0.05)
    assert next(iter(PyDataloader(ds, batch_size=3, item_concurrency=3))) == [item_body(i) for i in range(3)]
    assert [r.outcome for r in http_server.requests_for("/item/1")] == ["status:503", "status:503", "ok"]
    assert [r.outcome for r in http_server.requests_for("/item/2")] == ["status:429", "ok"]


def test_retries_run_out(http_server):
    ds = HttpDataset([http_server.url("/status/503")], retries=2, backoff=0.01, max_backoff=0.02)
    with pytest.raises(OSError, match="503") as excinfo:
        next(iter(PyDataloader(ds)))
    assert type(excinfo.value) is OSError
    assert len(http_server.requests_for("/status/503")) == 3


def test_404_is_an_oserror_without_the_query_string(http_server):
    urls = [http_server.item_url(0), http_server.url("/status/404", token="s3cr3t")]
    ds = HttpDataset(urls, retries=3)
    with pytest.raises(OSError) as excinfo:
        next(iter(PyDataloader(ds, batch_size=2, num_workers=1, item_concurrency=2)))
    message = str(excinfo.value)
    assert type(excinfo.value) is OSError
    assert "404" in message
    assert "/status/404" in message
    assert "s3cr3t" not in message
    assert "token" not in message
    assert len(http_server.requests_for("/status/404")) == 1  # not retried
    assert "s3cr3t" not in repr(HttpDataset(urls[::-1]))


def test_credentials_in_a_url_never_show(http_server):
    url = http_server.url("/status/404").replace("http://", "http://user:pa55word@")
    with pytest.raises(OSError) as excinfo:
        HttpDataset([url], retries=0)[0]
    assert "pa55word" not in str(excinfo.value)
    assert "pa55word" not in repr(HttpDataset([url]))


def test_the_next_batch_continues_after_a_failed_one(http_server):
    urls = [http_server.item_url(i) for i in range(6)]
    urls[3] = http_server.url("/status/410")
    it = iter(PyDataloader(HttpDataset(urls), batch_size=2, num_workers=2, item_concurrency=2))
    assert next(it) == [item_body(0), item_body(1)]
    with pytest.raises(OSError, match="410"):
        next(it)
    assert next(it) == [item_body(4), item_body(5)]
    assert list(it) == []


def test_large_bodies_in_order_and_a_failure_after_some_arrived(http_server):
    # Bodies of several reads each (the benchmarks' regime), and a batch failing half-way.
    size = 96 * 1024
    urls = [http_server.item_url(i, size=size) for i in range(36)]
    # Item 17 fails after the first items of its batch arrived.
    urls[17] = http_server.url("/status/404", delay=0.2)
    batches = iter(PyDataloader(HttpDataset(urls), batch_size=12, num_workers=1, item_concurrency=4))
    assert next(batches) == [item_body(i, size) for i in range(12)]
    with pytest.raises(OSError, match="404"):
        next(batches)
    last = next(batches)
    assert last == [item_body(i, size) for i in range(24, 36)]
    assert all(type(item) is bytes for item in last)
    assert list(batches) == []


def test_a_slow_answer_is_a_timeout_error(http_server):
    ds = HttpDataset([http_server.item_url(0, delay=5)], timeout=0.2, retries=1, backoff=0.01)
    with pytest.raises(TimeoutError, match="timed out"):
        next(iter(PyDataloader(ds)))
    assert len(http_server.requests_for("/item/0")) == 2


@pytest.mark.parametrize("fault", ["fault=reset", "fault=truncate", "fault=truncate&chunked=1"])
def test_resets_and_truncated_bodies_fail_after_the_retries(http_server, fault):
    path = "/bytes/100000"
    http_server.script(path, [fault] * 10)
    ds = HttpDataset([http_server.url(path)], retries=2, backoff=0.01, max_backoff=0.02)
    with pytest.raises(OSError) as excinfo:
        next(iter(PyDataloader(ds)))
    assert not isinstance(excinfo.value, TimeoutError)
    assert len(http_server.requests_for(path)) == 3


def test_a_reset_then_success_delivers_the_item(http_server):
    http_server.fail_first("/bytes/5000", 1, "fault=reset")
    ds = HttpDataset([http_server.url("/bytes/5000")], retries=1, backoff=0.01)
    assert next(iter(PyDataloader(ds))) == [expected_body(5000)]


@pytest.mark.parametrize("chunked", [False, True])
def test_max_bytes_is_a_value_error(http_server, chunked):
    query = {"chunked": 1} if chunked else {}
    ds = HttpDataset([http_server.bytes_url(1000, **query), http_server.bytes_url(100, **query)], max_bytes=100)
    it = iter(PyDataloader(ds))
    with pytest.raises(ValueError, match="max_bytes"):
        next(it)
    assert next(it) == [expected_body(100)]


def test_an_index_out_of_range_is_an_index_error(http_server):
    ds = HttpDataset([http_server.item_url(i) for i in range(3)])
    it = iter(PyDataloader(ds, sampler=[0, 5, 1], batch_size=1, num_workers=1))
    assert next(it) == [item_body(0)]
    with pytest.raises(IndexError, match="out of range"):
        next(it)
    assert next(it) == [item_body(1)]


def test_mixed_faults_deliver_every_item_or_a_typed_error(http_server):
    steps = ["status=503", "fault=reset", "status=500&retry_after=0", "fault=truncate", None]
    for i in range(40):
        http_server.script(f"/item/{i}", [steps[(i + j) % len(steps)] for j in range(i % 3)])
    ds = HttpDataset([http_server.item_url(i) for i in range(40)], retries=3, backoff=0.01, max_backoff=0.02)
    got = []
    for batch in PyDataloader(ds, batch_size=8, num_workers=2, item_concurrency=8):
        got += batch
    assert got == [item_body(i) for i in range(40)]


def test_ctrl_c_interrupts_a_stalled_request(http_server, sigint_raises):
    ds = HttpDataset([http_server.item_url(0, fault="stall")], timeout=None)
    it = iter(PyDataloader(ds))
    with ctrl_c_after(0.3):
        next(it)
    assert http_server.in_flight == 1
    del it
    # Dropping the iterator cancels the stalled request: the server sees the client go.
    assert wait_until(lambda: http_server.in_flight == 0)


def test_dropping_an_iterator_cancels_requests_in_flight(http_server):
    urls = [http_server.item_url(i) for i in range(4)] + [http_server.item_url(i, fault="stall") for i in range(4, 16)]
    it = iter(PyDataloader(HttpDataset(urls, timeout=None), batch_size=4, num_workers=2, item_concurrency=4))
    assert next(it) == [item_body(i) for i in range(4)]
    assert wait_until(lambda: http_server.in_flight == 8)
    start = time.monotonic()
    del it
    assert time.monotonic() - start < 5
    assert wait_until(lambda: http_server.in_flight == 0)
    assert {r.outcome for r in http_server.requests if r.path != "/item/0" and int(r.path.split("/")[-1]) >= 4} <= {
        "stall",
        "client-gone",
    }


# --------------------------------------------------------------------------- HTTP: arguments


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"urls": "http://a/b"}, TypeError, "not a single str"),
        ({"urls": ["http://a/b", 3]}, TypeError, "item 1 is int"),
        ({"urls": 5}, TypeError, "sequence of str"),
        ({"urls": ["ftp://a/b"]}, ValueError, "invalid URL ftp://a/b: the scheme must be http or https"),
        ({"urls": ["not a url"]}, ValueError, "invalid URL"),
        ({"headers": {"X-A": 1}}, TypeError, "headers"),
        ({"headers": ["X-A"]}, TypeError, "headers"),
        ({"headers": {"bad name": "v"}}, ValueError, "header"),
        ({"headers": {"X-A": "line\nbreak"}}, ValueError, "header"),
        ({"timeout": -1.0}, ValueError, "timeout"),
        ({"timeout": float("nan")}, ValueError, "timeout"),
        ({"connect_timeout": -1.0}, ValueError, "connect_timeout"),
        ({"retries": -1}, ValueError, "retries"),
        ({"retries": True}, TypeError, "retries"),
        ({"retries": 1.5}, TypeError, "retries"),
        ({"backoff": -0.1}, ValueError, "backoff"),
        ({"max_backoff": float("inf")}, ValueError, "max_backoff"),
        ({"max_bytes": -1}, ValueError, "max_bytes"),
        ({"max_bytes": "1"}, TypeError, "max_bytes"),
    ],
)
def test_http_dataset_argument_errors(kwargs, error, match):
    kwargs = {"urls": ["http://127.0.0.1:9/a"], **kwargs}
    with pytest.raises(error, match=match):
        HttpDataset(kwargs.pop("urls"), **kwargs)


def test_http_dataset_defaults_and_repr():
    ds = HttpDataset(["http://127.0.0.1:9/a?sig=abc", "http://127.0.0.1:9/b"], timeout=None)
    assert len(ds) == 2
    text = repr(ds)
    assert text.startswith("HttpDataset(2 URLs")
    assert "http://127.0.0.1:9/a" in text
    assert "sig" not in text
    assert "timeout=None" in text
    assert len(HttpDataset([])) == 0


# Each Rust dataset's constructors, with arguments that make one without touching a server.
CONSTRUCTORS = [
    (HttpDataset, (["http://127.0.0.1:9/a"],)),
    (HttpDataset.from_template, ("http://127.0.0.1:9/{name}", {"name": ["a"]})),
    (FileDataset, (["/x/a"],)),
    (FileDataset.from_template, ("/x/{name}", {"name": ["a"]})),
    (ObjectStoreDataset, ("file:///tmp", ["a"])),
    (ObjectStoreDataset.from_template, ("file:///tmp", "{name}", {"name": ["a"]})),
]


@pytest.mark.parametrize(
    ("make", "args"),
    CONSTRUCTORS,
)
def test_signature_shows_the_real_defaults(make, args):
    # The keyword defaults the signature shows (and _native.pyi repeats; stubtest compares the
    # two) are those an omitted argument gets: passing them explicitly changes nothing.
    params = inspect.signature(make).parameters.values()
    defaults = {p.name: p.default for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert {"timeout", "retries", "max_bytes"} <= defaults.keys()
    assert repr(make(*args, **defaults)) == repr(make(*args))


@pytest.mark.parametrize(
    ("make", "args"),
    [*CONSTRUCTORS, (TarDataset, (["/x/a.tar"],))],
)
def test_the_keywords_taken_are_those_the_signature_shows(make, args):
    # A constructor's keyword list is written once, in Rust; its refusal names it. The
    # signature (and _native.pyi, which stubtest compares with it) must show the same names.
    shown = [p.name for p in inspect.signature(make).parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    with pytest.raises(TypeError, match="unexpected keyword argument 'nope'; it takes ") as refused:
        make(*args, nope=1)
    taken = str(refused.value).split("; it takes ", 1)[1].split(", ")
    assert sorted(taken) == sorted(shown)


def test_rust_datasets_are_frozen_and_not_subclassable():
    ds = HttpDataset(["http://127.0.0.1:9/a"])
    with pytest.raises(AttributeError):
        ds.x = 1  # type: ignore[attr-defined]
    with pytest.raises(TypeError):

        class Sub(HttpDataset):  # type: ignore[misc]
            pass


# --------------------------------------------------------------------------- files


def test_files_in_order_with_paths_and_pathlike(tmp_path):
    paths = []
    for i in range(10):
        p = tmp_path / f"{i}.bin"
        p.write_bytes(bytes([i]) * (i + 1))
        paths.append(p if i % 2 else str(p))
    ds = FileDataset(paths)
    assert len(ds) == 10
    assert ds[9] == bytes([9]) * 10
    assert list(PyDataloader(ds, batch_size=5, num_workers=2, item_concurrency=3)) == [
        [bytes([i]) * (i + 1) for i in range(5)],
        [bytes([i]) * (i + 1) for i in range(5, 10)],
    ]


def test_a_missing_file_is_file_not_found_with_errno(tmp_path):
    (tmp_path / "a").write_bytes(b"a")
    ds = FileDataset([tmp_path / "a", tmp_path / "missing"])
    it = iter(PyDataloader(ds, batch_size=1, num_workers=1))
    assert next(it) == [b"a"]
    with pytest.raises(FileNotFoundError) as excinfo:
        next(it)
    assert excinfo.value.errno == errno.ENOENT
    assert "missing" in str(excinfo.value)
    with pytest.raises(IsADirectoryError):
        FileDataset([tmp_path])[0]


def test_file_max_bytes(tmp_path):
    (tmp_path / "big").write_bytes(b"x" * 101)
    with pytest.raises(ValueError, match="max_bytes"):
        FileDataset([tmp_path / "big"], max_bytes=100)[0]
    assert FileDataset([tmp_path / "big"], max_bytes=101)[0] == b"x" * 101


def test_file_templates_with_slide_and_index(tmp_path):
    slides = ["a.svs", "a.svs", "b.svs"]
    for i, slide in enumerate(slides):
        (tmp_path / slide).mkdir(exist_ok=True)
        (tmp_path / slide / f"{i}.png").write_bytes(f"{slide}-{i}".encode())
    ds = FileDataset.from_template(
        str(tmp_path / "{slide}" / "{index}.png"), {"slide": slides}, timeout=10.0, retries=2
    )
    assert len(ds) == 3
    assert list(PyDataloader(ds, batch_size=3)) == [[b"a.svs-0", b"a.svs-1", b"b.svs-2"]]
    assert "retries=2" in repr(ds)
    pathlike = FileDataset.from_template(tmp_path / "a.svs" / "{index}.png", length=2)
    assert pathlike[1] == b"a.svs-1"


@pytest.mark.parametrize("value", ["..", ".", "a/b", "a\\b", "a\0b"])
def test_file_templates_refuse_traversal(tmp_path, value):
    with pytest.raises(ValueError, match="column 'slide', item 1"):
        FileDataset.from_template(str(tmp_path / "{slide}" / "x"), {"slide": ["ok", value]})


def test_file_templates_refuse_an_assembled_dot_dot(tmp_path):
    # ".{a}." with "" is "..": sub/../x would read tmp_path/x.
    (tmp_path / "sub").mkdir()
    (tmp_path / "x").write_bytes(b"outside sub")
    with pytest.raises(ValueError, match=r"item 0: the path component \".\{a\}.\" of the template becomes \"..\""):
        FileDataset.from_template(str(tmp_path / "sub" / ".{a}." / "x"), {"a": [""]})


@pytest.mark.parametrize("length", [2**63, 2**64, 10**30])
def test_template_length_names_its_range(length):
    # len() of a dataset must fit a Py_ssize_t.
    message = rf"length must be between 0 and 9223372036854775807 \(2\*\*63 - 1\), got {length}$"
    with pytest.raises(ValueError, match=message):
        FileDataset.from_template("/d/{index}", length=length)
    with pytest.raises(ValueError, match=message):
        HttpDataset.from_template("http://127.0.0.1:9/{index}", length=length)
    assert len(FileDataset.from_template("/d/{index}", length=2**63 - 1)) == 2**63 - 1


def test_file_dataset_argument_errors(tmp_path):
    with pytest.raises(TypeError, match="paths"):
        FileDataset(str(tmp_path))
    with pytest.raises(TypeError, match="item 1"):
        FileDataset([tmp_path, 3])
    with pytest.raises(ValueError, match="timeout"):
        FileDataset([tmp_path], timeout=-1)
    with pytest.raises(ValueError, match="retries"):
        FileDataset([tmp_path], retries=-2)
    assert repr(FileDataset([pathlib.Path("/x/y")])) == "FileDataset(1 paths, first '/x/y', timeout=None, retries=0)"
    assert repr(FileDataset([])) == "FileDataset(0 paths, timeout=None, retries=0)"


def test_an_http_datasets_repr_shows_its_count_first_url_and_fetch_options():
    urls = ["http://127.0.0.1:9/a", "http://127.0.0.1:9/b"]
    want = "HttpDataset(2 URLs, first 'http://127.0.0.1:9/a', timeout=30.0, retries=1)"
    assert repr(HttpDataset(urls, retries=1)) == want
    assert repr(HttpDataset([])) == "HttpDataset(0 URLs, timeout=30.0, retries=3)"


# --------------------------------------------------------------------------- object stores


def test_object_store_reads_objects_in_order(object_store_case):
    keys = [f"tiles/{i}.bin" for i in range(12)]
    object_store_case.put_many({k: f"object {k}".encode() for k in keys})
    ds = ObjectStoreDataset(
        object_store_case.url("tiles"), [k.removeprefix("tiles/") for k in keys], options=object_store_case.options
    )
    assert len(ds) == 12
    assert list(PyDataloader(ds, batch_size=6, num_workers=2, item_concurrency=3)) == [
        [f"object {k}".encode() for k in keys[:6]],
        [f"object {k}".encode() for k in keys[6:]],
    ]
    for value in object_store_case.options.values():
        assert value not in repr(ds) or value in ("true", "devstoreaccount1")


def test_object_store_templates(object_store_case):
    slides = ["a.svs", "a.svs", "b.svs"]
    object_store_case.put_many({f"tiles/{s}/{i}.png": f"{s}:{i}".encode() for i, s in enumerate(slides)})
    ds = ObjectStoreDataset.from_template(
        object_store_case.url("tiles"), "{slide}/{index}.png", {"slide": slides}, options=object_store_case.options
    )
    assert list(PyDataloader(ds, batch_size=3, item_concurrency=3)) == [[b"a.svs:0", b"a.svs:1", b"b.svs:2"]]


def test_object_store_missing_key_and_max_bytes(object_store_case):
    object_store_case.put("big", b"y" * 50)
    ds = ObjectStoreDataset(
        object_store_case.url(), ["missing", "big"], options=object_store_case.options, max_bytes=10, retries=0
    )
    it = iter(PyDataloader(ds, num_workers=1))
    with pytest.raises(FileNotFoundError, match="missing"):
        next(it)
    with pytest.raises(ValueError, match="max_bytes"):
        next(it)


def test_object_store_unknown_option_is_a_value_error(cloud_env_isolated):
    with pytest.raises(ValueError, match="aws_no_such_key"):
        ObjectStoreDataset("s3://bucket/prefix", ["a"], options={"aws_no_such_key": "1"})
    with pytest.raises(ValueError, match="timeout"):
        ObjectStoreDataset("s3://bucket/prefix", ["a"], options={"timeout": "5s"})
    with pytest.raises(ValueError, match="unsupported URL"):
        ObjectStoreDataset("ftp://bucket/prefix", ["a"])
    with pytest.raises(TypeError, match="options"):
        ObjectStoreDataset("s3://bucket/prefix", ["a"], options={"aws_region": 3})
    with pytest.raises(TypeError, match="keys"):
        ObjectStoreDataset("s3://bucket/prefix", "a")
    with pytest.raises(ValueError, match=r"key part|empty"):
        ObjectStoreDataset.from_template("s3://bucket/p", "{k}.png", {"k": ["a", ""]})
    with pytest.raises(ValueError, match="column 'k'"):
        ObjectStoreDataset.from_template("s3://bucket/p", "{k}.png", {"k": ["a/b"]})


@requires_s3
def test_s3_credentials_from_aws_environment_variables(s3_server, s3_bucket, monkeypatch):
    s3_server.put_object(s3_bucket, "k/0", b"zero")
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    ds = ObjectStoreDataset(f"s3://{s3_bucket}/k", ["0"])
    assert ds[0] == b"zero"
    assert "testing" not in repr(ds)


@requires_s3
def test_s3_without_credentials_fails_with_an_oserror(s3_server, s3_bucket):
    s3_server.put_object(s3_bucket, "k/0", b"zero")
    options = {
        "aws_endpoint": s3_server.endpoint,
        "aws_allow_http": "true",
        "aws_region": "us-east-1",
        "aws_metadata_endpoint": METADATA_BLACKHOLE,
    }
    ds = ObjectStoreDataset(f"s3://{s3_bucket}/k", ["0"], options=options, retries=0, timeout=5)
    with pytest.raises(OSError):
        ds[0]


# --------------------------------------------------------------------------- fork


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_uses_a_rust_loader_its_parent_iterated(tmp_path):
    for i in range(12):
        (tmp_path / f"{i}.bin").write_bytes(bytes([i]))
    ds = FileDataset.from_template(str(tmp_path / "{index}.bin"), length=12)
    loader = PyDataloader(ds, batch_size=4, num_workers=2, item_concurrency=2, transform=lambda i, b: b[0] * 2)
    expected = [[0, 2, 4, 6], [8, 10, 12, 14], [16, 18, 20, 22]]
    assert list(loader) == expected
    assert in_forked_child(lambda: [list(loader), ds[5]]) == [expected, b"\x05"]
    assert list(loader) == expected


def test_object_store_credentials_from_the_environment(object_store_case, monkeypatch):
    object_store_case.put("env/0", b"from the environment")
    for name, value in object_store_case.env.items():
        monkeypatch.setenv(name, value)
    ds = ObjectStoreDataset(object_store_case.url("env"), ["0"], retries=0, timeout=10)
    assert next(iter(PyDataloader(ds))) == [b"from the environment"]
    for value in object_store_case.env.values():
        assert value not in repr(ds) or value in ("true", "devstoreaccount1")


def test_items_are_transformed_as_they_arrive(http_server):
    in_flight_during_transform = []

    slow = http_server.item_url(1, delay=3)

    def transform(index, body):
        if index == 0:
            # On a busy machine item 1's request may not have reached the server yet, and the
            # server may not have counted item 0's answer as done: wait for both, while item 1
            # (3 s) is still being served.
            in_flight_during_transform.append(
                wait_until(lambda: len(http_server.requests) == 2 and http_server.in_flight == 1, timeout=2.5)
            )
        return body

    ds = HttpDataset([http_server.item_url(0), slow])
    assert list(PyDataloader(ds, batch_size=2, item_concurrency=2, transform=transform)) == [
        [item_body(0), item_body(1)]
    ]
    assert in_flight_during_transform == [True]  # item 1 was still being served


@pytest.mark.parametrize(
    "make",
    [
        lambda **kw: HttpDataset(["http://127.0.0.1:9/x"], **kw),
        lambda **kw: HttpDataset.from_template("http://127.0.0.1:9/{index}", length=1, **kw),
        lambda **kw: FileDataset(["/nonexistent"], **kw),
        lambda **kw: FileDataset.from_template("/nonexistent/{index}", length=1, **kw),
        lambda **kw: ObjectStoreDataset("file:///nonexistent/", ["k"], **kw),
    ],
)
def test_constructors_refuse_unknown_keywords_and_read_known_ones(make):
    with pytest.raises(TypeError, match=r"got an unexpected keyword argument 'retry'"):
        make(retry=3)
    with pytest.raises(TypeError, match="timeout must be a number of seconds, got str"):
        make(timeout="1")
    with pytest.raises(ValueError, match="retries"):
        make(retries=-1)
    shown = repr(make(timeout=None, retries=5))
    assert "timeout=None" in shown, shown
    assert "retries=5" in shown, shown
