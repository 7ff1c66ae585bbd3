"""What OpenAI's Responses API refuses in an input's shape, refused by the fake in its words: a
tool call and its output must come in pairs, the call first (400 ``invalid_request_error``,
param ``input``):

- "No tool call found for function call output with call_id <id>.": an output whose call is not
  before it (quoted with OpenAI's error object by clients that replay histories, and by a Codex
  user whose trimmed history lost the call);
- "No tool output found for function call <id>.": a call with no output after it (a table of
  measured answers, case G5);
- "Invalid 'input[N].call_id': string too long. Expected a string with maximum length 64, but
  got a string with length L instead." (code ``string_above_max_length``; quoted in
  NousResearch/hermes-agent#73538): a call id another provider, or the gateway's Gemini
  signature carrier, made longer; and "Invalid 'input[N].call_id': empty string. Expected a
  string with minimum length 1, but got an empty string instead." (code ``empty_string``; OpenAI's
  error object relayed whole in https://github.com/BigPizzaV3/CodexPlusPlus/issues/315): a call
  or an output whose id is "".

A reasoning item's ``encrypted_content`` is read as OpenAI reads it: a value that is not a
Fernet token (OpenAI's start "gAAAA"; the gateway's carriage of Claude's thinking does not) or
that the fake sealed for a key of another organization (``seal``, ``FakeUpstream.orgs``) is
refused with code ``invalid_encrypted_content``: "The encrypted content for item <id> could not
be verified. Reason: Encrypted content could not be decrypted or parsed."
(https://github.com/smallmain/vscode-unify-chat-provider/issues/178; the code and type as in
https://github.com/openai/codex/issues/8145; met when a pool of relays switched accounts,
https://github.com/Wei-Shaw/sub2api/issues/2863). A reasoning item without ``encrypted_content``
in a request with ``store: false`` names a record OpenAI never kept: 404 "Item with id '<id>' not
found. Items are not persisted when `store` is set to false. Try again with `store` set to true,
or remove this item from your input." (https://github.com/can1357/oh-my-pi/issues/41; the fake
keeps no records, so with ``store`` on it takes any).

Not judged: "Item 'fc_…' of type 'function_call' was provided without its required
'reasoning' item: 'rs_…'." (https://github.com/mastra-ai/mastra/issues/8738). Which reasoning
item a call needs is OpenAI's record of the response that made both, not anything in the
input: a call after another response's reasoning item, or one a client wrote, is taken, and
the fake's own answers carry no reasoning items whose pairs it could remember.

A compression or a cut of the input that separates a pair is exactly what these catch. Neither
is judged when the input continues a stored response (``previous_response_id``, ``conversation``):
the call can then be in the stored part.

A stored response is the project's whose key made it: a ``previous_response_id`` that no
answer to a key of the request's project issued (another project's, one made with ``store:
false``, or none at all) is refused, 400 ``invalid_request_error``, param
``previous_response_id``, code ``previous_response_not_found``: "Previous response with id
'<id>' not found." (the code and words as OpenAI sent them, relayed whole in
https://github.com/maximhq/bifrost/issues/2441; the type and param in
https://github.com/router-for-me/CLIProxyAPI/issues/2954; a turn with ``store: false`` cannot be
chained to, https://github.com/bigduu/Bamboo-agent/pull/513: "Referencing an unstored turn is
guaranteed to 400"). Met by a gateway that sends a chained turn to a key of another project
than its previous turn's (``unknown_previous``; ``issued`` names what an answer stores).

Whatever the request's origin, each in OpenAI's words (400 ``invalid_request_error``):

- ``max_output_tokens`` below 16: "Invalid 'max_output_tokens': integer below minimum value.
  Expected a value >= 16, but got 10 instead." (param ``max_output_tokens``, code
  ``integer_below_min_value``; https://github.com/vectorize-io/hindsight/issues/58, Azure's
  relay of the error object; a relay that clamps to 16, QuantumNous/new-api#2866: "OpenAI
  Responses API rejects max_output_tokens < 16 when explicitly provided");
- a function tool whose parameters declare an object but no ``properties``: "Invalid schema for
  function '<name>': In context=(), object schema missing properties." (param
  ``tools[N].parameters``, code ``invalid_function_parameters``; the Responses API's refusal in
  https://github.com/everruns/everruns/pull/984, with this param and code in
  https://github.com/tailcallhq/forgecode/issues/1359): chat_rules.py's rule, on the flat tool;
- a function tool's name longer than 64: "Invalid 'tools[5].name': string too long. Expected a
  string with maximum length 64, but got a string with length 72 instead." (param
  ``tools[N].name``, code ``string_above_max_length``; Codex's MCP names on codex-mini-latest,
  a Responses-only model, https://github.com/openai/codex/issues/1289); or with another
  character than letters, digits, ``_`` and ``-``: "Invalid 'tools[0].name': string does not
  match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'." (code
  ``invalid_value``; a Responses request with an MCP host's dotted name in
  https://github.com/openai/openai-dotnet/issues/441, the whole words for ``tools[16].name`` in
  https://github.com/justrach/codegraff/issues/930; Codex sanitizes its MCP names for it,
  https://github.com/openai/codex/pull/8694). chat_rules.py's rule, on the flat tool;
- a json_schema ``text.format`` whose schema's root is not a plain object: chat_rules.py's rule
  and words (the Responses API's structured outputs are the same feature, its guide the same
  page), param ``text.format.schema``: the fake's, as no answer quoted from this API was found.

- ``temperature`` other than 1 to a reasoning model (o1, o3, o4-mini, gpt-5 but its ``-chat``
  models): "Unsupported parameter: 'temperature' is not supported with this model." (gpt-5 on
  the Responses API in OpenHands/software-agent-sdk#992, which found 1 taken; param
  ``temperature``, code ``unsupported_parameter`` as chat's answer has them). ``top_p`` is not
  judged: brainlid/langchain#428 reports it refused from gpt-5.2 on and taken before, and no
  answer quoted gives the words.

A request carried over from chat completions (``translate/chat_responses``) is checked for the
chat shapes the Responses API refuses, each in its words (param and code as given):

- a top-level field the API does not have (chat's ``messages``, ``stop``, ``n``, ``seed``,
  ``max_tokens``...): "Unknown parameter: '<name>'." (code ``unknown_parameter``);
- a function tool in chat's nested shape (``{"type": "function", "function": {...}}``):
  "Missing required parameter: 'tools[N].name'." (code ``missing_required_parameter``).

The known fields are those of the openai SDK's ``ResponseCreateParams``, and Codex's
``client_metadata``, which OpenAI takes from it.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Collection, Mapping
from typing import Any

from gateway.fake.chat_rules import NO_PROPERTIES, name_fault, root_schema, unnamed_properties
from gateway.fake.responses import responses_error
from gateway.fake.steps import Reply, response_in

MIN_OUTPUT_TOKENS = 16
_REASONING = re.compile(r"(o1|o3|o4-mini)(-|$)|gpt-5(?!.*-chat)")
_CALLS = frozenset({"function_call", "custom_tool_call"})
_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output"})


_KNOWN = frozenset({
    "background", "client_metadata", "context_management", "conversation", "include", "input", "instructions",
    "max_output_tokens", "max_tool_calls", "metadata", "model", "parallel_tool_calls", "previous_response_id",
    "prompt", "prompt_cache_key", "prompt_cache_retention", "reasoning", "safety_identifier", "service_tier",
    "store", "stream", "stream_options", "temperature", "text", "tool_choice", "tools", "top_logprobs", "top_p",
    "truncation", "user",
})  # fmt: skip


# What the fake's own sealed reasoning starts with: Fernet's prefix, then its mark.
SEALED = "gAAAAAfake."


def seal(org: str | None = None, item: str = "") -> str:
    """An ``encrypted_content`` as the fake would issue it to a key of ``org``; ``item`` makes
    it that item's own, as each of OpenAI's is."""
    sealed = SEALED + base64.urlsafe_b64encode((org or "").encode()).decode()
    return f"{sealed}.{item}" if item else sealed


def refusal(path: str, payload: dict[str, Any], org: str | None = None) -> Reply | None:
    """OpenAI's 400 for this Responses request, or None when OpenAI takes it. ``org``: the
    organization of the key that sent it (whose sealed reasoning it can read)."""
    if not path.endswith("/responses"):
        return None
    unreadable = _unreadable(payload.get("input"), org, payload.get("store") is False)
    if unreadable is not None:
        return unreadable
    shaped = _shape(payload) or _fields(payload)
    if shaped is not None or payload.get("previous_response_id") or payload.get("conversation"):
        return shaped
    items = payload.get("input")
    if not isinstance(items, list):
        return None
    called: list[str] = []
    answered: set[str] = set()
    for n, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        kind, call_id = item.get("type"), item.get("call_id")
        if call_id == "" and (kind in _CALLS or kind in _OUTPUTS):
            param = f"input[{n}].call_id"
            return responses_error(400, f"Invalid '{param}': empty string. Expected a string with minimum length "
                                   "1, but got an empty string instead.", "invalid_request_error", "empty_string",
                                   param)  # fmt: skip
        if isinstance(call_id, str) and len(call_id) > 64:
            param = f"input[{n}].call_id"
            return responses_error(400, f"Invalid '{param}': string too long. Expected a string with maximum "
                                   f"length 64, but got a string with length {len(call_id)} instead.",
                                   "invalid_request_error", "string_above_max_length", param)  # fmt: skip
        if kind in _CALLS:
            called.append(str(call_id))
        elif kind in _OUTPUTS:
            if str(call_id) not in called:
                return _refused(f"No tool call found for function call output with call_id {call_id}.")
            answered.add(str(call_id))
    for call_id in called:
        if call_id not in answered:
            return _refused(f"No tool output found for function call {call_id}.")
    return None


def unknown_previous(payload: dict[str, Any], stored: Mapping[str, Collection[str | None]],
                     project: str | None) -> Reply | None:  # fmt: skip
    """OpenAI's 400 for a ``previous_response_id`` that ``project`` holds no stored response of;
    ``stored``: each response id the fake issued, and the projects that may read it."""
    previous = payload.get("previous_response_id")
    if not isinstance(previous, str) or not previous or project in stored.get(previous, ()):
        return None
    return responses_error(400, f"Previous response with id '{previous}' not found.", "invalid_request_error",
                           "previous_response_not_found", "previous_response_id")  # fmt: skip


def issued(step: object) -> str | None:
    """The id of the response a Responses answer carries (a body, or a stream's
    ``response.created``), which the API stores unless asked not to; None for anything else."""
    response = response_in(step, "response.created")
    if not isinstance(response, dict) or (isinstance(step, Reply) and response.get("object") != "response"):
        return None
    rid = response.get("id")
    return rid if isinstance(rid, str) else None


def _shape(payload: dict[str, Any]) -> Reply | None:
    for key in payload:
        if key not in _KNOWN:
            return responses_error(400, f"Unknown parameter: '{key}'.", "invalid_request_error",
                                   "unknown_parameter", key)  # fmt: skip
    tools = payload.get("tools")
    for j, tool in enumerate(tools if isinstance(tools, list) else ()):
        if isinstance(tool, dict) and tool.get("type") == "function" and "name" not in tool:
            param = f"tools[{j}].name"
            return responses_error(400, f"Missing required parameter: '{param}'.", "invalid_request_error",
                                   "missing_required_parameter", param)  # fmt: skip
    return None


def _fields(payload: dict[str, Any]) -> Reply | None:
    budget = payload.get("max_output_tokens")
    if isinstance(budget, int) and not isinstance(budget, bool) and budget < MIN_OUTPUT_TOKENS:
        return responses_error(400, "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= "
                               f"{MIN_OUTPUT_TOKENS}, but got {budget} instead.", "invalid_request_error",
                               "integer_below_min_value", "max_output_tokens")  # fmt: skip
    temperature, model = payload.get("temperature"), payload.get("model")
    if temperature is not None and temperature != 1 and isinstance(model, str) and _REASONING.match(model):
        return responses_error(400, "Unsupported parameter: 'temperature' is not supported with this model.",
                               "invalid_request_error", "unsupported_parameter", "temperature")  # fmt: skip
    text = payload.get("text")
    root = root_schema(text.get("format"), "text.format.schema") if isinstance(text, dict) else None
    if root is not None:
        return responses_error(400, root[0], "invalid_request_error", None, root[1])
    tools = payload.get("tools")
    for j, tool in enumerate(tools if isinstance(tools, list) else ()):
        name = tool.get("name") if isinstance(tool, dict) and tool.get("type") == "function" else None
        named = name_fault(name, f"tools[{j}].name") if isinstance(name, str) else None
        if named is not None:
            return responses_error(400, named[0], "invalid_request_error", named[2], named[1])
        if isinstance(tool, dict) and tool.get("type") == "function" and unnamed_properties(tool.get("parameters")):
            return responses_error(400, f"Invalid schema for function '{tool.get('name')}': {NO_PROPERTIES}",
                                   "invalid_request_error", "invalid_function_parameters", f"tools[{j}].parameters")
    return None


def _refused(message: str) -> Reply:
    return responses_error(400, message, "invalid_request_error", None, "input")


def _unreadable(items: Any, org: str | None, unstored: bool) -> Reply | None:
    for item in items if isinstance(items, list) else ():
        if not isinstance(item, dict) or item.get("type") != "reasoning":
            continue
        value = item.get("encrypted_content")
        if value is None:
            if unstored and isinstance(item.get("id"), str):
                return responses_error(404, f"Item with id '{item['id']}' not found. Items are not persisted when "
                                       "`store` is set to false. Try again with `store` set to true, or remove "
                                       "this item from your input.", "invalid_request_error", None)  # fmt: skip
            continue
        if _readable(value, org):
            continue
        return responses_error(400, f"The encrypted content for item {item.get('id')} could not be verified. "
                               "Reason: Encrypted content could not be decrypted or parsed.",
                               "invalid_request_error", "invalid_encrypted_content")  # fmt: skip
    return None


def _readable(value: Any, org: str | None) -> bool:
    return isinstance(value, str) and value.startswith("gAAAA") and _sealed_for(value) in (None, org or "")


def _sealed_for(value: str) -> str | None:
    """The organization the fake sealed ``value`` for; None for a value it did not seal."""
    if not value.startswith(SEALED):
        return None
    try:
        return base64.urlsafe_b64decode(value[len(SEALED) :].partition(".")[0]).decode()
    except (binascii.Error, ValueError):
        return "?"
