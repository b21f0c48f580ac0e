"""loader.stats(): fetch and transform latency apart, items and requests in flight, bytes fetched,
retries and the items handed to the consumer, counted exactly on known workloads."""

from __future__ import annotations

import pytest

from dataloader_rs import FileDataset, HttpDataset, PyDataloader

from conftest import Flaky, Range, Stalls, wait_until
from servers.http import item_body

pytestmark = pytest.mark.timeout(60)


def test_bytes_fetched_are_the_sizes_of_the_items_served(http_server):
    urls = [http_server.item_url(i) for i in range(20)]
    loader = PyDataloader(HttpDataset(urls), batch_size=4, num_workers=2, item_concurrency=3)
    assert sum(len(b) for b in loader) == 20
    s = loader.stats()
    assert s["bytes_fetched"] == sum(len(item_body(i)) for i in range(20))
    assert (s["retries"], s["requests_in_flight"], s["items_in_flight"]) == (0, 0, 0)
    assert s["items_delivered"] == 20
    assert s["fetch_p50_seconds"] is not None
    assert s["transform_p50_seconds"] is None  # no transform


def test_files_count_bytes_too(tmp_path):
    paths = []
    for i in range(5):
        (tmp_path / f"{i}.bin").write_bytes(b"x" * (i * 10))
        paths.append(str(tmp_path / f"{i}.bin"))
    loader = PyDataloader(FileDataset(paths), batch_size=2)
    list(loader)
    assert loader.stats()["bytes_fetched"] == sum(i * 10 for i in range(5))


def test_retries_are_counted_against_a_server_that_fails_twice(http_server):
    http_server.fail_first("/item/1", 2, "status=503&retry_after=0")
    ds = HttpDataset([http_server.item_url(i) for i in range(3)], retries=3, backoff=0.01, max_backoff=0.02)
    loader = PyDataloader(ds, batch_size=3, item_concurrency=3)
    assert next(iter(loader)) == [item_body(i) for i in range(3)]
    s = loader.stats()
    assert s["retries"] == 2
    assert s["bytes_fetched"] == sum(len(item_body(i)) for i in range(3))  # failed answers are not counted


def test_requests_and_items_in_flight_while_a_request_stalls(http_server):
    urls = [http_server.item_url(0), http_server.item_url(1, fault="stall")]
    loader = PyDataloader(HttpDataset(urls, timeout=None), batch_size=2, num_workers=1, item_concurrency=2)
    it = iter(loader)
    assert wait_until(lambda: http_server.in_flight == 1 and loader.stats()["bytes_fetched"] == len(item_body(0)))
    s = loader.stats()
    assert (s["requests_in_flight"], s["items_in_flight"]) == (1, 1)
    del it  # cancels the stalled request
    # Both counters reach zero; the item's a moment after its request.
    assert wait_until(lambda: (loader.stats()["requests_in_flight"], loader.stats()["items_in_flight"]) == (0, 0))


def test_items_waiting_for_a_slot_of_items_in_flight_are_not_in_flight(http_server):
    urls = [http_server.item_url(i, fault="stall") for i in range(8)]
    loader = PyDataloader(
        HttpDataset(urls, timeout=None), batch_size=4, num_workers=2, item_concurrency=4, items_in_flight=3
    )
    it = iter(loader)
    assert wait_until(lambda: http_server.in_flight == 3)
    # Two batches of 4 are started; 3 items have a slot and fetch, 5 wait for one.
    assert wait_until(lambda: loader.stats()["items_in_flight"] == 3)
    s = loader.stats()
    assert (s["requests_in_flight"], s["items_in_flight"]) == (3, 3)
    del it
    assert wait_until(lambda: (loader.stats()["requests_in_flight"], loader.stats()["items_in_flight"]) == (0, 0))


@pytest.mark.parametrize("workers", [0, 2])
def test_items_delivered_after_a_break_count_what_the_consumer_got(workers):
    loader = PyDataloader(Range(100), batch_size=10, num_workers=workers, prefetch_depth=4)
    for n, _ in enumerate(loader, 1):
        if n == 3:
            break
    s = loader.stats()
    assert s["items_delivered"] == 30  # the batches prefetched and dropped are not counted
    assert s["items"] == 30


@pytest.mark.parametrize(("workers", "k"), [(0, 1), (2, 1), (2, 3)])
def test_items_delivered_leave_out_skipped_items(workers, k):
    loader = PyDataloader(Flaky(20, {3, 14}), batch_size=5, num_workers=workers, item_concurrency=k, max_failures=2)
    assert sum(len(b) for b in loader) == 18
    assert loader.stats()["items_delivered"] == 18


def test_fetch_and_transform_latency_apart():
    loader = PyDataloader(Range(8), batch_size=4, transform=lambda x: x + 1)
    assert list(loader) == [[1, 2, 3, 4], [5, 6, 7, 8]]
    s = loader.stats()
    assert s["fetch_p50_seconds"] is not None
    assert s["transform_p50_seconds"] is not None
    assert s["transform_p99_seconds"] >= s["transform_p50_seconds"]
    assert (s["requests_in_flight"], s["bytes_fetched"], s["retries"]) == (None, None, None)  # no Rust I/O


def test_async_items_in_flight_while_coroutines_stall():
    loader = PyDataloader(Stalls(8, stall_from=4), batch_size=4, num_workers=1, item_concurrency=3)
    it = iter(loader)
    assert next(it) == [0, 1, 2, 3]
    assert wait_until(lambda: loader.stats()["items_in_flight"] == 3)
    s = loader.stats()
    assert s["items_delivered"] == 4
    assert s["fetch_p50_seconds"] is not None
    del it  # cancels the coroutines
    assert wait_until(lambda: loader.stats()["items_in_flight"] == 0)


def test_a_tar_stream_counts_the_bytes_of_its_shards(tmp_path):
    import gzip

    from test_tar_dataset import write_shard

    from dataloader_rs import PyIterableDataset, TarStream

    plain = tmp_path / "a.tar"
    plain.write_bytes(write_shard(["000001", "000002", "000003"]))
    packed = tmp_path / "b.tar.gz"
    packed.write_bytes(gzip.compress(write_shard(["000004", "000005"])))
    loader = PyDataloader(TarStream([plain, packed]), batch_size=2, num_workers=2)
    assert sum(len(b) for b in loader) == 5
    s = loader.stats()
    # Bytes as stored: the gzip shard's compressed ones.
    assert s["bytes_fetched"] == plain.stat().st_size + packed.stat().st_size
    assert (s["retries"], s["requests_in_flight"]) == (0, 0)

    class Numbers(PyIterableDataset):
        def __iter__(self):
            return iter(range(4))

    other = PyDataloader(Numbers(), batch_size=2)
    list(other)
    assert other.stats()["bytes_fetched"] is None  # a Python stream does its own I/O
