"""Facts read from a name the client chose (a model's), remembered per name.

A translated request asks several questions of its model's name, each a regex search or a scan
of a table (~1,500 instructions a search); a cached answer is a dictionary look-up. The name is
the client's to choose, so what is kept is bounded twice: names of up to ``NAME_MAX`` characters,
``KEPT`` of them (the least recently used go first); a longer name is read every time.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

NAME_MAX = 256
KEPT = 1024


def by_name(read: Callable[[str], T]) -> Callable[[str], T]:
    cached = functools.lru_cache(maxsize=KEPT)(read)

    @functools.wraps(read)
    def answer(name: str) -> T:
        return cached(name) if len(name) <= NAME_MAX else read(name)

    return answer
