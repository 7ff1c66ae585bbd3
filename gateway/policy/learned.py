"""What the gateway learns about an (upstream, model) from its refusals, kept for the life of
the config it was learned under (a reload starts afresh: the upstream a name stands for may
have changed). The output limits (``output_limit.py``) and the parameter fixes
(``refused_param.py``) are both tables of this kind."""

from __future__ import annotations

from typing import Generic, TypeVar

V = TypeVar("V")

# Model names come from clients: a table stops growing here (a miss costs one refused call,
# never a wrong answer).
LEARNED_MAX = 4096


class Learned(Generic[V]):
    """A bounded (upstream, model) → value table, and whether it holds anything yet."""

    __slots__ = ("_table", "learned")

    def __init__(self) -> None:
        self._table: dict[tuple[str, str], V] = {}
        # Read before every send: a plain attribute, so the common case (nothing learned)
        # costs one attribute read.
        self.learned = False

    def _get(self, upstream: str, model: str | None) -> V | None:
        return self._table.get((upstream, model or "")) if self.learned else None

    def _put(self, upstream: str, model: str | None, value: V) -> None:
        """Kept unless the table is full and the pair is new."""
        key = (upstream, model or "")
        if key in self._table or len(self._table) < LEARNED_MAX:
            self._table[key] = value
            self.learned = True
