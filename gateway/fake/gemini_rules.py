"""What the Gemini API refuses in a request body, refused the same way by the fake: pure.

* A field GenerateContentRequest does not have (``model``, ``stream``, ``messages``…): 400
  INVALID_ARGUMENT 'Invalid JSON payload received. Unknown name "model": Cannot find field.'
  with a BadRequest fieldViolation, as quoted in Alishahryar1/free-claude-code#542. The model
  is in the path; the body's fields are those of https://ai.google.dev/api/generate-content,
  under their JSON (camelCase) or proto (snake_case) names, which Google accepts alike.
* A turn of ``functionResponse`` parts that does not come right after a turn of
  ``functionCall`` parts: "Please ensure that function response turn comes immediately after a
  function call turn." (langchain-ai/langchain#27799); as many responses as calls, else
  "Please ensure that the number of function response parts is equal to the number of
  function call parts of the function call turn." (google-gemini/gemini-cli#4504).
* A call the fake answered with (its ``id`` is known) replayed without its
  ``thoughtSignature``: Gemini 3's 400 "Function call is missing a thought_signature in
  functionCall parts. …, function call `default_api:NAME` , position N. …" (worded as quoted in
  manthanabc/paws#103 and csells/dartantic#86). Which position the API counts is not
  documented; here it is the 1-based index of the content holding the call, which gives the
  "position 2" those reports show for a [user, model call, function response] conversation.
* No ``contents``: "* GenerateContentRequest.contents: contents is not specified\n", the
  wording public reports of that 400 quote (and Gemini clients' own tests stub it with).
  Any signature is accepted, placeholders too (Gemini CLI replays calls with
  ``skip_thought_signature_validator``, which Google's thought-signatures page allows).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from gateway.fake.gemini import BAD_REQUEST, error
from gateway.fake.steps import Reply

_FIELDS = ("contents", "tools", "toolConfig", "safetySettings", "systemInstruction", "generationConfig",
           "cachedContent")  # fmt: skip
_COUNT_FIELDS = ("contents", "generateContentRequest")


def _snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in name)


GENERATE_FIELDS = frozenset(_FIELDS) | {_snake(f) for f in _FIELDS}
COUNT_FIELDS = frozenset(_COUNT_FIELDS) | {_snake(f) for f in _COUNT_FIELDS}


def _get(obj: dict[str, Any], name: str) -> Any:
    value = obj.get(name)
    return obj.get(_snake(name)) if value is None else value


def unknown_field(payload: dict[str, Any], known: Collection[str]) -> Reply | None:
    unknown = [k for k in payload if k not in known]
    if not unknown:
        return None
    texts = [f'Invalid JSON payload received. Unknown name "{k}": Cannot find field.' for k in unknown]
    return error(400, "\n".join(texts), [{"@type": BAD_REQUEST,
                                          "fieldViolations": [{"description": t} for t in texts]}])  # fmt: skip


def _parts(content: Any, kind: str) -> list[dict[str, Any]]:
    parts = content.get("parts") if isinstance(content, dict) else None
    if not isinstance(parts, list):
        return []
    return [p for p in parts if isinstance(p, dict) and isinstance(_get(p, kind), dict)]


def refusal(payload: dict[str, Any], issued: Collection[str] = ()) -> Reply | None:
    """Why the Gemini API would refuse this generateContent body, or None. ``issued``: the ids
    of the calls the fake answered with (only those must come back signed)."""
    refused = unknown_field(payload, GENERATE_FIELDS)
    if refused is not None:
        return refused
    contents = payload.get("contents")
    if not isinstance(contents, list) or not contents:
        return error(400, "* GenerateContentRequest.contents: contents is not specified\n")
    for n, content in enumerate(contents):
        calls = _parts(content, "functionCall")
        for part in calls:
            call = _get(part, "functionCall")
            if call.get("id") in issued and not _get(part, "thoughtSignature"):
                return error(400, "Function call is missing a thought_signature in functionCall parts. This is "
                                  "required for tools to work correctly, and missing thought_signature may lead to "
                                  "degraded model performance. Additional data, function call "
                                  f"`default_api:{call.get('name')}` , position {n + 1}. Please refer to "
                                  "https://ai.google.dev/gemini-api/docs/thought-signatures for more details.")  # fmt: skip
        answers = _parts(content, "functionResponse")
        if not answers:
            continue
        asked = _parts(contents[n - 1], "functionCall") if n > 0 else []
        if not asked:
            return error(400, "Please ensure that function response turn comes immediately after a function call turn.")
        if len(answers) != len(asked):
            return error(400, "Please ensure that the number of function response parts is equal to the number "
                              "of function call parts of the function call turn.")  # fmt: skip
    return None
