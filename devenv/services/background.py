"""One piece of work on a daemon thread, its answer taken later (L2): how a step overlaps the ones before it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

_T = TypeVar("_T")


class Background(Generic[_T]):
    """fn() on a daemon thread (an interrupted command does not wait for it); result() joins it and returns its
    value or raises what it raised; wait() only joins (when another error is the news)."""

    def __init__(self, fn: Callable[[], _T], name: str):
        self._value: list[_T] = []
        self._error: list[BaseException] = []

        def run() -> None:
            try:
                self._value.append(fn())
            except BaseException as exc:  # noqa: BLE001 (handed to whoever asks for the result)
                self._error.append(exc)

        self._thread = threading.Thread(target=run, name=name, daemon=True)
        self._thread.start()

    def wait(self) -> None:
        self._thread.join()

    def result(self) -> _T:
        self._thread.join()
        if self._error:
            raise self._error[0]
        return self._value[0]
