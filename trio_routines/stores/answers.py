"""What a batch's flush gives each of its callers: kept apart from the batching itself
(batch.py), so that the state directory's writer process, which answers batches but never
queues them, imports no event loop."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

import attrs

I = TypeVar("I")  # noqa: E741 -- the item a caller brings
R = TypeVar("R")  # what it gets back


@attrs.define  # not frozen: a herd makes thousands, and a frozen init costs twice as much
class Answer(Generic[R]):
    """What a flush gives one caller: a value, or the error to raise at it."""

    value: R | None = None
    error: Exception | None = None

    def unwrap(self) -> R:
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]  # None only with an error


def each(call: Callable[[I], R], items: Sequence[I]) -> list[Answer[R]]:
    """``call`` on every item in turn (in a worker thread): each one's value or error."""
    answers: list[Answer[R]] = []
    for item in items:
        try:
            answers.append(Answer(value=call(item)))
        except Exception as exc:
            answers.append(Answer(error=exc))
    return answers
