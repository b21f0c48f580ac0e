"""A Hugging Face ``datasets.IterableDataset`` read in chunks by the one reader of a stream.

``iter(ds)`` of an Arrow-backed dataset cuts its tables into one-row tables and formats each
(microseconds a row, holding the interpreter); ``ds.iter(batch_size=k)`` formats ``k`` rows at
once. Where both give the same rows (the same values, types and order: no formatting or the
Python one, a chain of examples iterables that only slice, step or shuffle Arrow tables and no
feature that decodes), the loader reads ``ds.iter`` and splits each chunk into rows; otherwise it
reads ``iter(ds)`` as before.

The loader's native reader sees a ``ChunkedRows`` as the dataset: it iterates it and, after
each batch, takes its ``state_dict()``: ``{"epoch", "state", "rows_after"}``, the dataset's
own state at the start of the chunk being read (None: the start of the epoch) and the rows read
past it. ``load_state_dict`` gives the dataset that state and the next ``iter`` drops those rows:
a state taken in the middle of a chunk resumes at the row after, whatever chunks it is read in.
A dataset with a shuffle buffer loses the buffer with its state, so that one is read again and
dropped (``ChunkedRowsFromStart``, no state of its own), as the loader does for any stream.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

#: Rows per chunk, at least; a loader's larger batch makes larger chunks, up to ``MAX_CHUNK_ROWS``.
CHUNK_ROWS = 64
MAX_CHUNK_ROWS = 1024

_STATE_KEYS = frozenset({"epoch", "state", "rows_after"})


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
        from datasets.features.features import require_decoding

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

    def __init__(self, dataset: Any, chunk: int) -> None:
        self.dataset = dataset
        self.chunk = chunk
        #: Chunks read (the fast path at work).
        self.chunks_read = 0
        #: Times a chunk could not be read or split and the rest was read from ``iter(dataset)``.
        self.fell_back = 0
        self._epoch = 0
        self._start: Any = None
        self._taken = 0
        self._pending: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.dataset!r}, chunk={self.chunk})"

    def _begin(self) -> tuple[Any, int]:
        """The state this epoch's iteration starts from and the rows to drop past it."""
        return None, 0

    def _resume_plain(self, start: Any, skip: int) -> Iterator[Any]:
        """``iter(dataset)`` from ``start``, its first ``skip`` rows dropped."""
        if self._stateful:
            self.dataset.load_state_dict(start)
        rows = iter(self.dataset)
        for _ in range(skip):
            next(rows)  # a StopIteration here ends the rows
        return rows

    _stateful = False

    def __iter__(self) -> Iterator[Any]:
        return self._rows()

    def _rows(self) -> Iterator[Any]:
        ds = self.dataset
        stateful = self._stateful
        start, skip = self._begin()
        self._epoch = ds.epoch
        self._start, self._taken = start, 0
        taken = 0  # rows read past `start`
        chunks = ds.iter(batch_size=self.chunk)
        names = list(ds.features)
        while True:
            rows = None
            try:
                chunk = next(chunks)
            except StopIteration:
                return
            except Exception:
                chunk = None
            if chunk is not None:
                rows = _split(chunk, names)
            if rows is None:
                # A chunk that fails (its error belongs to one row) or that is not rows of the
                # features: the rest comes from iter(dataset), as without chunks.
                self.fell_back += 1
                chunks = None
                try:
                    plain = self._resume_plain(start, taken + skip)
                except StopIteration:
                    return
                taken += skip
                self._taken = taken
                for row in plain:
                    taken += 1
                    self._taken = taken
                    yield row
                return
            self.chunks_read += 1
            after = ds.state_dict() if stateful else None
            if skip:
                dropped = min(skip, len(rows))
                skip -= dropped
                taken += dropped
                rows = rows[dropped:]
            for row in rows:
                taken += 1
                self._taken = taken
                yield row
            if stateful:
                start, taken = after, 0
                self._start, self._taken = start, 0


class ChunkedRows(ChunkedRowsFromStart):
    """``ChunkedRowsFromStart`` with a state: the dataset's own at a chunk's start, and the
    rows read past it."""

    _stateful = True

    def _begin(self) -> tuple[Any, int]:
        ds = self.dataset
        pending, self._pending = self._pending, None
        if pending is not None and pending["epoch"] == ds.epoch:
            return pending["state"], pending["rows_after"]
        # A state the user gave the dataset itself, for this epoch, is where it starts.
        given = getattr(ds, "_starting_state_dict", None)
        if isinstance(given, dict) and given.get("epoch") == ds.epoch:
            return given, 0
        return None, 0

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self._epoch, "state": self._start, "rows_after": self._taken}

    @staticmethod
    def check_state(state: object) -> None:
        if not is_chunk_state(state):
            keys = sorted(state) if isinstance(state, dict) else type(state).__name__
            raise ValueError(
                "state['dataset_state'] was not taken by a loader reading this "
                "datasets.IterableDataset in chunks (it has "
                f"{keys}; a chunked state has epoch, state, rows_after): it was taken with "
                "another stream_readers, format or dataset"
            )
        assert isinstance(state, dict)
        rows = state["rows_after"]
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
            raise ValueError(f"state['dataset_state']['rows_after'] must be an int >= 0, got {rows!r}")
        if state["state"] is not None and not isinstance(state["state"], dict):
            raise ValueError("state['dataset_state']['state'] must be the dataset's state_dict() or None")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.check_state(state)
        self.dataset.load_state_dict(state["state"])
        self._pending = dict(state)
        self._epoch, self._start, self._taken = state["epoch"], state["state"], state["rows_after"]

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
