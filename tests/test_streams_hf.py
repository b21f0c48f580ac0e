"""A Hugging Face ``datasets.IterableDataset`` read in chunks (``ds.iter(batch_size=k)``) by the
one reader of a stream: the same rows as ``iter(ds)`` (values, types, order) wherever it is
taken, ``iter(ds)`` wherever it would not give them, ranks, and a resume to the exact batches of
an uninterrupted run."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataloader_rs import PyDataloader, _hf_stream
from dataloader_rs._hf_stream import ChunkedRows, ChunkedRowsFromStart

datasets = pytest.importorskip("datasets")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
from datasets.distributed import split_dataset_by_node  # noqa: E402

datasets.disable_progress_bars()

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("text", pa.string()),
        ("score", pa.float32()),
        ("flag", pa.bool_()),
        ("maybe", pa.int32()),
        ("nest", pa.struct([("a", pa.int16()), ("b", pa.list_(pa.float64()))])),
        ("tags", pa.list_(pa.string())),
        ("pairs", pa.list_(pa.struct([("k", pa.string()), ("v", pa.int64())]))),
    ]
)


def row(i: int) -> dict:
    return {
        "id": i,
        "text": f"row {i} " * (i % 3),
        "score": i / 4,
        "flag": i % 2 == 0,
        "maybe": None if i % 5 == 0 else i,
        "nest": {"a": i % 7, "b": [i / 2] * (i % 3)},
        "tags": [str(i)] * (i % 2),
        "pairs": [{"k": "x", "v": i}] if i % 4 else [],
    }


def write_shards(folder: Path, counts: list[int], row_group: int = 16) -> list[str]:
    """Parquet shards of `counts[s]` rows each, ids counting on across them, in row groups of
    `row_group` rows (several Arrow tables a shard)."""
    paths, start = [], 0
    for s, n in enumerate(counts):
        table = pa.Table.from_pylist([row(i) for i in range(start, start + n)], schema=SCHEMA)
        path = folder / f"shard{s:02d}.parquet"
        pq.write_table(table, path, row_group_size=row_group)
        paths.append(str(path))
        start += n
    return paths


def parquet(paths: list[str]):
    return datasets.load_dataset("parquet", data_files=paths, split="train", streaming=True)


@pytest.fixture(autouse=True)
def no_sleep_at_the_end_of_a_shuffle(monkeypatch):
    # `datasets` sleeps 5 s when its shuffle's prefetching threads stop (for network reads).
    monkeypatch.setattr(datasets.config, "SLEEP_TIME_ON_THREADS_SHUTDOWN", 0)


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> list[str]:
    return write_shards(tmp_path_factory.mktemp("hf"), [37, 50, 1, 29, 40, 33])


def flat(batches):
    return [x for b in batches for x in b]


def same(got, expected) -> None:
    """Equal values of the same types, in the same order (repr tells 1 from 1.0 and True)."""
    assert len(got) == len(expected)
    assert [repr(r) for r in got] == [repr(r) for r in expected]


class IterSpy:
    """Counts the calls of ``datasets.IterableDataset.__iter__`` (the row-by-row path)."""

    def __init__(self, monkeypatch) -> None:
        self.calls = 0
        original = datasets.IterableDataset.__iter__

        def spy(ds):
            self.calls += 1
            return original(ds)

        monkeypatch.setattr(datasets.IterableDataset, "__iter__", spy)


def chunked(loader) -> bool:
    return isinstance(loader._stream_source, ChunkedRowsFromStart)


def plain_loader(monkeypatch, ds, **kwargs) -> PyDataloader:
    """The loader as it was: ``iter(ds)``, row by row."""
    with monkeypatch.context() as m:
        m.setattr(_hf_stream, "chunkable", lambda dataset: None)
        loader = PyDataloader(ds, **kwargs)
    assert not chunked(loader)
    return loader


# name -> (the dataset from the parquet shards, whether it is read in chunks, with a state)
CASES = {
    "plain": (lambda ds: ds, ChunkedRows),
    "python format": (lambda ds: ds.with_format("python"), ChunkedRows),
    "format None": (lambda ds: ds.with_format(None), ChunkedRows),
    "select_columns": (lambda ds: ds.select_columns(["pairs", "id"]), ChunkedRows),
    "skip/take": (lambda ds: ds.skip(30).take(120), ChunkedRows),
    "split by node, by shards": (lambda ds: split_dataset_by_node(ds, rank=1, world_size=3), ChunkedRows),
    "split by node, by rows": (lambda ds: split_dataset_by_node(ds, rank=2, world_size=4), ChunkedRows),
    # A shuffle buffer loses its content with the dataset's state: read again and dropped.
    "shuffle": (lambda ds: ds.shuffle(seed=3, buffer_size=20), ChunkedRowsFromStart),
    "shuffle, skip, select": (
        lambda ds: ds.shuffle(seed=4, buffer_size=9).skip(7).select_columns(["nest"]),
        ChunkedRowsFromStart,
    ),
    "map": (lambda ds: ds.map(lambda r: {"twice": r["id"] * 2}), None),
    "batched map": (lambda ds: ds.map(lambda b: {"n": [len(t) for t in b["text"]]}, batched=True), None),
    "filter": (lambda ds: ds.filter(lambda r: r["id"] % 3 == 0), None),
    "numpy format": (lambda ds: ds.with_format("numpy"), None),
    "torch format": (lambda ds: ds.with_format("torch").select_columns(["id", "score"]), None),
    "arrow format": (lambda ds: ds.with_format("arrow"), None),
    "cast": (lambda ds: ds.cast_column("score", datasets.Value("float64")).with_format("python"), ChunkedRows),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("workers", [0, 2])
def test_the_rows_are_those_of_iter_and_chunks_read_where_they_are_the_same(monkeypatch, paths, name, workers):
    make, kind = CASES[name]
    if name == "torch format":
        pytest.importorskip("torch")
    ds = make(parquet(paths))
    expected = list(ds)
    assert expected
    spy = IterSpy(monkeypatch)
    loader = PyDataloader(ds, batch_size=7, num_workers=workers)
    got = flat(loader)
    assert loader.dataset is ds
    if kind is None:
        assert not chunked(loader)
        assert spy.calls == 1
        if name == "arrow format":
            assert [r.to_pylist() for r in got] == [r.to_pylist() for r in expected]
        elif name in ("numpy format", "torch format"):
            assert [repr(r) for r in got] == [repr(r) for r in expected]
        else:
            same(got, expected)
        return
    same(got, expected)
    assert type(loader._stream_source) is kind
    assert spy.calls == 0  # never row by row
    assert loader._stream_source.chunks_read > 0
    assert loader._stream_source.fell_back == 0


def test_rows_of_a_dataset_made_from_a_dataset_are_read_in_chunks(monkeypatch):
    ds = datasets.Dataset.from_list([row(i) for i in range(53)]).to_iterable_dataset(num_shards=3)
    expected = list(ds)
    spy = IterSpy(monkeypatch)
    loader = PyDataloader(ds, batch_size=4, num_workers=2)
    same(flat(loader), expected)
    assert chunked(loader)
    assert spy.calls == 0


def test_what_is_not_read_in_chunks(monkeypatch, paths):
    ds = parquet(paths)
    # Readers per worker: the dataset splits itself by get_worker_info() in __iter__.
    assert not chunked(PyDataloader(ds, batch_size=4, num_workers=2, stream_readers="per_worker"))

    def rows():
        yield from (row(i) for i in range(5))

    assert not chunked(PyDataloader(datasets.IterableDataset.from_generator(rows), batch_size=2))

    class Own(datasets.IterableDataset):
        def __iter__(self):
            yield from super().__iter__()

    own = Own(ds._ex_iterable, info=ds.info, split=ds.split)
    assert not chunked(PyDataloader(own, batch_size=2))
    # A feature that decodes (an image, a sound) is decoded row by row.
    images = ds.select_columns(["text"]).cast_column("text", datasets.Image())
    assert not chunked(PyDataloader(images, batch_size=2))


@pytest.mark.parametrize("world", [2, 3])
def test_the_loaders_ranks_share_the_rows_as_before(monkeypatch, paths, world):
    ds = parquet(paths)
    rows = list(ds)
    complete = len(rows) // world * world
    for rank in range(world):
        kwargs = {"batch_size": 5, "num_workers": 2, "rank": rank, "world_size": world}
        loader = PyDataloader(ds, **kwargs)
        got = flat(loader)
        assert chunked(loader)
        same(got, rows[rank:complete:world])
        same(got, flat(plain_loader(monkeypatch, ds, **kwargs)))


def test_the_epochs_reach_the_users_dataset(paths):
    ds = parquet(paths).shuffle(seed=1, buffer_size=30)
    loader = PyDataloader(ds, batch_size=8, num_workers=2)
    epochs = [flat(loader) for _ in range(2)]
    assert loader.dataset is ds
    assert ds.epoch == 1
    assert chunked(loader)
    for epoch, got in enumerate(epochs):
        ds.set_epoch(epoch)
        same(got, list(ds))
    assert epochs[0] != epochs[1]


def test_the_loaders_shuffle_buffer_gives_what_it_gave(monkeypatch, paths):
    ds = parquet(paths)
    kwargs = {"batch_size": 6, "num_workers": 2, "shuffle_buffer": 11, "seed": 5}
    loader = PyDataloader(ds, **kwargs)
    assert chunked(loader)
    same(flat(loader), flat(plain_loader(monkeypatch, ds, **kwargs)))


def test_a_read_error_reaches_the_caller_after_the_same_rows(monkeypatch, tmp_path):
    # An empty Parquet shard: `datasets` fails when it reaches it, after the rows before it.
    good = write_shards(tmp_path, [45, 20])
    empty = tmp_path / "shard99.parquet"
    pq.write_table(pa.Table.from_pylist([], schema=SCHEMA), empty)
    ds = parquet([good[0], str(empty), good[1]])

    def until_error(loader):
        got, it = [], iter(loader)
        while True:
            try:
                got.append(next(it))
            except StopIteration:
                return got, None
            except Exception as e:
                return got, type(e)

    kwargs = {"batch_size": 4, "num_workers": 2}
    loader = PyDataloader(ds, **kwargs)
    got, error = until_error(loader)
    assert (got, error) == until_error(plain_loader(monkeypatch, ds, **kwargs))
    assert error is not None
    assert len(flat(got)) == 44
    assert loader._stream_source.fell_back == 1

    skipping = PyDataloader(ds, max_failures=1, **kwargs)
    assert flat(skipping) == flat(plain_loader(monkeypatch, ds, max_failures=1, **kwargs))
    assert [f.type for f in skipping.failures] == [error.__name__]


def test_break_and_start_again(paths):
    ds = parquet(paths)
    loader = PyDataloader(ds, batch_size=3, num_workers=2)
    assert chunked(loader)
    for i, _ in enumerate(loader):
        if i == 2:
            break
    same(flat(loader), list(ds))


def resumed(make, stop: int, workers: int, chunk: int | None = None, resume_chunk: int | None = None, **kwargs):
    """An epoch's first `stop` batches, then the rest from a new loader given the state taken
    after them (json round trip), and the epoch after."""

    def loader(size):
        made = PyDataloader(make(), num_workers=workers, **kwargs)
        assert chunked(made)
        if size is not None:
            made._stream_source.chunk = size
        return made

    first = loader(chunk)
    it = iter(first)
    head = [next(it) for _ in range(stop)]
    state = json.loads(json.dumps(first.state_dict()))
    del it
    second = loader(resume_chunk)
    second.load_state_dict(state)
    return head, second, state


@pytest.mark.parametrize("name", [n for n, (_, kind) in CASES.items() if kind is not None])
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("stop", [0, 1, 5, 11])
def test_a_resumed_epoch_gives_the_batches_of_an_uninterrupted_one(paths, name, workers, stop):
    make, kind = CASES[name]

    def dataset():
        return make(parquet(paths))

    reference = PyDataloader(dataset(), batch_size=5, num_workers=workers)
    whole, after = list(reference), list(reference)
    stop = min(stop, len(whole))
    head, second, state = resumed(dataset, stop, workers, batch_size=5)
    if kind is ChunkedRows and stop:
        assert _hf_stream.is_chunk_state(state["dataset_state"])
    assert head + list(second) == whole
    assert list(second) == after


def test_a_resume_reads_on_from_the_datasets_state(monkeypatch, paths):
    head, second, state = resumed(lambda: parquet(paths), 20, 2, batch_size=5)
    dataset_state = state["dataset_state"]
    assert dataset_state["state"] is not None  # a chunk's start past the epoch's
    read: list[int] = []
    original = ChunkedRows._rows

    def rows(self):
        for r in original(self):
            read.append(r["id"])
            yield r

    monkeypatch.setattr(ChunkedRows, "_rows", rows)
    rest = flat(second)
    assert read[0] == rest[0]["id"] == 100  # nothing before the batch it resumes at
    same(flat(head) + rest, list(parquet(paths)))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_state_of_a_loader_reading_row_by_row_resumes_in_chunks(monkeypatch, paths, workers):
    whole = list(PyDataloader(parquet(paths), batch_size=4, num_workers=workers))
    plain = plain_loader(monkeypatch, parquet(paths), batch_size=4, num_workers=workers)
    it = iter(plain)
    head = [next(it) for _ in range(6)]
    state = json.loads(json.dumps(plain.state_dict()))
    del it
    assert set(state["dataset_state"]) == {"examples_iterable", "epoch"}  # the dataset's own
    fast = PyDataloader(parquet(paths), batch_size=4, num_workers=workers)
    fast.load_state_dict(state)
    assert head + list(fast) == whole
    assert chunked(fast)
    assert fast._stream_source.chunks_read > 0


def test_a_state_of_a_loader_reading_in_chunks_is_refused_by_one_reading_row_by_row(monkeypatch, paths):
    ds = parquet(paths)
    fast = PyDataloader(ds, batch_size=4)
    it = iter(fast)
    next(it)
    state = fast.state_dict()
    del it
    assert _hf_stream.is_chunk_state(state["dataset_state"])
    plain = plain_loader(monkeypatch, parquet(paths), batch_size=4)
    with pytest.raises(ValueError, match=r"taken by a loader reading this datasets\.IterableDataset in chunks"):
        plain.load_state_dict(state)
    same(flat(plain), list(ds))  # nothing changed
    state["dataset_state"] = {"rows_after": 3}
    with pytest.raises(ValueError, match=r"neither a state of a datasets\.IterableDataset nor"):
        fast.load_state_dict(state)


def test_a_state_loaded_over_another_forgets_it(paths):
    ds = parquet(paths)
    loader = PyDataloader(ds, batch_size=4, num_workers=2)
    start = loader.state_dict()
    it = iter(loader)
    head = [next(it) for _ in range(3)]
    middle = loader.state_dict()
    del it
    again = PyDataloader(parquet(paths), batch_size=4, num_workers=2)
    again.load_state_dict(middle)
    again.load_state_dict(start)
    assert flat(head) == flat(again)[:12]


@settings(max_examples=30, deadline=None)
@given(
    counts=st.lists(st.integers(1, 40), min_size=1, max_size=4),
    row_group=st.integers(1, 12),
    batch_size=st.integers(1, 9),
    chunk=st.integers(1, 17),
    resume_chunk=st.integers(1, 17),
    workers=st.sampled_from([0, 2]),
    world=st.sampled_from([None, 2]),
    stop=st.integers(0, 12),
    drop_last=st.booleans(),
)
def test_rows_and_resumed_rows_are_exact_for_any_chunking(
    counts, row_group, batch_size, chunk, resume_chunk, workers, world, stop, drop_last
):
    with tempfile.TemporaryDirectory() as folder:
        paths = write_shards(Path(folder), counts, row_group)
        expected = list(parquet(paths))
        kwargs = {"batch_size": batch_size, "drop_last": drop_last}
        if world is not None:
            kwargs |= {"rank": 1, "world_size": world}
            expected = expected[1 : len(expected) // world * world : world]
        loader = PyDataloader(parquet(paths), num_workers=workers, **kwargs)
        loader._stream_source.chunk = chunk
        whole = list(loader)
        if drop_last:
            expected = expected[: len(expected) // batch_size * batch_size]
        same(flat(whole), expected)
        assert [len(b) for b in whole[:-1]] == [batch_size] * (len(whole) - 1)
        stop = min(stop, len(whole))
        head, second, _ = resumed(
            lambda: parquet(paths), stop, workers, chunk=chunk, resume_chunk=resume_chunk, **kwargs
        )
        assert head + list(second) == whole


def test_a_dataset_state_for_a_shuffle_buffer_read_again_is_refused(monkeypatch, paths):
    # Row by row, the loader kept the dataset's state, which loses the shuffle buffer (a resume
    # was not exact); in chunks it keeps none and reads again.
    def shuffled():
        return parquet(paths).shuffle(seed=2, buffer_size=16)

    plain = plain_loader(monkeypatch, shuffled(), batch_size=4)
    it = iter(plain)
    next(it)
    state = plain.state_dict()
    del it
    assert state["dataset_state"] is not None
    fast = PyDataloader(shuffled(), batch_size=4)
    assert type(fast._stream_source) is ChunkedRowsFromStart
    with pytest.raises(ValueError, match="keeps none for IterableDataset: its shuffle buffer"):
        fast.load_state_dict(state)
    state["dataset_state"] = None
    fast.load_state_dict(state)
    assert flat(list(fast)) == flat(list(PyDataloader(shuffled(), batch_size=4)))[4:]
