"""TarDataset over real tar shards (Python's tarfile, webdataset's writer) as files, on the loopback
HTTP server with ranges and on object-store emulators; in PyDataloader (shuffle, samplers,
sharding, resume, skipping, native transforms); faults; and the local cache of the network
datasets (budget, two processes, corrupt entries)."""

from __future__ import annotations

import io
import os
import pathlib
import re
import subprocess
import sys
import tarfile
import textwrap

import pytest
from test_rust_datasets import SERVER_SOCKET_WARNING

from dataloader_rs import (
    HttpDataset,
    ObjectStoreDataset,
    PyDataloader,
    ShardChangedError,
    TarDataset,
    transforms,
)

pytestmark = [pytest.mark.timeout(60), pytest.mark.filterwarnings(SERVER_SOCKET_WARNING)]


@pytest.fixture(autouse=True)
def _private_index_dir(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default index directory (under XDG_CACHE_HOME) is the test's own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


def jpg(key: str) -> bytes:
    """The bytes of sample ``key``'s "jpg" member (any bytes: only their identity is checked)."""
    seed = sum(key.encode())
    return bytes((i * 31 + seed) % 256 for i in range(300 + seed % 1200))


def write_shard(keys: list[str], fmt: int = tarfile.PAX_FORMAT, extra: bool = True) -> bytes:
    """A shard of samples ``keys``, each ``key.jpg`` and ``key.cls``, written by tarfile in
    ``fmt``; with ``extra``, a directory and a file of no sample among them."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        if extra:
            info = tarfile.TarInfo("images")
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        for key in keys:
            for ext, data in (("jpg", jpg(key)), ("cls", key.encode())):
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        if extra:
            info = tarfile.TarInfo("README")
            info.size = 5
            tar.addfile(info, io.BytesIO(b"notes"))
    return buf.getvalue()


def write_wds_shard(keys: list[str]) -> bytes:
    """The same samples as :func:`write_shard`, written by webdataset's ``TarWriter``."""
    wds = pytest.importorskip("webdataset")
    buf = io.BytesIO()
    with wds.TarWriter(buf) as sink:
        for key in keys:
            sink.write({"__key__": key, "jpg": jpg(key), "cls": key.encode()})
    return buf.getvalue()


#: Who writes the shards of the tests run with each writer.
WRITERS = {"tarfile": write_shard, "webdataset": write_wds_shard}


def expected(key: str) -> dict[str, bytes]:
    return {"jpg": jpg(key), "cls": key.encode()}


LONG = "a-very-long-directory-name-" * 6  # ustar's name field holds 100 bytes


@pytest.mark.parametrize(
    "fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT], ids=["ustar", "gnu", "pax"]
)
def test_files_written_by_tarfile(tmp_path: pathlib.Path, fmt: int) -> None:
    keys = [["000000", "000001", f"{LONG[:150]}/000002"], [f"{LONG}/000003", "000004"]]
    if fmt == tarfile.USTAR_FORMAT:
        keys[1][0] = f"{LONG[:150]}/000003"  # ustar splits a name at a slash, no more
    paths = []
    for i, shard_keys in enumerate(keys):
        path = tmp_path / f"shard-{i}.tar"
        path.write_bytes(write_shard(shard_keys, fmt))
        paths.append(path)
    ds = TarDataset(paths, index_dir=tmp_path / "index")
    flat = [k for shard_keys in keys for k in shard_keys]
    assert len(ds) == 5
    assert ds.num_shards == 2
    assert [ds.key(i) for i in range(5)] == flat
    assert [ds[i] for i in range(5)] == [expected(k) for k in flat]
    assert ds[-1] == expected(flat[-1])
    assert list(ds[0]) == ["jpg", "cls"]  # the order of the shard
    with pytest.raises(IndexError, match="index 5 is out of range for a dataset of 5 items"):
        ds[5]
    with pytest.raises(IndexError):
        ds.key(5)
    assert repr(ds) == f"TarDataset(2 shards, first '{paths[0]}', 5 samples)"
    member = TarDataset(paths, member="JPG", index_dir=tmp_path / "index")
    assert repr(member) == f"TarDataset(2 shards, first '{paths[0]}', 5 samples, member='jpg')"


# webdataset's reader leaves its shard's file for the garbage collector to close.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_members_match_webdataset_reading_its_own_shards(tmp_path: pathlib.Path) -> None:
    wds = pytest.importorskip("webdataset")
    path = tmp_path / "wds-000000.tar"
    samples = [
        {"__key__": f"s{i:04d}", "jpg": jpg(str(i)), "cls": str(i % 10).encode(), "json": b"{}"} for i in range(40)
    ]
    with wds.TarWriter(str(path)) as sink:
        for sample in samples:
            sink.write(sample)
    theirs = list(wds.WebDataset(str(path), shardshuffle=False))
    ds = TarDataset([path], index_dir=tmp_path / "index")
    assert len(ds) == len(theirs) == 40
    for i, sample in enumerate(theirs):
        assert ds.key(i) == sample["__key__"]
        assert ds[i] == {k: v for k, v in sample.items() if not k.startswith("__")}


def test_one_member_per_item(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "s.tar"
    path.write_bytes(write_shard(["a", "b"]))
    ds = TarDataset([str(path)], member="JPG", index_dir=tmp_path / "index")
    assert ds.member == "jpg"
    assert [ds[0], ds[1]] == [jpg("a"), jpg("b")]
    with pytest.raises(TypeError, match="member must be a str"):
        TarDataset([path], member=1)


def test_bad_arguments(tmp_path: pathlib.Path) -> None:
    with pytest.raises(TypeError, match="not a single str"):
        TarDataset(str(tmp_path / "s.tar"))
    with pytest.raises(TypeError, match="unexpected keyword argument 'shuffle'"):
        TarDataset([], shuffle=True)
    with pytest.raises(ValueError, match="give cache_dir too"):
        TarDataset([], cache_bytes=10)
    assert len(TarDataset([])) == 0


# --------------------------------------------------------------------------- HTTP and stores


def serve_shards(server, shards: dict[str, list[str]], etag: bool = True, writer: str = "tarfile") -> list[str]:
    for name, keys in shards.items():
        server.put_file(
            f"/{name}",
            WRITERS[writer](keys),
            etag=f'"{name}-1"' if etag else None,
            last_modified=None if etag else "Mon, 01 Jan 2024 00:00:00 GMT",
        )
    return [server.url(f"/{name}") for name in shards]


@pytest.mark.parametrize("writer", list(WRITERS))
@pytest.mark.parametrize("etag", [True, False], ids=["etag", "last-modified"])
def test_http_one_range_request_per_sample_and_a_kept_index(http_server, tmp_path, etag: bool, writer: str) -> None:
    urls = serve_shards(http_server, {"a.tar": ["000001", "000002"], "b.tar": ["000003"]}, etag, writer)
    index = tmp_path / "index"
    TarDataset(urls, index_dir=index)
    indexing = http_server.requests
    # Per shard: its first byte (size, ETag, and whether ranges are served), then its headers.
    assert sorted((r.path, r.headers.get("range") or "") for r in indexing) == [
        ("/a.tar", ""),
        ("/a.tar", "bytes=0-0"),
        ("/b.tar", ""),
        ("/b.tar", "bytes=0-0"),
    ]
    http_server.reset()
    again = TarDataset(urls, index_dir=index)
    assert sorted(r.headers.get("range") for r in http_server.requests) == ["bytes=0-0", "bytes=0-0"]
    http_server.reset()
    loader = PyDataloader(again, batch_size=2, shuffle=True, seed=3, item_concurrency=4)
    got = {s["cls"].decode(): s for batch in loader for s in batch}
    assert got == {k: expected(k) for k in ["000001", "000002", "000003"]}
    reads = http_server.requests
    assert len(reads) == 3
    for r in reads:
        assert r.headers["range"].startswith("bytes=")
        if etag:
            assert r.headers["if-match"] == f'"{r.path[1:]}-1"'
        else:
            assert r.headers["if-unmodified-since"] == "Mon, 01 Jan 2024 00:00:00 GMT"
            assert "if-match" not in r.headers
    assert loader.stats()["bytes_fetched"] == sum(
        int(r.headers["range"][6:].split("-")[1]) - int(r.headers["range"][6:].split("-")[0]) + 1 for r in reads
    )


@pytest.mark.parametrize("etag", [True, False], ids=["etag", "last-modified"])
def test_http_shard_that_changed_is_refused_and_skipped(http_server, tmp_path, etag: bool) -> None:
    urls = serve_shards(http_server, {"a.tar": ["000001", "000002"], "b.tar": ["000003", "000004"]}, etag)
    ds = TarDataset(urls, index_dir=tmp_path / "index", retries=0)
    # Same bytes under a new ETag or Last-Modified: the server refuses the indexed one.
    if etag:
        http_server.put_file("/b.tar", write_shard(["000003", "000004"]), etag='"b.tar-2"')
    else:
        http_server.put_file("/b.tar", write_shard(["000003", "000004"]), last_modified="Tue, 02 Jan 2024 00:00:00 GMT")
    with pytest.raises(ShardChangedError, match=r"b\.tar: the shard changed since it was indexed"):
        ds[2]
    assert isinstance(ShardChangedError("x"), OSError)
    loader = PyDataloader(ds, batch_size=4, max_failures=2)
    (batch,) = list(loader)
    assert [s["cls"] for s in batch] == [b"000001", b"000002"]
    assert sorted((f.index, f.type) for f in loader.failures) == [(2, "ShardChangedError"), (3, "ShardChangedError")]
    # A shard removed after indexing: a 404 per sample, skipped the same way.
    http_server.remove_file("/a.tar")
    loader = PyDataloader(ds, batch_size=4, max_failures=4)
    assert list(loader) == [[]]
    assert [f.type for f in sorted(loader.failures, key=lambda f: f.index)] == [
        "OSError",
        "OSError",
        "ShardChangedError",
        "ShardChangedError",
    ]
    assert "404" in sorted(loader.failures, key=lambda f: f.index)[0].message


@pytest.mark.timeout(120)
@pytest.mark.parametrize("writer", list(WRITERS))
def test_object_stores(object_store_case, tmp_path, writer: str) -> None:
    case = object_store_case
    write = WRITERS[writer]
    case.put_many({"shards/a.tar": write(["000001", "000002"]), "shards/b.tar": write(["000003"])})
    urls = [case.url("shards/a.tar"), case.url("shards/b.tar")]
    ds = TarDataset(urls, options=case.options, index_dir=tmp_path / "index", retries=1, timeout=20)
    assert [ds.key(i) for i in range(3)] == ["000001", "000002", "000003"]
    loader = PyDataloader(ds, batch_size=2, shuffle=True, seed=0)
    got = sorted((s["cls"], s["jpg"]) for batch in loader for s in batch)
    assert got == sorted((k.encode(), jpg(k)) for k in ["000001", "000002", "000003"])
    # Rewritten after indexing: another ETag.
    case.put("shards/b.tar", write_shard(["000009"]))
    with pytest.raises(ShardChangedError, match=r"b\.tar"):
        ds[2]
    if case.name == "s3":
        case.server.delete_object(case.bucket, "shards/a.tar")
        with pytest.raises(FileNotFoundError, match=r"a\.tar"):
            ds[0]


# --------------------------------------------------------------------------- in PyDataloader


@pytest.fixture
def shard_files(tmp_path: pathlib.Path) -> list[pathlib.Path]:
    paths = []
    for s in range(4):
        path = tmp_path / f"shard-{s}.tar"
        path.write_bytes(write_shard([f"{s * 10 + i:06d}" for i in range(5 + s)]))
        paths.append(path)
    return paths


def keys_of(loader) -> list[str]:
    return [s["cls"].decode() for batch in loader for s in batch]


def test_loader_shuffle_samplers_sharding_and_resume(shard_files) -> None:
    ds = TarDataset(shard_files)
    all_keys = [ds.key(i) for i in range(len(ds))]
    assert len(ds) == 5 + 6 + 7 + 8
    assert keys_of(PyDataloader(ds, batch_size=4, num_workers=2)) == all_keys
    shuffled = keys_of(PyDataloader(ds, batch_size=4, shuffle=True, seed=7, num_workers=2))
    assert sorted(shuffled) == sorted(all_keys)
    assert shuffled != all_keys
    assert shuffled == keys_of(PyDataloader(ds, batch_size=5, shuffle=True, seed=7))
    picked = [25, 0, 3, 3]
    assert keys_of(PyDataloader(ds, batch_size=2, sampler=picked)) == [all_keys[i] for i in picked]
    torch = pytest.importorskip("torch")

    def sampler():
        return torch.utils.data.RandomSampler(range(len(ds)), generator=torch.Generator().manual_seed(0))

    order = list(sampler())
    assert keys_of(PyDataloader(ds, batch_size=3, sampler=sampler())) == [all_keys[i] for i in order]
    batches = torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(range(len(ds))), 7, False)
    assert [len(b) for b in PyDataloader(ds, batch_sampler=batches)] == [7, 7, 7, 5]
    ranks = [keys_of(PyDataloader(ds, batch_size=4, rank=r, world_size=3)) for r in range(3)]
    assert sorted(k for r in ranks for k in r) == sorted(all_keys + all_keys[:1])  # padded as torch does
    # Resume in the middle of a shuffled epoch.
    loader = PyDataloader(ds, batch_size=4, shuffle=True, seed=11)
    it = iter(loader)
    head = [s["cls"].decode() for _ in range(3) for s in next(it)]
    state = loader.state_dict()
    del it
    resumed = PyDataloader(ds, batch_size=4, shuffle=True, seed=11)
    resumed.load_state_dict(state)
    rest = keys_of(resumed)
    assert head + rest == keys_of(PyDataloader(ds, batch_size=4, shuffle=True, seed=11))


def test_python_transform_gets_the_dict(shard_files) -> None:
    ds = TarDataset(shard_files)
    loader = PyDataloader(ds, batch_size=8, transform=lambda s: (len(s["jpg"]), int(s["cls"])))
    got = [item for batch in loader for item in batch]
    assert got == [(len(jpg(ds.key(i))), int(ds.key(i))) for i in range(len(ds))]


def png(i: int) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (8 + i, 6), (i * 20 % 256, 0, 255 - i)).save(out, format="PNG")
    return out.getvalue()


