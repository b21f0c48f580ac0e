"""The record of skipped samples (``PyDataloader(max_failures=...)``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Failure:
    """One item that failed and was dropped from its batch."""

    index: int
    """The dataset index of the item."""
    type: str
    """The name of the exception's type."""
    message: str
    """The exception's message."""


class TooManyFailures(RuntimeError):
    """More items failed in one epoch than ``max_failures`` allows; ``failures`` lists them all."""

    def __init__(self, message: str, failures: list[Failure]) -> None:
        super().__init__(message)
        self.failures = failures
