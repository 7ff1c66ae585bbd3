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
from typing import Any

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
        when unchanged, else written as translated requests are (encoded once)."""
        body = self._body
        if body is None:
            if not self.changed:
                body = self.inbound.body
            else:
                body = jsonbody.dumps(self.payload(), lenient=self.inbound.lenient)
            self._body = body
        return body

    def drop(self) -> None:
        """The upstream works now: only bytes are kept (and a tool-output stage's change)."""
        self._prepared = None
        self.inbound.drop()


def _with(inbound: Inbound, payload: dict[str, Any]) -> Inbound:
    return inbound if payload is inbound.held else dataclasses.replace(inbound, held=payload)
