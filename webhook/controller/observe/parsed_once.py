"""Parts of devices parsed once per distinct content: a model's devices publish the same capacity map and
consume the same counters, 40,000 times over at a cold start (bench/devices.py)."""

from __future__ import annotations

import marshal
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class ParsedOnce(Generic[T]):
    """`parse` of a slice's JSON, remembered by that JSON's bytes (marshal's format 2: no back-references,
    so equal content gives equal bytes), at most `bound` of them, the oldest forgotten first (never
    cleared whole). The answers are shared: they must be immutable."""

    def __init__(self, parse: Callable[[Any], T], bound: int = 1024) -> None:
        self.parse, self.bound = parse, bound
        self._entries: dict[bytes, T] = {}
        self._writing = threading.Lock()  # slices may be read on more than one thread (an informer's readers)

    def __call__(self, raw: Any) -> T:
        try:
            key = marshal.dumps(raw, 2)
        except ValueError:  # not JSON's types (never from the API)
            return self.parse(raw)
        found = self._entries.get(key)
        if found is None:
            found = self.parse(raw)  # raises for what cannot be read: nothing is remembered then
            with self._writing:
                while len(self._entries) >= self.bound:
                    del self._entries[next(iter(self._entries))]
                self._entries[key] = found
        return found

    def __len__(self) -> int:
        return len(self._entries)
