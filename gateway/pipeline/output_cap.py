"""The answer's output budget held to what the upstream's model takes.

Before a send, a request asking for more output than an upstream's limit (its
``max_output_tokens``, or what its provider stated earlier) is lowered to it. After a refusal
that states the model's limit (``policy/output_limit.py``), the limit is remembered for the
(upstream, model) and the request is sent once more with its budget lowered: exactly one
retry, as for an overflow. The client is told with ``x-llm-output-capped`` (the budget its
answer was asked with) and the log line's ``output_capped``.
"""

from __future__ import annotations

from typing import Any

from gateway.apis import output_budget
from gateway.apis.base import Dialect
from gateway.config import UpstreamConfig
from gateway.pipeline.attempt import Call
from gateway.pipeline.legs import resent
from gateway.pipeline.outcome import Failure, Outcome, RequestState
from gateway.pipeline.send import Onward, resend
from gateway.policy.output_limit import stated_output_limit
from gateway.policy.retry import RetryPlan
from gateway.services import Services


def capped(
    svc: Services, state: RequestState, dialect: Dialect, up: UpstreamConfig, model: str | None,
    payload: dict[str, Any],
) -> dict[str, Any]:  # fmt: skip
    """``payload`` (in the client's API) with its budget within ``up``'s known limit for
    ``model``, the model the upstream is asked for."""
    known = svc.output_limits.of(up, model)
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


async def rescue(
    svc: Services, state: RequestState, plan: RetryPlan, call: Call, payload: dict[str, Any],
    refused: Failure, onward: Onward | None = None,
) -> Outcome:
    """Exactly one lowered retry after a refusal that states the model's output limit, when the
    request asked for more. ``payload`` is the client's request, in its API."""
    limit = stated_output_limit(refused.classification.message)
    if limit is None or (state.output_capped is not None and state.output_capped["source"] == "refused"):
        return refused
    model = call.wire_model or state.model
    svc.output_limits.learn(call.up.cfg.name, model, limit)
    known = svc.output_limits.of(call.up.cfg, model)
    limit = known[0] if known is not None else limit  # never above the operator's own cap
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
    return await resend(svc, state, plan, *again, onward)


def _note(state: RequestState, payload: dict[str, Any], limit: int, source: str) -> None:
    state.output_capped = {"to": limit, "asked": output_budget.asked(payload), "source": source}
