"""A model's output limit, refused as the real APIs refuse a larger budget.

With ``FakeUpstream.output_limit`` set, a request whose output budget is above it gets the
API's own 400 before anything else answers it: the real APIs check the budget before they
look at the conversation. The wordings are the providers' (``output_limit`` cases in
tests/corpus/: OpenAI's and Anthropic's).
"""

from __future__ import annotations

from typing import Any

from gateway.fake.messages import anthropic_error
from gateway.fake.steps import Reply


def refusal(limit: int | None, path: str, payload: Any) -> Reply | None:
    if limit is None or not isinstance(payload, dict):
        return None
    if path.endswith("/chat/completions"):
        for key in ("max_completion_tokens", "max_tokens"):
            asked = payload.get(key)
            if _above(asked, limit):
                message = (f"{key} is too large: {asked}. This model supports at most {limit} completion "
                           f"tokens, whereas you provided {asked}.")  # fmt: skip
                return Reply(400, {"error": {"message": message, "type": "invalid_request_error",
                                             "param": key, "code": "invalid_value"}})  # fmt: skip
    elif path.endswith("/messages"):
        asked = payload.get("max_tokens")
        if _above(asked, limit):
            model = payload.get("model")
            return anthropic_error(400, "invalid_request_error",
                                   f"max_tokens: {asked} > {limit}, which is the maximum allowed number of "
                                   f"output tokens for {model}")  # fmt: skip
    return None


def _above(value: Any, limit: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > limit
