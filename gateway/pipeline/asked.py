"""What a request asks, as the stages before the send left it, held no longer than read.

Two payloads follow admission: the client's after the tool-output stages (``client``: what
a translated call translates), and that one as prepared for the upstream (``payload``: a
chat stream asked for its usage, say). Both are the admitted document itself unless a stage
changed it. Only a change made by the tool-output stages is kept as it is (they count what
they did, so they run once); the admitted document is re-read from the bytes and the
prepared one made again from it (``Dialect.prepare`` is a pure function) whenever a stage
after the send asks for them, so nothing of them has to live while the upstream works.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import orjson

from gateway import jsonbody
from gateway.apis.base import Dialect, Inbound


class Asked:
    __slots__ = (
        "_body", "_prepared", "capped", "changed", "dialect", "inbound", "stream_usage", "strip_usage",
    )  # fmt: skip

    def __init__(
        self, inbound: Inbound, dialect: Dialect, stream_usage: bool, client: dict[str, Any]
    ) -> None:
        self.inbound, self.dialect, self.stream_usage = inbound, dialect, stream_usage
        # The tool-output stages' own payload, kept: only when they changed the client's.
        self.capped = None if client is inbound.payload else client
        prepared, self.strip_usage = dialect.prepare(_with(inbound, client), stream_usage)
        self.changed = prepared is not inbound.payload  # by the stages or by prepare
        self._prepared: dict[str, Any] | None = prepared
        self._body: bytes | None = None

    def client(self) -> dict[str, Any]:
        """The client's payload after the tool-output stages."""
        return self.capped if self.capped is not None else self.inbound.payload

    def payload(self) -> dict[str, Any]:
        """The payload as prepared for the upstream: in the client's API."""
        prepared = self._prepared
        if prepared is None:
            prepared = self.dialect.prepare(_with(self.inbound, self.client()), self.stream_usage)[0]
            self._prepared = prepared
        return prepared

    def body(self) -> bytes:
        """``payload`` as sent to an upstream of the client's API: the client's own bytes
        when unchanged, the client's own bytes with the members ``prepare`` added when that is
        all that changed (a chat stream asked for its usage), else written as translated
        requests are. Made once."""
        body = self._body
        if body is None:
            inbound = self.inbound
            if not self.changed:
                body = inbound.body
            else:
                body = self._spliced()
                if body is None:
                    body = jsonbody.dumps(self.payload(), lenient=inbound.lenient)
            self._body = body
        return body

    def _spliced(self) -> bytes | None:
        """The client's bytes with ``prepare``'s new top-level members written in before the
        closing brace, when adding them is all it did. Faster than writing the whole request
        again, keeps what the client wrote as written (an integer beyond 64 bits, say), and
        the client's own bytes need not be kept beside it: the document is read back from
        this body (``Inbound.hand_over``)."""
        inbound = self.inbound
        if self.capped is not None or inbound.shape is not None or len(inbound.body) < SPLICE_FROM:
            return None
        admitted, prepared = inbound.payload, self.payload()
        added = [k for k in prepared if k not in admitted]
        if not admitted or not added or len(prepared) != len(admitted) + len(added):
            return None
        for k, v in admitted.items():
            if prepared.get(k, _ABSENT) is not v:
                return None
        raw = inbound.body.rstrip()
        if not raw.endswith(b"}"):
            return None
        new = {k: prepared[k] for k in added}
        members = json.dumps(new, separators=(",", ":")).encode() if inbound.lenient else orjson.dumps(new)
        body = b"".join((memoryview(raw)[:-1], b",", memoryview(members)[1:]))
        inbound.hand_over(body, tuple(added))
        return body

    def drop(self) -> None:
        """The upstream works now: only bytes are kept (and a tool-output stage's change)."""
        self._prepared = None
        self.inbound.drop()


_ABSENT = object()
# Below this, writing the request again costs less than splicing (~0.6 against ~2 us for a
# one-line request; even at ~8 KB; 150 KB: ~70 against ~100 us, measured with the bodies
# kept, as a request keeps its own), and two small bodies cost nothing worth saving.
SPLICE_FROM = 8 * 1024


def _with(inbound: Inbound, payload: dict[str, Any]) -> Inbound:
    return inbound if payload is inbound.held else dataclasses.replace(inbound, held=payload)
