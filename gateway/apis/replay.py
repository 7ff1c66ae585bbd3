"""Replay and match: finishing a broken stream on an upstream that cannot prefill.

The original request is sent again, unchanged. Its answer is held back until it has
reproduced exactly the text the client was shown; only what follows is relayed, spliced into
the client's stream by the dialect's own continuation splicer. A replay that writes anything
else first (other text, a tool call, an end) has diverged: the client keeps what it has and
the stream ends with the original error, never with text that contradicts it.

Each dialect has a ``Trim`` (``apis/*/replay.py``) that turns a replay stream into the
stream a prefill continuation would have sent (the shown text and everything before it
dropped, the straddling delta cut at the seam), so the splicers need no second copy; and a
``request`` that says whether replaying is worth a call at all. ``Match`` is the shared,
pure comparison of the replayed text with the shown text.

Modes (``continuation:``): ``replay`` replays deterministic requests only (``temperature:
0``; on chat completions also a ``seed``), whose answers repeat; ``replay_any`` every request,
for an upstream whose answers repeat anyway (greedy decoding by default, a response cache).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from gateway.apis.base import Splice
from gateway.sse import EventSplitter

MODES = ("replay", "replay_any")


def is_replay(mode: str) -> bool:
    return mode in MODES


def worth_replaying(payload: Mapping[str, Any], mode: str, *, seed: bool) -> bool:
    """``replay_any``: always; ``replay``: when the request asks for a deterministic answer
    (``temperature`` 0, or a ``seed`` where the API has one). Other requests would almost
    surely diverge, so a call is not spent on them."""
    if mode == "replay_any":
        return True
    if mode != "replay":
        return False
    temperature = payload.get("temperature")
    if isinstance(temperature, (int, float)) and not isinstance(temperature, bool) and temperature == 0:
        return True
    return seed and isinstance(payload.get("seed"), int) and not isinstance(payload.get("seed"), bool)


class Match:
    """The replayed answer text against ``shown``, fed in pieces of any size."""

    __slots__ = ("at", "diverged", "shown")

    def __init__(self, shown: str) -> None:
        self.shown = shown
        self.at = 0  # how much of ``shown`` the replay has reproduced
        self.diverged = False

    @property
    def matched(self) -> bool:
        return not self.diverged and self.at >= len(self.shown)

    def feed(self, text: str) -> str:
        """The part of ``text`` after the shown text: empty while the replay is still
        reproducing it (or has diverged), all of it once the seam has passed."""
        if self.diverged:
            return ""
        if self.matched:
            return text
        want = self.shown[self.at :]
        if text.startswith(want):
            self.at = len(self.shown)
            return text[len(want) :]
        if want.startswith(text):
            self.at += len(text)
            return ""
        self.diverged = True
        return ""

    def diverge(self) -> None:
        """Something other than the shown text came first (a tool call, the end)."""
        if not self.matched:
            self.diverged = True


class Trim(Protocol):
    """A replay stream, event by event, as the stream a continuation would have sent."""

    match: Match

    def __call__(self, raw: bytes) -> bytes: ...


def trimmed(trim: Trim, splice: Splice) -> Splice:
    """The continuation splicer behind a replay's trim (which may turn one event into
    several at the seam, or into none)."""

    def both(raw: bytes) -> bytes:
        out = trim(raw)
        if not out:
            return b""
        if out is raw:
            return splice(raw)
        splitter = EventSplitter()
        return b"".join(splice(e) for e in splitter.feed(out)) + splice(splitter.pending)

    return both
