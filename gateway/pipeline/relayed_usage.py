"""What an answer relayed as it is used (``/v1/completions``, ``/v1/embeddings``, Codex's
``/v1/responses/compact``, the three APIs' paths with a trailing slash), read when it ends from
the parts of it the relay kept: a list append a chunk, whatever the answer's size.

Every API puts its final count last (a JSON body's ``usage``, chat's and a legacy completion's
usage chunk, Messages' ``message_delta``, Responses' ``response.completed``), so a rolling tail
holds it; a Messages stream counts its prompt first (``message_start``), which the first bytes
hold. Of a stream, only the ``data:`` lines that can count are read (the first and the last
naming a usage), by the stream reader of the path's API (``StreamReader.kind``, as a stream of
that API is read when it is not relayed as it is). What no count covers is estimated as for a
native stream (``settle``): the text shown, sampled from the first bytes, and the prompt as
admission estimated it.
"""

from __future__ import annotations

from gateway.apis.base import Dialect, StreamReader
from gateway.pipeline.outcome import RequestState
from gateway.policy.tokens import BYTES_PER_TOKEN
from gateway.sse import EventSplitter, parse_event

HEAD_BYTES = 4096  # the first bytes kept: a stream's text sample and its message_start
# The last bytes kept: a usage chunk or member is a few hundred bytes, a Responses
# response.completed (the whole response echoed, Codex's tools with it) tens of KB.
TAIL_BYTES = 64 * 1024


class Kept:
    """The first ``HEAD_BYTES`` of a relayed answer and its last ``TAIL_BYTES`` (up to twice
    that between trims: 132 KiB at most, whatever the answer's size), and its size."""

    __slots__ = ("_head", "_head_size", "_tail", "_tail_size", "dropped", "size", "sse")

    def __init__(self, sse: bool) -> None:
        self.sse = sse
        self.size = 0
        self.dropped = False  # bytes between the head and the tail were let go
        self._head: list[bytes] = []
        self._head_size = 0
        self._tail: list[bytes] = []
        self._tail_size = 0

    @classmethod
    def of(cls, content_type: str, charged: bool) -> Kept | None:
        """What to keep of an answer of this type: a JSON answer's usage is read for every
        request (``tokens_total``); a stream's only for a key that pays for it (a budget or
        tokens per minute), any other's relayed with nothing kept, as before. None: nothing."""
        if "event-stream" in content_type:
            return cls(sse=True) if charged else None
        return cls(sse=False) if "json" in content_type else None

    def add(self, chunk: bytes) -> None:
        self.size += len(chunk)
        room = HEAD_BYTES - self._head_size
        if room > 0:
            if len(chunk) <= room:
                self._head.append(chunk)
                self._head_size += len(chunk)
                return
            self._head.append(chunk[:room])  # the rest goes on to the tail: nothing is skipped
            self._head_size, chunk = HEAD_BYTES, chunk[room:]
        self._tail.append(chunk)
        self._tail_size += len(chunk)
        if self._tail_size > 2 * TAIL_BYTES:  # one copy of 64 KiB per 64 KiB relayed
            last = b"".join(self._tail)[-TAIL_BYTES:]
            self._tail, self._tail_size, self.dropped = [last], len(last), True

    def body(self) -> tuple[bytes, bool]:
        """A JSON answer whole (True), else its tail read as an object's: ``jsonpeek`` takes a
        member from the end, and of the bytes before it needs only the one before the member's
        name and an object's opening, which the answer had (its head is kept)."""
        if not self.dropped:
            return b"".join((*self._head, *self._tail)), True
        head = b"".join(self._head)
        tail = b"".join(self._tail)
        if _USAGE not in tail and _USAGE in head:
            # A body that counts first (usage before its data): the member is in the head, whose
            # object never closes there; jsonpeek reads it when the head is closed after it.
            at = head.rfind(_USAGE)
            end = _member_end(head, at)
            if end > 0:
                return head[:end] + b"}", False
        opens = head.lstrip().startswith(b"{")
        return (b"{" if opens else b"") + tail, False

    def count_stream(self, state: RequestState, dialect: Dialect, whole: bool = True) -> None:
        """A stream's usage, in ``dialect``'s words, added to the request's. A stream with no
        count at all (cut before it, or from a server that sends none) is counted from the text
        it showed, and its prompt from admission's estimate (``state.answered_uncounted``). One
        not ``whole`` (cut, or left by its client) counts at least the text it showed, as a
        native one does: its final count never came, and Messages' ``message_start`` states
        ``output_tokens: 1`` before any text."""
        reader = dialect.reader(strip_usage=False)
        for line in self._counting_lines():
            reader.kind(line + b"\n\n", committed=True)  # takes the usage the event carries
        used = dict(reader.usage)
        if not whole or "completion" not in used:
            tokens = shown_tokens(b"".join(self._head), self.size, reader)
            if tokens > used.get("completion", 0):
                used["completion"] = tokens
                state.completion_estimated = True
        for kind, n in used.items():
            state.usage[kind] = state.usage.get(kind, 0) + n
        if not reader.usage:
            state.answered_uncounted = True

    def _counting_lines(self) -> list[bytes]:
        """The ``data:`` lines that can count, found by a byte search, never by splitting the
        stream: the first naming a usage (Messages' message_start, its prompt) and the last (the
        final count, a cumulative one's too). A line the kept bytes cut short does not parse,
        and counts nothing."""
        head = b"".join(self._head)
        tail = b"".join(self._tail)
        if not self.dropped:
            head = tail = head + tail
        first, last = head.find(_USAGE), tail.rfind(_USAGE)
        lines = [_line(head, first)] if first >= 0 else []
        if last >= 0 and (head is not tail or last != first):
            lines.append(_line(tail, last))
        return lines


_USAGE = b'"usage"'


def _member_end(data: bytes, at: int) -> int:
    """Where the object value of the member named at ``at`` ends (one past its closing brace),
    0 when ``data`` cuts it short. Usage objects hold numbers and small objects, no strings
    with braces in them, so counting braces finds the end."""
    start = data.find(b"{", at)
    depth = 0
    for i in range(start, len(data)) if start >= 0 else ():
        c = data[i]
        if c == 0x7B:
            depth += 1
        elif c == 0x7D:
            depth -= 1
            if depth == 0:
                return i + 1
    return 0


def _line(data: bytes, at: int) -> bytes:
    """The line of ``data`` that holds byte ``at``."""
    end = data.find(b"\n", at)
    return data[data.rfind(b"\n", 0, at) + 1 : end if end >= 0 else len(data)].rstrip(b"\r")


def _split(data: bytes) -> list[bytes]:
    """``data``'s events, the last one too when the stream ended without its blank line."""
    splitter = EventSplitter()
    events = splitter.feed(data)
    return [*events, splitter.pending] if splitter.pending.strip() else events


def shown_tokens(sample: bytes, total: int, reader: StreamReader) -> int:
    """The tokens a stream's events generated (text, reasoning, tool-call arguments), read from
    the first of them (``sample``) and taken to be in the same proportion to the rest of its
    ``total`` bytes."""
    text_bytes = 0
    for raw in _split(sample):
        doc = parse_event(raw).json()
        if isinstance(doc, dict):
            text_bytes += len(reader.event_text(doc).encode())
    if total > len(sample) > 0:
        text_bytes = text_bytes * total // len(sample)
    return round(text_bytes / BYTES_PER_TOKEN)
