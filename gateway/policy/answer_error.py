"""A 2xx answer that is an error: the provider's error document sent under a success status.

OpenRouter answers 200 once a model has started on a request, and an error that happens
after that comes in the body: "The HTTP Response will have the same status code as
error.code, forming a request error if: Your original request is invalid; Your API
key/account is out of credits. Otherwise, the returned HTTP response status will be 200 and
any error occurred while the LLM is producing the output will be emitted in the response
body or as an SSE data event", the body being ``{"error": {"code": number, "message":
string, "metadata"?: {...}}}`` (https://openrouter.ai/docs/api/reference/errors-and-debugging),
e.g. ``{"error":{"message":"Provider returned error","code":429,"metadata":{"raw":"… is
temporarily rate-limited upstream …","provider_name":"BaseTen",…}}}`` (open-webui/computer#293).
Relayed as a success, it became an empty answer (a translated request) or a body the SDKs
crash on (the openai SDK: ``'NoneType' object is not subscriptable``), and was never retried.

Such a body is an error of the status it names (``error.code`` or ``error.status`` when an
HTTP error status, else what its Anthropic type or OpenAI code stands for: the same reading
as an error event's, ``sse.error_status``), else a 502: the upstream answered with an error
and no status for it. The stream's counterpart, an error event, is the readers' (``apis/``).
"""

from __future__ import annotations

import json

from gateway.jsonpeek import holds_object_member
from gateway.sse import error_status

# What only an answer has at its top level, in any of the four APIs (chat's choices, a
# Messages message's content, a Responses response's output, Gemini's candidates), and the
# type or object naming one: a body with any of them is an answer, even with an error member
# (a Responses response that failed carries both: a Responses client reads it as the answer
# it is; translated for another API's client it is the error it names, ``Dialect.failed``).
ANSWER_MEMBERS = ("choices", "content", "output", "candidates")
ANSWER_KINDS = {"type": ("message",), "object": ("chat.completion", "response")}
NO_STATUS = 502
_ERROR = b'"error"'


def error_status_of(body: bytes) -> int | None:
    """The HTTP status a 2xx body stands for when its top level is an error document (an
    ``error`` object and nothing of an answer), else None. Answers never pay for a decode:
    one that holds no ``"error": {`` is known not to be one by a byte search alone."""
    if not holds_object_member(body, _ERROR):
        return None
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("error"), dict):
        return None
    if any(member in doc for member in ANSWER_MEMBERS):
        return None
    if any(doc.get(name) in kinds for name, kinds in ANSWER_KINDS.items()):
        return None
    return error_status(doc) or NO_STATUS
