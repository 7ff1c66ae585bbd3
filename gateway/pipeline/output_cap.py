"""The answer's output budget held to what the upstream's model takes.

Before a send, a request asking for more output than an upstream's limit (its
``max_output_tokens``, what its provider stated earlier, or what its ``context_window`` leaves
beside the prompt) is lowered to it. After a refusal
that states the model's limit (``policy/output_limit.py``), the limit is remembered for the
(upstream, model) and the request is sent once more with its budget lowered: exactly one
retry, as for an overflow. The client is told with ``x-llm-output-capped`` (the budget its
answer was asked with) and the log line's ``output_capped``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import orjson

from gateway import jsonbody
from gateway.apis import output_budget
from gateway.apis.base import Dialect
from gateway.config import UpstreamConfig
from gateway.pipeline.attempt import Call
from gateway.pipeline.legs import resent
from gateway.pipeline.outcome import Failure, Outcome, RequestState
from gateway.pipeline.send import InPool, Onward, resend
from gateway.policy.compress import MIN_COMPLETION_TOKENS, SAFETY_MARGIN
from gateway.policy.output_limit import stated_output_limit
from gateway.policy.retry import RetryPlan
from gateway.policy.tokens import BYTES_PER_TOKEN
from gateway.services import Services


def capped(
    svc: Services, state: RequestState, dialect: Dialect, up: UpstreamConfig, model: str | None,
    payload: dict[str, Any],
) -> dict[str, Any]:  # fmt: skip
    """``payload`` (in the client's API) with its budget within ``up``'s known limit for
    ``model``, the model the upstream is asked for."""
    known = svc.output_limits.of(up, model)
    room = window_room(up, payload)
    if room is not None and (known is None or room < known[0]):
        known = (room, "context_window")
    if known is None:
        return payload
    limit, source = known
    # The operator's cap bounds a request that names no budget too; a learned limit only
    # lowers one that is too high (an unnamed budget is the provider's own default).
    lowered = dialect.lower_output(payload, limit, name_if_absent=source == "config")
    if lowered is None:
        return payload
    _note(state, payload, limit, source)
    return lowered


def window_room(up: UpstreamConfig, payload: dict[str, Any]) -> int | None:
    """The budget that fits beside the prompt in ``up``'s ``context_window``, when the request
    asks for more. Claude Code 2.1.332 asks ``max_tokens: 128000``: on a 128k-window server
    every turn was refused ("maximum context length is 131072 tokens ... 128000 in the
    completion") and sent again lowered, a refused call per turn. The prompt is estimated
    from the whole request's bytes (an overestimate: it lowers a little more than needed);
    a prompt too long by itself is still compression's, after the provider says so."""
    window = up.context_window
    if window is None:
        return None
    asked = output_budget.asked(payload)
    if asked is None or asked * 2 < window:  # most budgets are far below the window: no estimate
        return None
    try:
        prompt = len(orjson.dumps(payload)) / BYTES_PER_TOKEN
    except TypeError:  # what orjson cannot write (a number past 64 bits) is measured by json
        prompt = len(json.dumps(payload, default=str)) / BYTES_PER_TOKEN
    room = int(window - prompt * (1 + SAFETY_MARGIN))
    return None if asked <= room else max(room, MIN_COMPLETION_TOKENS)


async def rescue(
    svc: Services, state: RequestState, plan: RetryPlan, call: Call, payload: dict[str, Any],
    refused: Failure, onward: Onward | None = None, in_pool: InPool | None = None,
) -> Outcome:
    """Exactly one lowered retry after a refusal that states the model's output limit, when the
    request asked for more. ``payload`` is the client's request, in its API. On a pool's
    deployment (``in_pool``), a lowered retry that deployment refuses as it would move a request
    on goes to a sibling, lowered alike."""
    stated = stated_output_limit(refused.classification.message)
    if stated is None or (state.output_capped is not None and state.output_capped["source"] == "refused"):
        return refused
    model = call.wire_model or state.model
    svc.output_limits.learn(call.up.cfg.name, model, stated)
    known = svc.output_limits.of(call.up.cfg, model)
    limit = known[0] if known is not None else stated  # never above the operator's own cap
    dialect = state.dialect
    # Only a translation names a budget the client left out (Anthropic requires one): then the
    # limit is named in the client's request, where the translation takes it from.
    lowered = dialect.lower_output(payload, limit, name_if_absent=call.translation is not None)
    if lowered is None:
        return refused  # what it refused is not the budget the client asked for
    again = resent(call, lowered)
    if isinstance(again, Failure):
        return refused
    _note(state, payload, limit, "refused")
    svc.tracing.next_attempt(state, "output_retry")

    def lowered_for(base: Call) -> Call | Failure:
        """A sibling's call with its budget lowered to the limit the model stated, not to the
        refusing deployment's own cap (its body is in its upstream's API, within its known limit)."""
        try:
            doc, lenient = jsonbody.loads(base.body)
        except ValueError:
            return base
        out = base.dialect.lower_output(doc, stated) if isinstance(doc, dict) else None
        return base if out is None else replace(base, body=jsonbody.dumps(out, lenient=lenient))

    return await resend(svc, state, plan, *again, onward, in_pool, lowered_for)


def _note(state: RequestState, payload: dict[str, Any], limit: int, source: str) -> None:
    state.output_capped = {"to": limit, "asked": output_budget.asked(payload), "source": source}