def test_native_transforms_take_one_member(tmp_path: pathlib.Path) -> None:
    pytest.importorskip("PIL")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for i in range(6):
            for ext, data in (("png", png(i)), ("cls", str(i).encode())):
                info = tarfile.TarInfo(f"{i:04d}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    path = tmp_path / "images.tar"
    path.write_bytes(buf.getvalue())
    chain = transforms.Compose([transforms.Decode(), transforms.CenterCrop(6)])
    images = TarDataset([path], member="png")
    batches = list(PyDataloader(images, batch_size=3, transform=chain))
    shapes = [image.shape for batch in batches for image in batch]
    assert shapes == [(6, 6, 3)] * 6
    first = batches[0][0]
    assert first.shape == chain(png(0)).shape
    whole = TarDataset([path])
    with pytest.raises(ValueError, match="member='jpg'"):
        PyDataloader(whole, transform=chain)
    # A Python transform can run the native chain on the member it picks.
    loader = PyDataloader(whole, batch_size=6, transform=lambda s: (chain(s["png"]).shape, int(s["cls"])))
    (batch,) = list(loader)
    assert batch == [((6, 6, 3), i) for i in range(6)]


# --------------------------------------------------------------------------- faults


def test_a_truncated_or_missing_shard_fails_naming_it(tmp_path: pathlib.Path) -> None:
    good = tmp_path / "good.tar"
    good.write_bytes(write_shard(["a", "b"]))
    data = write_shard(["c", "d"])
    cut = tmp_path / "cut.tar"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=rf"^{re.escape(str(cut))}: the archive is truncated: it ends "):
        TarDataset([good, cut])
    missing = tmp_path / "missing.tar"
    with pytest.raises(FileNotFoundError, match=str(missing)):
        TarDataset([good, missing])
    # Cut after indexing: its size changed, nothing is read with the old index.
    cut.write_bytes(data)
    ds = TarDataset([good, cut])
    cut.write_bytes(data[: len(data) // 2])
    loader = PyDataloader(ds, batch_size=4, max_failures=2)
    assert keys_of(loader) == ["a", "b"]
    assert [(f.index, f.type) for f in sorted(loader.failures, key=lambda f: f.index)] == [
        (2, "ShardChangedError"),
        (3, "ShardChangedError"),
    ]
    assert "bytes, indexed at" in loader.failures[0].message
    cut.unlink()
    with pytest.raises(FileNotFoundError):
        ds[2]


def tar_of(members: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_a_member_or_sample_over_max_bytes_is_skipped_and_recorded(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "s.tar"
    members = [("a.jpg", b"a" * 2000), ("a.cls", b"1"), ("b.jpg", b"b" * 3101), ("b.cls", b"2")]
    members += [("c.jpg", b"c" * 1999), ("d.jpg", b"d" * 1500), ("d.cls", b"d" * 1500)]
    path.write_bytes(tar_of(members))
    # max_bytes bounds a member, and the bytes read for a sample (its headers included):
    # sample a is 3073 bytes, d 4060.
    ds = TarDataset([path], max_bytes=3100)
    with pytest.raises(ValueError, match=r"b\.jpg: the item \(3101 bytes\) is larger than max_bytes \(3100 bytes\)"):
        ds[1]
    with pytest.raises(ValueError, match=r"sample d: the item \(4060 bytes\) is larger than max_bytes \(3100 bytes\)"):
        ds[3]
    loader = PyDataloader(ds, batch_size=4, max_failures=2)
    assert [s["jpg"][:1] for batch in loader for s in batch] == [b"a", b"c"]
    assert [(f.index, f.type) for f in loader.failures] == [(1, "ValueError"), (3, "ValueError")]


@pytest.mark.parametrize("max_bytes", [67108864, 2**63])
def test_a_member_size_past_the_shard_fails_naming_it(tmp_path: pathlib.Path, max_bytes: int) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("s.txt")
        info.size = 5
        info.pax_headers = {"size": str(2**64 - 1)}
        tar.addfile(info, io.BytesIO(b"hello"))
    path = tmp_path / "s.tar"
    path.write_bytes(buf.getvalue())
    assert path.stat().st_size <= 10240
    message = (
        rf"^{re.escape(str(path))}: the archive is truncated: it ends inside a member's data "
        r"\(its header at byte 1024 gives 18446744073709551615 bytes\)"
    )
    with pytest.raises(ValueError, match=message):
        TarDataset([path], max_bytes=max_bytes)


def test_a_sample_without_the_member_is_skipped(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "s.tar"
    path.write_bytes(tar_of([("a.jpg", b"A"), ("b.cls", b"1"), ("c.jpg", b"C")]))
    loader = PyDataloader(TarDataset([path], member="jpg"), batch_size=3, max_failures=1)
    assert [item for batch in loader for item in batch] == [b"A", b"C"]
    (failure,) = loader.failures
    assert (failure.index, failure.type) == (1, "ValueError")
    assert failure.message == f'{path}: sample b: it has no member "jpg" (its members: cls)'


# --------------------------------------------------------------------------- the cache


def test_http_cache_serves_the_second_epoch(http_server, tmp_path) -> None:
    urls = [http_server.item_url(i, size=1000) for i in range(20)]
    ds = HttpDataset(urls, cache_dir=tmp_path / "cache")
    first = [bytes(x) for batch in PyDataloader(ds, batch_size=5, shuffle=True, seed=1) for x in batch]
    assert len(http_server.requests) == 20
    loader = PyDataloader(ds, batch_size=5, shuffle=True, seed=1)
    second = [bytes(x) for batch in loader for x in batch]
    assert second == first
    assert len(http_server.requests) == 20, "epoch 2 made no request"
    assert loader.stats()["cache_hits"] == 20
    stats = ds.cache_stats()
    assert (stats["hits"], stats["misses"], stats["written"]) == (20, 20, 20)
    assert HttpDataset(urls).cache_stats() is None
    assert f"cache_dir='{tmp_path / 'cache'}', cache_bytes=None" in repr(ds)


def test_a_budget_below_the_data_keeps_a_stable_subset(http_server, tmp_path) -> None:
    urls = [http_server.item_url(i, size=1000) for i in range(60)]
    # About a third of the items (each entry is the body and a small header).
    ds = HttpDataset(urls, cache_dir=tmp_path / "cache", cache_bytes=20 * 1040)
    hits = []
    cached = []
    for epoch in range(4):
        http_server.reset()
        loader = PyDataloader(ds, batch_size=6, shuffle=True, seed=epoch)
        assert sum(len(b) for b in loader) == 60
        fetched = {r.path for r in http_server.requests}
        hits.append(60 - len(fetched))
        cached.append(frozenset(f"/item/{i}" for i in range(60)) - fetched)
    assert hits[0] == 0
    assert 15 <= hits[1] <= 20
    assert hits[1] == hits[2] == hits[3]
    assert cached[1] == cached[2] == cached[3], "the same items every epoch"
    entries = [p for p in (tmp_path / "cache" / "v1").rglob("*") if p.is_file() and p.parent.name != "tmp"]
    assert sum(p.stat().st_size for p in entries) <= 20 * 1040


CHILD = textwrap.dedent(
    """
    import sys
    from dataloader_rs import HttpDataset, PyDataloader
    urls, cache = sys.argv[1].split(","), sys.argv[2]
    ds = HttpDataset(urls, cache_dir=cache)
    n = sum(len(b) for b in PyDataloader(ds, batch_size=4, shuffle=True, num_workers=2))
    s = ds.cache_stats()
    print(n, s["written"], s["hits"], s["not_admitted"])
    """
)


def test_two_processes_share_one_cache(http_server, tmp_path) -> None:
    urls = [http_server.item_url(i, size=2000) for i in range(24)]
    cache = tmp_path / "cache"
    # Two processes at once over the same directory, then this one.
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, ",".join(urls[k::2] + urls[1 - k :: 2]), str(cache)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for k in (0, 1)
    ]
    outs = [c.communicate(timeout=50)[0].split() for c in children]
    assert all(c.returncode == 0 for c in children)
    # Each item was read from the cache or fetched (then written, or found written meanwhile).
    assert all(int(n) == 24 and int(w) + int(h) + int(a) == 24 for n, w, h, a in outs), outs
    assert sum(int(w) for _, w, _, _ in outs) >= 24
    http_server.reset()
    ds = HttpDataset(urls, cache_dir=cache)
    got = [bytes(x) for batch in PyDataloader(ds, batch_size=8) for x in batch]
    assert http_server.requests == []
    from servers.http import item_body

    assert got == [item_body(i, 2000) for i in range(24)]


def test_a_corrupt_entry_is_fetched_again(http_server, tmp_path) -> None:
    urls = [http_server.item_url(i, size=500) for i in range(4)]
    cache = tmp_path / "cache"
    ds = HttpDataset(urls, cache_dir=cache)
    first = [bytes(ds[i]) for i in range(4)]
    entries = sorted(p for p in (cache / "v1").rglob("*") if p.is_file() and p.parent.name != "tmp")
    assert len(entries) == 4
    entries[0].write_bytes(entries[0].read_bytes()[:-10])  # truncated
    data = bytearray(entries[1].read_bytes())
    data[-1] ^= 0xFF  # one bit flipped
    entries[1].write_bytes(bytes(data))
    http_server.reset()
    again = HttpDataset(urls, cache_dir=cache)
    assert [bytes(again[i]) for i in range(4)] == first
    assert len(http_server.requests) == 2
    assert again.cache_stats()["corrupt"] == 2
    assert again.cache_stats()["written"] == 2


def test_tar_and_object_store_datasets_take_a_cache(http_server, tmp_path) -> None:
    urls = serve_shards(http_server, {"a.tar": ["000001", "000002", "000003"]})
    ds = TarDataset(urls, cache_dir=tmp_path / "cache", cache_bytes=10**6)
    assert (tmp_path / "cache" / "tar-index").is_dir(), "the index goes with the cache"
    first = [ds[i] for i in range(3)]
    http_server.reset()
    again = TarDataset(urls, cache_dir=tmp_path / "cache")
    assert [again[i] for i in range(3)] == first
    assert [r.headers.get("range") for r in http_server.requests] == ["bytes=0-0"]
    objects = tmp_path / "objects"
    objects.mkdir()
    (objects / "x").write_bytes(b"object x")
    store = ObjectStoreDataset(f"file://{objects}", ["x"], cache_dir=tmp_path / "cache")
    assert store[0] == b"object x"
    (objects / "x").write_bytes(b"changed")
    assert ObjectStoreDataset(f"file://{objects}", ["x"], cache_dir=tmp_path / "cache")[0] == b"object x"
    assert os.path.isdir(tmp_path / "cache" / "v1")


def test_a_failed_write_turns_writing_off_with_one_warning(http_server, tmp_path, capfd) -> None:
    urls = [http_server.item_url(i, size=300) for i in range(6)]
    cache = tmp_path / "cache"
    ds = HttpDataset(urls, cache_dir=cache)
    assert bytes(ds[0]) == bytes(HttpDataset(urls)[0])
    # Writes now fail as on a full disk: where the temporary files go is a file.
    (cache / "v1" / "tmp").rmdir()
    (cache / "v1" / "tmp").write_bytes(b"")
    loader = PyDataloader(ds, batch_size=3)
    assert sum(len(b) for b in loader) == 6, "the epoch goes on"
    err = capfd.readouterr().err
    assert err.count("dataloader-rs: the cache in") == 1, err
    assert "stops writing" in err
    stats = ds.cache_stats()
    assert stats["writes_off"] is True
    assert stats["written"] == 1
    assert bytes(ds[0]) == bytes(HttpDataset(urls)[0])
    assert ds.cache_stats()["hits"] == 2  # what was cached is still read
