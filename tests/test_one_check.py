"""Every argument the native loader receives is checked once, in Rust (crates/py/src/loader/spec.rs):
``_loader.py`` passes the user's value through unchecked.

Judged by behaviour, not by reading the source: for each argument, a value the check refuses
(1) reaches the native constructor untouched when the native loader is replaced by a recorder
(nothing in Python refused or converted it), and (2) is refused by the real native constructor
(the error comes from the ``_native.Loader(...)`` call, not from Python code). A new keyword of
the native constructor fails ``test_every_native_argument_is_listed`` until it is listed here.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from dataloader_rs import FileDataset, PyAsyncDataset, PyDataloader, _native

from conftest import Range

#: Keywords ``_loader.py`` fills itself rather than passing a user's value through: what only
#: Python can tell (the kind of dataset, its callables, its event loop, the transform's arity,
#: the collation with pinning, the base seed drawn from torch's or ``random``'s generator).
INTERNAL = {
    "kind",
    "dataset",
    "getitem",
    "getitems",
    "event_loop",
    "transform",
    "transform_takes_index",
    "collate_fn",
    "base_seed",
    "make_iter",
}


class Squares(PyAsyncDataset):
    def __len__(self) -> int:
        return 4

    async def __getitem__(self, i: int) -> int:
        return i * i


class Stream:
    def __iter__(self) -> Any:
        return iter(range(4))


def rust_dataset(tmp_path: Any) -> FileDataset:
    path = tmp_path / "item"
    path.write_bytes(b"x")
    return FileDataset([str(path)] * 4)


#: argument -> (a refused value, other arguments it needs, the dataset kind, error, message)
REFUSED: dict[str, tuple[Any, dict[str, Any], str, type[Exception], str]] = {
    "batch_size": ("2", {}, "python", TypeError, r"batch_size must be an int, got '2' \(str\)"),
    "num_workers": (-1, {}, "python", ValueError, "num_workers must be at least 0, got -1"),
    "prefetch_depth": (0, {}, "python", ValueError, "prefetch_depth must be at least 1, got 0"),
    "prefetch_factor": (0, {"num_workers": 1}, "python", ValueError, "prefetch_factor must be at least 1, got 0"),
    "item_concurrency": (0, {}, "python", ValueError, "item_concurrency must be at least 1, got 0"),
    "drop_last": ("no", {}, "python", TypeError, "drop_last must be a bool"),
    "shuffle": ("yes", {}, "python", TypeError, "shuffle must be a bool"),
    "seed": (1.5, {"shuffle": True}, "python", TypeError, "seed must be an int"),
    "return_indices": (1, {}, "python", TypeError, "return_indices must be a bool"),
    "runtime_threads": (0, {}, "async", ValueError, "runtime_threads must be between 1 and 1024, got 0"),
    "items_in_flight": (0, {}, "rust", ValueError, "items_in_flight must be at least 1, got 0"),
    "rank": (2, {"world_size": 2}, "python", ValueError, r"rank must be in \[0, world_size\)"),
    "world_size": (0, {}, "python", ValueError, "world_size must be at least 1, got 0"),
    "max_failures": (1.5, {}, "python", ValueError, "max_failures is a count"),
    "timeout": ("1", {}, "python", TypeError, "timeout must be a number of seconds, got '1'"),
    "stream_readers": ("two", {}, "stream", ValueError, "stream_readers must be 'one' or 'per_worker', got 'two'"),
    "shuffle_buffer": (-1, {}, "stream", ValueError, "shuffle_buffer must be at least 0, got -1"),
}


def make(kind: str, tmp_path: Any, **kwargs: Any) -> PyDataloader[Any]:
    if kind == "async":
        return PyDataloader(Squares(), **kwargs)
    if kind == "rust":
        return PyDataloader(rust_dataset(tmp_path), **kwargs)
    if kind == "stream":
        return PyDataloader(Stream(), **kwargs)
    return PyDataloader(Range(4), **kwargs)


def test_every_native_argument_is_listed():
    keywords = set(inspect.signature(_native.Loader).parameters)
    assert keywords - INTERNAL == set(REFUSED)
    assert keywords >= INTERNAL


class Reached(Exception):
    """Raised by the recorder in place of the native loader."""


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_python_passes_the_value_through(name, tmp_path, monkeypatch):
    bad, extra, kind, _, _ = REFUSED[name]
    received: dict[str, Any] = {}

    def recorder(**kwargs: Any) -> None:
        received.update(kwargs)
        raise Reached

    monkeypatch.setattr(_native, "Loader", recorder)
    with pytest.raises(Reached):
        make(kind, tmp_path, **extra, **{name: bad})
    assert received[name] is bad


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_rust_refuses_the_value(name, tmp_path):
    bad, extra, kind, error, message = REFUSED[name]
    with pytest.raises(error, match=message) as excinfo:
        make(kind, tmp_path, **extra, **{name: bad})
    # The innermost Python frame is the call into the native constructor.
    last = excinfo.traceback[-1]
    assert last.path.name == "_loader.py"
    assert "_native.Loader(" in str(last.statement)
