"""A Hugging Face ``datasets.IterableDataset`` read in chunks by the one reader of a stream.

``iter(ds)`` of an Arrow-backed dataset cuts its tables into one-row tables and formats each
(microseconds a row, holding the interpreter); ``ds.iter(batch_size=k)`` formats ``k`` rows at
once. Where both give the same rows (the same values, types and order: no formatting or the
Python one, a chain of examples iterables that only slice, step or shuffle Arrow tables and no
feature that decodes), the loader reads ``ds.iter`` and splits each chunk into rows; otherwise it
reads ``iter(ds)`` as before.

The loader's native reader sees a ``ChunkedRows`` as the dataset: it iterates it and, after
each batch, takes its ``state_dict()``: ``{"epoch", "state", "rows_after", "chunk"}``, the
dataset's own state at the start of the chunk being read (None: the start of the epoch), the
rows read past it, and the chunk size (the dataset's state counts chunks of that size: it means
nothing with another). ``load_state_dict`` gives the dataset that state and the next ``iter``
reads chunks of that size and drops those rows. The dataset's own state (what a loader reading
``iter(ds)`` saved) is one of one-row chunks and loads so. A dataset with a shuffle buffer loses
the buffer with its state: that one is read again from the epoch's start and dropped
(``ChunkedRowsFromStart``, no state of its own), as the loader does for any stream.

A chunk that fails (a file that cannot be read) holds rows before the error that ``iter(ds)``
would have given: the rest of the epoch is then read from ``iter(ds)``, from the epoch's start
with the rows already given dropped, so that the same rows come before the same error.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from typing import Any

#: Rows per chunk, at least; a loader's larger batch makes larger chunks, up to ``MAX_CHUNK_ROWS``.
CHUNK_ROWS = 64
MAX_CHUNK_ROWS = 1024

_STATE_KEYS = frozenset({"epoch", "state", "rows_after", "chunk"})


def chunk_rows(batch_size: int) -> int:
    return max(CHUNK_ROWS, min(batch_size, MAX_CHUNK_ROWS))


def is_chunk_state(state: object) -> bool:
    """Whether ``state`` is a ``ChunkedRows.state_dict()``."""
    return isinstance(state, dict) and set(state) == _STATE_KEYS


def _vetted_iterables(module: Any) -> tuple[set[type], type | None, type | None]:
    names = (
        "ArrowExamplesIterable",
        "SelectColumnsIterable",
        "StepExamplesIterable",
        "SkipExamplesIterable",
        "TakeExamplesIterable",
        "BufferShuffledExamplesIterable",
        "InterleavedShardsExamplesIterable",
        "RebatchedArrowExamplesIterable",
        "FormattedExamplesIterable",
    )
    vetted = {getattr(module, n) for n in names if isinstance(getattr(module, n, None), type)}
    formatted = getattr(module, "FormattedExamplesIterable", None)
    return vetted, formatted, getattr(module, "BufferShuffledExamplesIterable", None)


def _python_format(formatting: Any) -> bool:
    return formatting is None or getattr(formatting, "format_type", "?") in (None, "python")


def chunkable(dataset: object) -> str | None:
    """How ``dataset`` can be read in chunks with the same rows as ``iter(dataset)``:
    ``"state"`` (resumed from its own state), ``"from_start"`` (a shuffle buffer: resumed by
    reading again), or None (read ``iter(dataset)``)."""
    hf = sys.modules.get("datasets")
    cls = getattr(hf, "IterableDataset", None)
    if not isinstance(cls, type) or not isinstance(dataset, cls):
        return None
    kind = type(dataset)
    # A subclass that iterates in its own way is read its own way.
    for name in ("__iter__", "iter", "_prepare_ex_iterable_for_iteration", "state_dict", "load_state_dict"):
        if getattr(kind, name, None) is not getattr(cls, name, None):
            return None
    module = sys.modules.get("datasets.iterable_dataset")
    if module is None or not _python_format(getattr(dataset, "_formatting", "?")):
        return None
    features = getattr(dataset, "features", None)
    if not features:
        return None
    try:
        # Imported by name: `datasets` ships no type information.
        require_decoding = importlib.import_module("datasets.features.features").require_decoding
        if any(require_decoding(f) for f in features.values()):
            return None
    except Exception:
        return None
    vetted, formatted, shuffled = _vetted_iterables(module)
    top = getattr(dataset, "_ex_iterable", None)
    if top is None or getattr(top, "iter_arrow", None) is None:
        return None
    node, how = top, "state"
    while node is not None:
        if type(node) not in vetted:
            return None
        if type(node) is formatted and (
            not _python_format(getattr(node, "formatting", "?")) or getattr(node, "force_convert_to_python", True)
        ):
            return None
        if type(node) is shuffled:
            how = "from_start"
        node = getattr(node, "ex_iterable", None)
    return how


class ChunkedRowsFromStart:
    """The rows of ``dataset`` (a ``datasets.IterableDataset``), read ``chunk`` at a time."""

    #: Whether it has a state of its own (``ChunkedRows``).
    _stateful = False

    def __init__(self, dataset: Any, chunk: int) -> None:
        self.dataset = dataset
        self.chunk = chunk
        #: Chunks read (the fast path at work).
        self.chunks_read = 0
        #: Times a chunk could not be read or split and the rest came from ``iter(dataset)``.
        self.fell_back = 0
        # What state_dict() says: the epoch, the dataset's state at the start of the chunk
        # being read (None: the epoch's start), the rows read past it, the chunk size.
        self._epoch = 0
        self._start: Any = None
        self._taken = 0
        self._size = chunk
        #: A state loaded for the next iteration.
        self._pending: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.dataset!r}, chunk={self.chunk})"

    def _begin(self) -> tuple[Any, int, int]:
        """Where this epoch's iteration starts: the dataset's state (None: the epoch's start),
        the rows to drop past it, and the chunk size that state was taken with (its meaning
        depends on it)."""
        ds = self.dataset
        pending, self._pending = self._pending, None
        if pending is not None and pending["epoch"] == ds.epoch:
            return pending["state"], pending["rows_after"], pending["chunk"]
        # A state given to the dataset itself (``iter(ds)``'s, of one-row chunks) for this
        # epoch is where ``iter(ds)`` would start: read on from it in chunks of one row.
        given = getattr(ds, "_starting_state_dict", None)
        if isinstance(given, dict) and given.get("epoch") == ds.epoch:
            return given, 0, 1
        return None, 0, self.chunk

    def __iter__(self) -> Iterator[Any]:
        return self._rows()

    def _rows(self) -> Iterator[Any]:
        ds = self.dataset
        stateful = self._stateful
        origin, skip, size = self._begin()
        self._epoch, self._size = ds.epoch, size
        start, taken = origin, 0  # the current chunk's start, the rows read past it
        self._start, self._taken = start, 0
        since = 0  # rows read past `origin`
        chunks = ds.iter(batch_size=size)
        names = list(ds.features)
        while True:
            try:
                rows = _split(next(chunks), names)
            except StopIteration:
                return
            except Exception:
                # A chunk that fails: its error belongs to one of its rows, after the rows
                # before it. iter(dataset) reads on from `origin` to it, when a state of one-row
                # chunks (or none) can say where that is.
                if origin is not None and size != 1:
                    raise
                rows = None
            if rows is None:
                break
            self.chunks_read += 1
            after = ds.state_dict() if stateful else None
            if skip:
                dropped = min(skip, len(rows))
                skip -= dropped
                taken += dropped
                since += dropped
                rows = rows[dropped:]
            for row in rows:
                taken += 1
                since += 1
                self._taken = taken
                yield row
            if stateful:
                start, taken = after, 0
                self._start, self._taken = start, 0
        # The rest from iter(dataset), as without chunks.
        self.fell_back += 1
        if origin is not None and size != 1:
            raise RuntimeError(
                f"a chunk of {type(ds).__name__} was not a dict of the columns {names}: the rest of "
                "this epoch cannot be read in chunks nor row by row from its state"
            )
        chunks = None
        if origin is not None:
            ds.load_state_dict(origin)
        plain = iter(ds)
        self._start, self._taken = origin, since
        for _ in range(since + skip):
            try:
                next(plain)
            except StopIteration:
                return
        since += skip
        self._taken = since
        for row in plain:
            since += 1
            self._taken = since
            yield row


class ChunkedRows(ChunkedRowsFromStart):
    """``ChunkedRowsFromStart`` with a state: the dataset's own at a chunk's start, and the
    rows read past it."""

    _stateful = True

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self._epoch, "state": self._start, "rows_after": self._taken, "chunk": self._size}

    @staticmethod
    def check_state(state: object) -> dict[str, Any]:
        """``state`` as a ``state_dict()``: one of this loader's, or the dataset's own (the
        state of a loader reading ``iter(dataset)``, which is one of one-row chunks)."""
        if isinstance(state, dict) and set(state) == {"examples_iterable", "epoch"}:
            return {"epoch": state["epoch"], "state": state, "rows_after": 0, "chunk": 1}
        if not is_chunk_state(state):
            keys = sorted(state) if isinstance(state, dict) else type(state).__name__
            raise ValueError(
                "state['dataset_state'] is neither a state of a datasets.IterableDataset nor one "
                f"of a loader reading it in chunks (it has {keys})"
            )
        assert isinstance(state, dict)
        for key, least in (("rows_after", 0), ("chunk", 1), ("epoch", 0)):
            value = state[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"state['dataset_state'][{key!r}] must be an int >= {least}, got {value!r}")
        if state["state"] is not None and not isinstance(state["state"], dict):
            raise ValueError("state['dataset_state']['state'] must be the dataset's state_dict() or None")
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = dict(self.check_state(state))
        self.dataset.load_state_dict(state["state"])
        self._pending = state
        self._epoch, self._start, self._taken, self._size = (
            state["epoch"],
            state["state"],
            state["rows_after"],
            state["chunk"],
        )

    def forget(self) -> None:
        """Drops a loaded state not read yet (another state was loaded since)."""
        if self._pending is not None:
            self._pending = None
            self.dataset.load_state_dict(None)


def _split(chunk: object, names: list[str]) -> list[dict[str, Any]] | None:
    """The rows of a dict of columns, or None when it is not one whose columns are ``names``
    in that order, all of one length."""
    if not isinstance(chunk, dict) or list(chunk) != names or not names:
        return None
    columns = list(chunk.values())
    n = len(columns[0])
    if any(len(c) != n for c in columns):
        return None
    return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]
