"""What the fake upstream answers a request with: the steps a script queues."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from multidict import CIMultiDict


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # dict/list → JSON; str/bytes → raw
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0  # before the response head: a slow answer
    # Before the response head, until set (in-process fakes): an answer that stays out for as
    # long as a test needs it in flight, however slow the machine, not for a guessed time.
    until: asyncio.Event | None = None


@dataclass
class Stream:
    events: list[Any]
    then: str = "done"  # done | drop | stall | eof
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    pause_s: float = 0.0  # a silence after the first ``pause_after`` events (a slow first token)
    pause_after: int = 1
    # How events go on the wire: "sse" (``data: …`` + LF pairs, dict events as JSON), "sse-crlf"
    # (CRLF pairs, as the Gemini API separates its events) or "json-array" (Gemini without
    # ``alt=sse``: ``[`` then the events as array elements, ``]`` only on a clean end).
    framing: str = "sse"
    # ``data: [DONE]`` after a clean end (``then="done"``): None, as the API ends its stream
    # (chat with it; Responses without: ``upstream.py``); True, after any (LiteLLM's proxy
    # sends one after a Responses stream's ``response.completed``: BerriAI/litellm#34095).
    done_marker: bool | None = None


@dataclass
class Drop:
    pass


@dataclass
class Hang:
    seconds: float = 3600.0


Step = Reply | Stream | Drop | Hang | Callable[[dict[str, Any]], Any]


@dataclass
class Recorded:
    method: str
    path: str
    headers: CIMultiDict[str]
    body: bytes
    query: str = ""

    def json(self) -> Any:
        return json.loads(self.body)


def sse_data(raw: Any) -> Any:
    """The JSON of a scripted SSE event's first ``data:`` line (None when there is none, or it
    is not JSON): what the fake's rules read of a stream step's events."""
    if not isinstance(raw, bytes):
        return None
    for line in raw.splitlines():
        if line.startswith(b"data: "):
            try:
                return json.loads(line[6:])
            except ValueError:
                return None
    return None


def response_in(step: object, event: str) -> Any:
    """The Responses answer a step carries: a 2xx body, or the ``response`` of a stream's
    first ``event`` (``response.created``, ``response.completed``); None for anything else."""
    if isinstance(step, Reply):
        return step.body if 200 <= step.status < 300 else None
    if isinstance(step, Stream):
        for raw in step.events:
            data = raw if isinstance(raw, dict) else sse_data(raw)
            if isinstance(data, dict) and data.get("type") == event:
                return data.get("response")
    return None
