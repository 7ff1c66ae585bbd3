"""The header contract, stamped on every response just before its head is sent.

Runs from ``on_response_prepare``, so it covers buffered replies, streams (whose
head leaves before the body exists) and responses made by aiohttp itself.
"""

from __future__ import annotations

import math

from aiohttp import web

from gateway.pipeline.outcome import STATE
from gateway.services import SERVICES


async def stamp(request: web.Request, response: web.StreamResponse) -> None:
    state = request.get(STATE)
    if state is None:
        return
    h = response.headers
    h["x-request-id"] = state.request_id
    h["x-llm-attempts"] = str(state.attempts)
    if state.compressed:
        h["x-llm-compressed"] = "true"
    if state.upstream != "none":
        h["x-llm-upstream"] = state.upstream
    if state.tool_outputs_capped:
        h["x-llm-tool-outputs-capped"] = str(state.tool_outputs_capped)
    if state.fallbacks:
        h["x-llm-fallbacks"] = str(state.fallbacks)
    if state.from_memory:
        h["x-llm-from-memory"] = str(state.from_memory)
    if state.first_byte_at is None:
        state.first_byte_at = request.app[SERVICES].monotonic()
    c = state.classification
    if c is None or response.status < 400:
        return
    h["x-llm-error-type"] = c.type.value
    h["x-llm-error-retryable"] = "true" if c.retryable else "false"
    if c.reset_at_ms is not None:
        h["x-llm-error-reset-at"] = str(c.reset_at_ms)
    if c.retry_after_s is not None:
        h["retry-after"] = str(max(0, math.ceil(c.retry_after_s)))
    # SDKs retry on their own unless told not to; once we retried (or chose not to, to
    # protect the provider), or when retrying cannot help, theirs would only multiply ours.
    # Only a wait we handed back for the client to schedule leaves the header off.
    if state.retries > 0 or state.retries_settled or not c.retryable:
        h["x-should-retry"] = "false"

