"""TarStream: tar and gzip shards read in order, as files, from the loopback HTTP server (plain
GETs) and from ``dlrs serve --dir``; shard order per epoch, readers per worker, resume from the
dataset's own state, and broken shards."""

from __future__ import annotations

import gzip
import io
import pathlib
import queue
import select
import socket
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator

import pytest
from test_rust_datasets import SERVER_SOCKET_WARNING
from test_tar_dataset import expected, write_shard

from dataloader_rs import PyDataloader, TarDataset, TarStream

from conftest import kill_at_end

pytestmark = [pytest.mark.timeout(60), pytest.mark.filterwarnings(SERVER_SOCKET_WARNING)]


@pytest.fixture(autouse=True)
def _private_index_dir(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default index directory of the map-style datasets compared with is the test's own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


def keys_of(n_shards: int, per_shard: int) -> list[list[str]]:
    return [[f"{s:03d}{i:03d}" for i in range(per_shard)] for s in range(n_shards)]


def write(directory: pathlib.Path, name: str, data: bytes) -> str:
    path = directory / name
    path.write_bytes(data)
    return str(path)


def stream_sample(key: str) -> dict[str, object]:
    return {"__key__": key, **expected(key)}


def keys(samples: list[dict[str, object]]) -> list[str]:
    return [str(s["__key__"]) for s in samples]


def test_tar_and_gz_files_give_the_map_style_samples_in_order(tmp_path: pathlib.Path) -> None:
    shards = keys_of(3, 4)
    plain = [write(tmp_path, f"{i}.tar", write_shard(k)) for i, k in enumerate(shards)]
    packed = [write(tmp_path, f"{i}.tar.gz", gzip.compress(write_shard(k))) for i, k in enumerate(shards)]
    mapped = TarDataset(plain)
    want = [{"__key__": mapped.key(i), **mapped[i]} for i in range(len(mapped))]
    for locations in (plain, packed, [plain[0], packed[1], pathlib.Path(plain[2])]):
        stream = TarStream(locations)
        assert list(stream) == want
        assert list(stream) == want, "a second iter() reads again"
    assert [s["__key__"] for s in want] == [k for shard in shards for k in shard]
    assert repr(TarStream(plain)) == f"TarStream(3 shards, first '{plain[0]}')"
    flagged = TarStream(plain, shuffle_shards=True, seed=3, split_by_rank=True, member="JPG")
    flags = "shuffle_shards=True, seed=3, split_by_rank=True, member='jpg'"
    assert repr(flagged) == f"TarStream(3 shards, first '{plain[0]}', {flags})"
    assert repr(TarStream([])) == "TarStream(0 shards)"
    assert TarStream(plain, member="JPG").member == "jpg"
    assert list(TarStream(packed, member="jpg")) == [expected(k)["jpg"] for shard in shards for k in shard]


def test_plain_gets_to_the_loopback_server(http_server) -> None:
    shards = keys_of(2, 3)
    http_server.put_file("/a.tar", write_shard(shards[0]))
    http_server.put_file("/b.tar.gz", gzip.compress(write_shard(shards[1])))
    stream = TarStream([http_server.url("/a.tar"), http_server.url("/b.tar.gz")])
    assert list(stream) == [stream_sample(k) for shard in shards for k in shard]
    assert [r.path for r in http_server.requests] == ["/a.tar", "/b.tar.gz"]
    assert all("range" not in r.headers for r in http_server.requests), "one GET without Range per shard"


@pytest.fixture
def dlrs_serve(tmp_path: pathlib.Path) -> Iterator[tuple[str, pathlib.Path]]:
    """``dlrs serve --dir`` in a child process: its base URL and its directory."""
    root = tmp_path / "served"
    root.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "dataloader_rs._cli", "serve", "--latency-ms", "1", "--dir", str(root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        base = proc.stdout.readline().strip() if ready else ""
        assert base.startswith("http://127.0.0.1:"), base
        yield base, root
        proc.communicate(input="", timeout=15)
    finally:
        kill_at_end(proc)


def test_dlrs_serve_in_a_loader_with_readers_per_worker(dlrs_serve) -> None:
    base, root = dlrs_serve
    shards = keys_of(5, 7)
    urls = []
    for i, k in enumerate(shards):
        name = f"{i}.tar.gz" if i % 2 else f"{i}.tar"
        data = write_shard(k)
        (root / name).write_bytes(gzip.compress(data) if i % 2 else data)
        urls.append(f"{base}/{name}")
    everything = sorted(k for shard in shards for k in shard)
    stream = TarStream(urls, shuffle_shards=True, seed=11)
    for readers in ("one", "per_worker"):
        loader = PyDataloader(stream, batch_size=4, num_workers=3, stream_readers=readers)
        got = [s for batch in loader for s in batch]
        assert sorted(keys(got)) == everything, readers
        assert all(s == stream_sample(str(s["__key__"])) for s in got)


def test_shards_shuffled_by_seed_and_epoch(tmp_path: pathlib.Path) -> None:
    shards = keys_of(8, 2)
    paths = [write(tmp_path, f"{i}.tar", write_shard(k)) for i, k in enumerate(shards)]

    def order(stream: TarStream, epoch: int) -> list[str]:
        stream.set_epoch(epoch)
        got = keys(list(stream))
        # A shard's samples stay together, in their order.
        firsts = got[::2]
        assert got == [k for f in firsts for k in shards[int(f[:3])]]
        return firsts

    assert order(TarStream(paths), 3) == [s[0] for s in shards], "not shuffled unless asked"
    a, b = TarStream(paths, shuffle_shards=True, seed=5), TarStream(paths, shuffle_shards=True, seed=5)
    epochs = [order(a, e) for e in range(3)]
    assert epochs == [order(b, e) for e in range(3)], "the same for the same seed"
    assert len({tuple(e) for e in epochs}) == 3, "another epoch, another order"
    assert order(TarStream(paths, shuffle_shards=True, seed=6), 0) != epochs[0]
    # The loader tells the stream each epoch: its orders are the stream's own.
    loader = PyDataloader(TarStream(paths, shuffle_shards=True, seed=5), batch_size=2)
    assert [[k for batch in loader for k in keys(batch)][::2] for _ in range(3)] == epochs


def test_readers_per_worker_split_the_shards(tmp_path: pathlib.Path) -> None:
    shards = keys_of(7, 3)
    paths = [write(tmp_path, f"{i}.tar", write_shard(k)) for i, k in enumerate(shards)]
    loader = PyDataloader(TarStream(paths), batch_size=3, num_workers=3, stream_readers="per_worker")
    batches = [keys(b) for b in loader]
    # Every sample once; a batch is one shard here, and worker k reads shards k, k + 3, ...
    assert sorted(k for b in batches for k in b) == sorted(k for s in shards for k in s)
    assert [b[0][:3] for b in batches] == ["000", "001", "002", "003", "004", "005", "006"]


@pytest.mark.parametrize("stop", [1, 3, 5])
def test_resume_mid_epoch_reads_no_earlier_shard(http_server, stop: int) -> None:
    shards = keys_of(4, 3)
    for i, k in enumerate(shards):
        http_server.put_file(f"/{i}.tar", write_shard(k))
    urls = [http_server.url(f"/{i}.tar") for i in range(4)]

    def loader() -> PyDataloader:
        stream = TarStream(urls, shuffle_shards=True, seed=2)
        return PyDataloader(stream, batch_size=2, num_workers=2, shuffle_buffer=None)

    whole = [keys(b) for b in loader()]
    first = loader()
    first.set_epoch(1)
    it = iter(first)
    head = [keys(next(it)) for _ in range(stop)]
    state = first.state_dict()
    assert state["dataset_state"] is not None
    del it
    again = loader()
    again.load_state_dict(state)
    http_server.reset()
    rest = [keys(b) for b in again]
    # The shards before the one the state is in were not asked for again.
    shard_at = state["dataset_state"]["shard"]
    assert len({r.path for r in http_server.requests}) == 4 - shard_at
    epoch1 = loader()
    epoch1.set_epoch(1)
    assert head + rest == [keys(b) for b in epoch1]
    assert len(whole) == 6


def test_state_dict_and_its_checks(tmp_path: pathlib.Path) -> None:
    paths = [write(tmp_path, f"{i}.tar", write_shard(k)) for i, k in enumerate(keys_of(3, 2))]
    stream = TarStream(paths)
    assert stream.state_dict() == {"epoch": 0, "reader": 0, "readers": 1, "shard": 0, "sample": 0}
    it = iter(stream)
    for _ in range(3):
        next(it)
    state = stream.state_dict()
    assert state == {"epoch": 0, "reader": 0, "readers": 1, "shard": 1, "sample": 1}
    rest = keys(list(it))
    other = TarStream(paths)
    other.load_state_dict(state)
    assert keys(list(other)) == rest
    assert keys(list(other)) == keys(list(TarStream(paths))), "a state serves one iter()"
    with pytest.raises(ValueError, match='not "extra"'):
        other.load_state_dict({**state, "extra": 1})
    with pytest.raises(ValueError, match='"sample" is missing'):
        other.load_state_dict({k: v for k, v in state.items() if k != "sample"})
    with pytest.raises(TypeError, match="non-negative int"):
        other.load_state_dict({**state, "shard": -1})
    with pytest.raises(ValueError, match="reader 2 of 2"):
        other.load_state_dict({**state, "reader": 2, "readers": 2})
    with pytest.raises(TypeError, match="must be a dict"):
        other.load_state_dict([1])  # type: ignore[arg-type]


def test_bad_arguments(tmp_path: pathlib.Path) -> None:
    with pytest.raises(TypeError, match="not a single str"):
        TarStream("a.tar")
    with pytest.raises(TypeError, match="unexpected keyword argument 'index_dir'"):
        TarStream(["a.tar"], index_dir=str(tmp_path))  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="seed must be an int"):
        TarStream(["a.tar"], seed="1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="shuffle_shards must be a bool"):
        TarStream(["a.tar"], shuffle_shards=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"unsupported URL ftp://127\.0\.0\.1/a\.tar"):
        TarStream(["ftp://127.0.0.1/a.tar"])


def tar_of(members: list[tuple[str, bytes]], size: int | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def huge_claim() -> bytes:
    """A shard whose second member's header claims 2**40 bytes (GNU base-256 size field)."""
    good = tar_of([("000001.cls", b"1")])[:1024]
    header = bytearray(tar_of([("000002.jpg", b"x")])[:512])
    header[124:136] = b"\x80" + (1 << 40).to_bytes(11, "big")
    header[148:156] = b"        "
    header[148:156] = b"%06o\0 " % sum(header)
    return good + bytes(header) + b"x" * 512 + bytes(1024)


def changed_gzip_trailer(at: int) -> bytes:
    """A gzip shard with one byte of its checksum (-8) or size (-1) changed."""
    data = bytearray(gzip.compress(write_shard(["000001", "000002"])))
    data[at] ^= 1
    return bytes(data)


@pytest.mark.parametrize(
    ("name", "data", "error", "message"),
    [
        ("crc.tar.gz", changed_gzip_trailer(-8), ValueError, "checksum"),
        ("size.tar.gz", changed_gzip_trailer(-1), ValueError, "checksum"),
        ("trailer.tar.gz", gzip.compress(write_shard(["000001", "000002"]))[:-4], ValueError, "checksum"),
        ("cut.tar", write_shard(["000001", "000002"])[:1800], ValueError, "truncated"),
        ("cut.tar.gz", gzip.compress(write_shard(["000001", "000002"]))[:-30], ValueError, "bad gzip data"),
        ("noise.tar", bytes(range(256)) * 8, ValueError, "not a tar header"),
        ("noise.tar.gz", bytes(range(256)) * 8, ValueError, "not gzip data"),
        ("bad.tgz", b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + b"\xff" * 64, ValueError, "bad gzip data"),
        ("huge.tar", huge_claim(), ValueError, "truncated"),
        ("huge.tar.gz", gzip.compress(huge_claim()), ValueError, "truncated"),
    ],
)
def test_broken_shards_raise_typed_errors_naming_them(
    tmp_path: pathlib.Path, name: str, data: bytes, error: type[Exception], message: str
) -> None:
    bad = write(tmp_path, name, data)
    good = write(tmp_path, "good.tar", write_shard(["000009"]))
    it = iter(TarStream([bad, good], max_bytes=1 << 20))
    with pytest.raises(error, match=message) as raised:
        list(it)
    assert bad in str(raised.value)
    # The next shard is read after a broken one.
    assert keys(list(it)) == ["000009"]
    # In a loader, max_failures skips the broken shard's error and goes on.
    loader = PyDataloader(TarStream([bad, good]), batch_size=1, max_failures=5)
    got = [k for b in loader for k in keys(b)]
    assert got[-1] == "000009"
    assert len(loader.failures) == 1


def test_missing_files_and_http_statuses_keep_their_types(http_server, tmp_path: pathlib.Path) -> None:
    with pytest.raises(FileNotFoundError):
        next(iter(TarStream([tmp_path / "missing.tar"])))
    url = http_server.url("/gone.tar", token="secret")
    with pytest.raises(OSError, match="404") as raised:
        next(iter(TarStream([url], retries=0)))
    assert "secret" not in str(raised.value)


def test_a_sample_over_max_bytes_or_without_the_member(tmp_path: pathlib.Path) -> None:
    shard = tar_of(
        [("000001.jpg", b"a" * 100), ("000002.jpg", b"b" * 5000), ("000003.cls", b"3"), ("000004.jpg", b"d")]
    )
    path = write(tmp_path, "s.tar", shard)
    it = iter(TarStream([path], member="jpg", max_bytes=1000))
    assert next(it) == b"a" * 100
    with pytest.raises(ValueError, match="larger than max_bytes"):
        next(it)
    with pytest.raises(ValueError, match='no member "jpg"'):
        next(it)
    assert next(it) == b"d", "the shard goes on after a sample's error"


def test_next_on_two_threads_at_once_is_refused_not_a_deadlock() -> None:
    """While one thread waits in next(), another's next() raises at once (as a running
    generator does) instead of waiting with the interpreter held."""
    body = write_shard(["000001"])
    release = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            release.wait(30)
            head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            conn.sendall(head.encode() + body)

    server = threading.Thread(target=serve)
    server.start()
    it = iter(TarStream([f"http://127.0.0.1:{listener.getsockname()[1]}/a.tar"]))
    outcomes: queue.Queue[object] = queue.Queue()

    def call() -> None:
        try:
            outcomes.put(next(it))
        except ValueError as e:
            outcomes.put(e)

    callers = [threading.Thread(target=call) for _ in range(2)]
    for t in callers:
        t.start()
    refused = outcomes.get(timeout=30)
    release.set()
    got = outcomes.get(timeout=30)
    for t in [*callers, server]:
        t.join(30)
    listener.close()
    assert isinstance(refused, ValueError)
    assert "already running next() on another thread" in str(refused)
    assert got == stream_sample("000001")


@pytest.mark.timeout(120)
def test_object_stores(object_store_case) -> None:
    case = object_store_case
    case.put_many(
        {"shards/a.tar": write_shard(["000001", "000002"]), "shards/b.tar.gz": gzip.compress(write_shard(["000003"]))}
    )
    urls = [case.url("shards/a.tar"), case.url("shards/b.tar.gz")]
    stream = TarStream(urls, options=case.options, retries=1, timeout=20)
    assert list(stream) == [stream_sample(k) for k in ["000001", "000002", "000003"]]
    if case.name == "s3":
        case.server.delete_object(case.bucket, "shards/a.tar")
        with pytest.raises(FileNotFoundError, match=r"a\.tar"):
            next(iter(stream))


def test_split_by_rank_gives_each_rank_its_shards(tmp_path: pathlib.Path) -> None:
    shards = keys_of(4, 3)
    paths = [write(tmp_path, f"{i}.tar", write_shard(k)) for i, k in enumerate(shards)]

    def rank_keys(rank: int, split: bool, readers: str = "one") -> list[str]:
        stream = TarStream(paths, shuffle_shards=True, seed=1, split_by_rank=split)
        loader = PyDataloader(stream, batch_size=2, num_workers=2, rank=rank, world_size=2, stream_readers=readers)
        return [k for b in loader for k in keys(b)]

    everything = sorted(k for s in shards for k in s)
    firsts = keys(list(TarStream(paths, shuffle_shards=True, seed=1)))[::3]
    for rank in (0, 1):
        got = rank_keys(rank, True)
        # Rank k reads shards k, k + 2 of the epoch's order, whole and in order.
        assert got == [k for f in firsts[rank::2] for k in shards[int(f[:3])]]
        assert sorted(got) == sorted(rank_keys(rank, True, "per_worker"))
    assert sorted(rank_keys(0, True) + rank_keys(1, True)) == everything
    # Without it, the loader's rule: every rank reads every shard and keeps every 2nd sample.
    whole = keys(list(TarStream(paths, shuffle_shards=True, seed=1)))
    assert rank_keys(0, False) == whole[0::2]
    assert rank_keys(1, False) == whole[1::2]
    # Not told a rank, or not splitting: the whole stream.
    assert TarStream(paths).set_rank(1, 2) is False
    alone = TarStream(paths, split_by_rank=True)
    assert keys(list(alone)) == [k for s in shards for k in s]
    assert alone.set_rank(1, 2) is True
    assert keys(list(alone)) == [k for s in shards[1::2] for k in s]


def test_split_by_rank_needs_shards_that_divide(tmp_path: pathlib.Path) -> None:
    paths = [write(tmp_path, f"{i}.tar", write_shard(k)) for i, k in enumerate(keys_of(3, 1))]
    stream = TarStream(paths, split_by_rank=True)
    with pytest.raises(ValueError, match="3 shards do not split over world_size 2"):
        list(PyDataloader(stream, batch_size=1, rank=0, world_size=2))
    with pytest.raises(ValueError, match=r"rank must be in range\(world_size\): rank 2, world_size 2"):
        stream.set_rank(2, 2)
