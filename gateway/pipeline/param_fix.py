"""A parameter the model refuses, left out: once after the refusal, then before every send.

After a refusal that names a parameter the gateway may do without (``policy/refused_param.py``:
a sampling knob, an effort, a storage hint, or ``max_tokens`` that a reasoning model takes as
``max_completion_tokens``), the fix is learned for the (upstream, model) and the request is
sent again with it applied (``send_one`` applies every learned fix to every body it sends).
A refusal that shows the model to be one of OpenAI's reasoning models learns every fix such a
model needs at once (``reasoning_set``): one rescue, however many of its settings the body has.
At most ``MAX_FIXES`` rescues per request: each costs one more call. The client is told
with ``x-llm-params-dropped`` and the log line's ``params_dropped``, beside what the translation
itself left out (a chat server's missing hosted tools), which costs no call and so no rescue.
"""

from __future__ import annotations

from dataclasses import replace

from gateway import jsonbody
from gateway.pipeline.attempt import Call
from gateway.pipeline.outcome import Failure, Outcome, RequestState
from gateway.pipeline.send import InPool, Onward, resend
from gateway.policy.refused_param import reasoning_set, refusal_fix
from gateway.policy.retry import RetryPlan
from gateway.services import Services

MAX_FIXES = 3


async def rescue(
    svc: Services, state: RequestState, plan: RetryPlan, call: Call, refused: Failure,
    onward: Onward | None = None, in_pool: InPool | None = None,
) -> Outcome:
    fix = refusal_fix(refused.classification.message, refused.body)
    done = state.params_fixed or []
    if fix is None or fix.label in done or state.params_rescued >= MAX_FIXES:
        return refused
    try:
        doc, lenient = jsonbody.loads(call.body)
    except ValueError:
        return refused
    if not isinstance(doc, dict) or fix.apply(doc) is None:
        return refused  # not in what was sent, or not one to leave out: the refusal stands
    model = call.wire_model or state.model
    for each in reasoning_set(refused.classification.message, fix, model):
        svc.param_fixes.learn(call.up.cfg.name, model, each)
    state.params_rescued += 1
    body = call.body
    capped = state.output_capped
    if capped is not None:
        # A budget lowered by an earlier rescue was sent in another body: lower this one too.
        lowered = call.dialect.lower_output(doc, capped["to"])
        if lowered is not None:
            body = jsonbody.dumps(lowered, lenient=lenient)
    svc.tracing.next_attempt(state, "param_retry")

    def fixed(base: Call) -> Call | Failure:
        """A sibling's call without the parameter (the fix is learned for this deployment's
        model alone: the sibling's may take it, and its body says so if not)."""
        try:
            other, other_lenient = jsonbody.loads(base.body)
        except ValueError:
            return base
        without = fix.apply(other) if isinstance(other, dict) else None
        if without is None:
            return base
        if capped is not None:
            without = base.dialect.lower_output(without, capped["to"]) or without
        return replace(base, body=jsonbody.dumps(without, lenient=other_lenient))

    # which applies the fix just learned; on a pool's deployment, moved to a sibling fixed alike
    return await resend(svc, state, plan, call, body, onward, in_pool, fixed)
