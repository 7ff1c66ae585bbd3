"""The Gemini API's other stream framing: ``:streamGenerateContent`` without ``?alt=sse``.

Google answers such a request with one JSON array written as it grows: ``[`` and the first
GenerateContentResponse, then each next one after ``,`` with line ends around it, and ``]``
once the stream is over (https://ai.google.dev/api/generate-content#method:-models.streamgeneratecontent
and the ``[{…}\\n,\\r\\n{…}\\n]`` bodies public reports quote); an error answered before the
stream starts is the usual envelope inside an array, ``[{"error": {…}}]`` (as quoted in
google-gemini/gemini-cli#4504). The chunks are the very documents the SSE framing carries,
so the gateway makes its stream exactly as for ``alt=sse`` and changes only the framing on
the way out: :class:`JsonArrayStream` takes whole SSE events where the relay writes them and
writes array elements, each as soon as it is written (nothing is buffered), and
:func:`as_array` does the same for an answer that is written at once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from aiohttp import web
from multidict import CIMultiDict

from gateway.sse import EventSplitter, parse_event

OPEN, SEPARATOR, CLOSE = b"[", b"\n,\r\n", b"\n]"


def wants_array(method: str, alt: str | None) -> bool:
    return method == "streamGenerateContent" and alt != "sse"


class JsonArrayStream(web.StreamResponse):
    """A stream response that writes the SSE events it is given as JSON array elements."""

    def __init__(self, *, status: int = 200, headers: Iterable[tuple[str, str]] | None = None) -> None:
        fixed = CIMultiDict(headers or ())
        fixed["Content-Type"] = "application/json; charset=UTF-8"
        super().__init__(status=status, headers=fixed)
        self._splitter = EventSplitter()
        self._elements = 0

    async def write(self, data: bytes | bytearray | memoryview) -> None:
        out = self._framed(self._splitter.feed(bytes(data)))
        if out:
            await super().write(out)

    async def write_eof(self, data: bytes = b"") -> None:
        if data:
            await self.write(data)
        tail = self._splitter.pending
        out = self._framed([tail] if tail.strip() else [])
        await super().write_eof(out + (CLOSE if self._elements else OPEN + b"]"))

    def _framed(self, events: list[bytes]) -> bytes:
        out = []
        for raw in events:
            data = parse_event(raw).data
            if data is None or not data.strip():
                continue  # a comment or keep-alive: nothing an array can hold
            out.append((SEPARATOR if self._elements else OPEN) + data.encode())
            self._elements += 1
        return b"".join(out)


def as_array(body: bytes, content_type: str) -> bytes:
    """A whole answer in array framing: an SSE body's events as elements, any other JSON
    document (an error) as the one element."""
    if "event-stream" not in content_type:
        try:
            json.loads(body)
        except ValueError:
            return body  # not JSON (a proxy's page, say): passed on as it came
        return OPEN + body + CLOSE
    splitter = EventSplitter()
    events = splitter.feed(body)
    if splitter.pending.strip():
        events.append(splitter.pending)
    datas = [e.data for e in map(parse_event, events) if e.data is not None and e.data.strip()]
    return OPEN + SEPARATOR.join(d.encode() for d in datas) + (CLOSE if datas else b"]")
