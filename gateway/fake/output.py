"""What a model does not take, refused as the real APIs refuse it.

With ``FakeUpstream.output_limit`` set, a request whose output budget is above it gets the
API's own 400 before anything else answers it; with ``refused_params``, a request carrying one
of those top-level parameters does: the real APIs check both before they look at the
conversation. The wordings are the providers' (``output_limit`` and ``refused_param`` cases in
tests/corpus/): OpenAI's (gpt-4o's "Unrecognized request argument supplied", a reasoning
model's "Use 'max_completion_tokens' instead") and Anthropic's; with ``refusal_style`` "groq"
or "mistral", a chat request's parameter is refused as those providers refuse it (Groq's
"property 'X' is unsupported", Mistral's 422 listing it as ``extra_forbidden``).
"""

from __future__ import annotations

from typing import Any

from gateway.fake.messages import anthropic_error
from gateway.fake.steps import Reply

STYLES = ("openai", "groq", "mistral")


def param_refusal(refused: frozenset[str], path: str, payload: Any, style: str = "openai") -> Reply | None:
    if not refused or not isinstance(payload, dict):
        return None
    name = next((k for k in payload if k in refused), None)
    if name is None:
        return None
    if path.endswith("/messages"):
        return anthropic_error(400, "invalid_request_error", f"`{name}` is deprecated for this model.")
    if style == "groq":  # tests/corpus/hosted_more.json: groq-400-property-*-unsupported
        return Reply(400, {"error": {"message": f"property '{name}' is unsupported",
                                     "type": "invalid_request_error"}})  # fmt: skip
    if style == "mistral":  # tests/corpus/hosted_more.json: mistral-422-extra-forbidden-*
        error = {"type": "extra_forbidden", "loc": ["body", name], "msg": "Extra inputs are not permitted",
                 "input": payload[name]}  # fmt: skip
        return Reply(422, {"object": "error", "message": {"detail": [error]}, "type": "invalid_request_error",
                           "param": None, "code": None})  # fmt: skip
    if name == "max_tokens":
        message = ("Unsupported parameter: 'max_tokens' is not supported with this model. "
                   "Use 'max_completion_tokens' instead.")  # fmt: skip
        return Reply(400, {"error": {"message": message, "type": "invalid_request_error", "param": name,
                                     "code": "unsupported_parameter"}})  # fmt: skip
    return Reply(400, {"error": {"message": f"Unrecognized request argument supplied: {name}",
                                 "type": "invalid_request_error", "param": None, "code": None}})  # fmt: skip


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
