"""Which tool call a streamed ``delta.tool_calls[]`` entry belongs to.

OpenAI sends each call's fragments under one ``index``, its ``id`` and name once, with the first
fragment. Other servers do not, and a stream read by index alone merges their parallel calls
into one whose arguments are ``{…}{…}``:

* Gemini's OpenAI-compatible endpoint leaves ``index`` out and sends each call whole in its own
  chunk, with its own id (THU-MAIC/OpenMAIC#1556, NousResearch/hermes-agent#62937), and may split
  one call's arguments across index-less deltas that carry no id (open-webui/computer#224; such
  a delta logged as ``{'id': '', 'function': {'arguments': …}, 'type': ''}``,
  AstrBotDevs/AstrBot#6661);
* a relay gives every call ``index: 0``, each with its own id (su-kaka/gcli2api#406);
* some servers repeat a call's id on every fragment (JetBrains/koog#2052), one sends a second id
  on the fragments after the first, without the name (poolsideai/pool#9).

So an entry is keyed by its ``index``, else by its place in its chunk (one chunk never carries
two fragments of one call), and continues the call held under that key, unless it names a
function under an id other than that call's: then it is a new call, and the key holds it from
then on. An entry without an id, or without a name, always continues.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class CallSlots:
    """Numbers a stream's tool calls 0, 1, 2… in the order they start."""

    __slots__ = ("_held", "_ids")

    def __init__(self) -> None:
        self._held: dict[int, int] = {}  # an entry's key -> the call it continues
        self._ids: list[str | None] = []  # each call's id, once one came

    def slot(self, call: Mapping[str, Any], position: int) -> int:
        """The call ``call`` (one entry of a delta's ``tool_calls``, at ``position`` in it) is part of."""
        given = call.get("index")
        key = given if isinstance(given, int) and not isinstance(given, bool) else position
        found = call.get("id")
        call_id = found if isinstance(found, str) and found else None
        slot = self._held.get(key)
        if slot is None or (call_id is not None and _named(call) and self._ids[slot] not in (None, call_id)):
            slot = self._held[key] = len(self._ids)
            self._ids.append(call_id)
        elif self._ids[slot] is None:
            self._ids[slot] = call_id
        return slot


def _named(call: Mapping[str, Any]) -> bool:
    function = call.get("function")
    return isinstance(function, dict) and isinstance(function.get("name"), str) and bool(function["name"])
