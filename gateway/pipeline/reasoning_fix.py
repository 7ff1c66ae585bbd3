"""Reasoning the upstream refuses as not its own, left out: once, after the refusal.

A conversation that moved between accounts (a pool's keys, a fallback, a translated
deployment and back) carries reasoning signed elsewhere, which the provider refuses
(``policy/foreign_reasoning.py``). The request is sent once more without it, to the same
upstream: the client's conversation goes on instead of failing on every turn until it starts
a new one. The client is told with ``x-llm-reasoning-dropped`` and the log line's
``reasoning_dropped`` (what was left out, never its content).
"""

from __future__ import annotations

from gateway import jsonbody
from gateway.pipeline.attempt import Call
from gateway.pipeline.outcome import Failure, Outcome, RequestState
from gateway.pipeline.send import Onward, resend
from gateway.policy.foreign_reasoning import refused_reasoning, strip
from gateway.policy.retry import RetryPlan
from gateway.services import Services

# What each API's signed reasoning is called, for the header and the log.
DROPPED = {"messages": "thinking", "responses": "reasoning", "gemini": "thought_signature"}


async def rescue(
    svc: Services, state: RequestState, plan: RetryPlan, call: Call, refused: Failure,
    onward: Onward | None = None,
) -> Outcome:
    if state.reasoning_dropped is not None:
        return refused
    upstream_body = refused.foreign.upstream_body if refused.foreign is not None else refused.body
    if not refused_reasoning(refused.classification.message, upstream_body):
        return refused
    try:
        doc, lenient = jsonbody.loads(call.body)
    except ValueError:
        return refused
    api = call.dialect.api
    fixed = strip(api, doc) if isinstance(doc, dict) else None
    if fixed is None:
        return refused  # nothing of the kind was sent: the refusal stands
    capped = state.output_capped
    if capped is not None:
        # A budget lowered by an earlier rescue was sent in another body: lower this one too.
        fixed = call.dialect.lower_output(fixed, capped["to"]) or fixed
    dropped = DROPPED[api]
    if api == "messages" and "thinking" in doc and "thinking" not in fixed:
        dropped += ",thinking_off"
    state.reasoning_dropped = dropped
    svc.tracing.next_attempt(state, "reasoning_retry")
    return await resend(svc, state, plan, call, jsonbody.dumps(fixed, lenient=lenient), onward)
