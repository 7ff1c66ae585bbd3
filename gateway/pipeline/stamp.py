"""The header contract, stamped on every response of an observed request just before its
head is sent.

Called where the gateway prepares a response (``observe`` for buffered replies, the relay
for streams, whose head leaves before the body exists) and on the error responses that
aiohttp prepares after ``observe`` returned: a direct call, not an ``on_response_prepare``
signal, which cost a signal dispatch and a coroutine per request. Health, readiness and
metrics are not observed: ``unobserved`` gives them ``x-request-id`` and ``x-llm-attempts: 0``
and nothing else. Answers to malformed HTTP, which reach no route, get theirs in bad_http.py.
"""

from __future__ import annotations

import math

from aiohttp import web

from gateway.pipeline.outcome import RequestState


def stamp(state: RequestState, response: web.StreamResponse, now: float | None, *,
          close: bool = False) -> None:  # fmt: skip
    """``now``: the head leaves now (the time to first byte); None for a response that aiohttp
    sends after the request was accounted for. ``close``: the process drains; the answer says
    ``Connection: close`` and its connection is closed after it, so the client's next request
    opens a new connection, which reaches a listener still serving (another worker, another
    replica), instead of being sent on one about to be closed under it (RFC 9112 9.6)."""
    if close:
        response.force_close()
    h = response.headers
    h["x-request-id"] = state.request_id
    if state.dialect.api == "messages" and "request-id" not in h:
        # Anthropic sends its id as ``request-id`` on every answer, and the anthropic SDKs read
        # it from there (``request_id`` of a message or an error), not from the body; an
        # Anthropic upstream's own, passed on, is left as it is.
        h["request-id"] = state.request_id
    h["x-llm-attempts"] = str(state.attempts)
    if state.compressed:
        h["x-llm-compressed"] = "true"
    if state.upstream != "none":
        h["x-llm-upstream"] = state.upstream
    if state.tool_outputs_capped:
        h["x-llm-tool-outputs-capped"] = str(state.tool_outputs_capped)
    if state.params_dropped:
        h["x-llm-params-dropped"] = ",".join(state.params_dropped)
    if state.reasoning_dropped is not None:
        h["x-llm-reasoning-dropped"] = state.reasoning_dropped
    if state.output_capped is not None:
        h["x-llm-output-capped"] = str(state.output_capped["to"])
    if state.fallbacks:
        h["x-llm-fallbacks"] = str(state.fallbacks)
    if state.translated is not None:
        h["x-llm-translated"] = state.translated
    if state.from_memory:
        h["x-llm-from-memory"] = str(state.from_memory)
    if state.first_byte_at is None and now is not None:
        state.first_byte_at = now
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
    # Only a wait we handed back for the client to schedule leaves the header off, and so
    # does a request the gateway ended because it is shutting down: retried now, it reaches
    # another replica, whatever this one had tried.
    if (state.retries > 0 or state.retries_settled or not c.retryable) and state.ended_by != "shutdown":
        h["x-should-retry"] = "false"

