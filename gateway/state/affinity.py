"""Which deployment a conversation is bound to: one bounded table per pool, in this process.

Bounded by entries (least recently used go first) and by idleness (``idle_s``, longer than
the providers' longest prompt-cache lifetime, after which the cache is cold anyway). Each
entry is a conversation key (at most ~40 characters, hashed from what the client sent) and a
deployment name: about 200 bytes, so the default 10,000 entries hold about 2 MB.

Not shared across replicas. Under the default ``weighted`` strategy it does not decide: a
conversation's deployment is the first that may serve in the rendezvous order of its key
(gateway/routing/pools.py, ``pipeline/pool.py``), the same on every replica; the table only
tells a returning conversation, for the pick's reason. Under the other strategies it decides,
and two replicas may bind one conversation to different deployments.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable


class AffinityTable:
    def __init__(self, max_entries: int, idle_s: float, clock: Callable[[], float]) -> None:
        self._max = max_entries
        self._idle_s = idle_s
        self._clock = clock
        self._items: OrderedDict[str, tuple[str, float]] = OrderedDict()

    def get(self, conversation: str) -> str | None:
        found = self._items.get(conversation)
        if found is None:
            return None
        deployment, used = found
        now = self._clock()
        if now - used > self._idle_s:
            del self._items[conversation]
            return None
        self._items[conversation] = (deployment, now)
        self._items.move_to_end(conversation)
        return deployment

    def bind(self, conversation: str, deployment: str) -> None:
        self._items[conversation] = (deployment, self._clock())
        self._items.move_to_end(conversation)
        while len(self._items) > self._max:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)

    def resized(self, max_entries: int, idle_s: float) -> AffinityTable:
        """The same conversations under new bounds (a reload that changed them): the most
        recent ``max_entries`` are kept, and each still ages from its last turn."""
        table = AffinityTable(max_entries, idle_s, self._clock)
        for conversation, entry in list(self._items.items())[-max_entries:]:
            table._items[conversation] = entry
        return table
