"""What OpenAI's chat completions API refuses in a request's shape, refused by the fake in its
words: the mirror of messages_rules.py for requests translated to chat (Claude Code and Codex on
a chat-only server). Each rule, as OpenAI words it (400 ``invalid_request_error``):

- "[] is too short - 'messages'": no messages at all (quoted in llama.cpp's and Ollama's
  compatibility notes and tests, which copy OpenAI's wording);
- "An assistant message with 'tool_calls' must be followed by tool messages responding to each
  'tool_call_id'. The following tool_call_ids did not have response messages: <ids>" (param
  ``messages``): quoted in many agents' reports with OpenAI's full error object;
- "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with
  'tool_calls'." (param ``messages.[N].role``; the misspelling is OpenAI's): a tool result whose
  call is not in the assistant turn right before it;
- "Invalid parameter: Duplicate value for 'tool_call_id' of '<id>', in messages[A] and
  messages[B]." (param ``messages.[B].tool_call_id``): a call answered by two tool messages
  (OpenAI's error object in https://github.com/agno-agi/agno/issues/5116; GitHub Copilot's
  GPT 4.1 in https://github.com/anomalyco/opencode/issues/1211);
- "Invalid 'user': string too long. Expected a string with maximum length 64, but got a string
  with length N instead." (param ``user``, code ``string_above_max_length``): Claude Code's
  ``metadata.user_id``, a JSON object of ~150 characters, passed on as ``user``. The limit is
  https://github.com/maximhq/bifrost/pull/1000's; the words are OpenAI's answer for any string
  too long, with that param and code (https://github.com/BerriAI/litellm/issues/4735, for a
  tool's description), and quoted for ``user`` itself in LiteLLM's tests of its error mapping;
- a function tool's name (param ``tools[N].function.name``) longer than 64: the same words
  (https://github.com/ravitemer/mcphub.nvim/pull/243, with the code); or with other characters
  than letters, digits, ``_`` and ``-``, as MCP servers name theirs: "Invalid
  'tools[N].function.name': string does not match pattern. Expected a string that matches the
  pattern '^[a-zA-Z0-9_-]+$'." (code ``invalid_value``: https://github.com/brekkylab/ailoy/pull/109,
  https://github.com/Vortiago/mcp-azure-devops/pull/30). An empty name is answered with the
  pattern's words, the fake's choice. A call's name in the history is held to the same pattern:
  "Invalid 'messages[9].tool_calls[0].function.name': string does not match pattern. Expected a
  string that matches the pattern '^[a-zA-Z0-9_-]+$'." (param ``messages[N].tool_calls[M].
  function.name``, code ``invalid_value``: https://github.com/mcp-use/mcp-use/pull/94);
- a ``strict`` json_schema ``response_format`` whose schema has an object, at any depth, that is
  not closed or does not require all its properties: "Invalid schema for response_format
  '<name>': In context=<path>, 'additionalProperties' is required to be supplied and to be
  false." (https://github.com/moeru-ai/xsai/issues/202, https://github.com/google/adk-python/pull/4039)
  and "… 'required' is required to be supplied and to be an array including every key in
  properties. Missing '<key>'." (https://github.com/vercel/ai/issues/6484), param
  ``response_format``. Where an object breaks both, the first is answered, and of the keys
  missing the first, as the quoted answers name one: the fake's choices;
- a json_schema ``response_format`` whose schema's root is not a plain object (``type`` other
  than ``"object"``, or a root ``anyOf``, ``oneOf``, ``enum`` or ``const``): "Invalid schema for
  response_format '<name>': schema must be a JSON Schema of 'type: "object"', got 'type:
  "array"'." (param ``response_format``, no code: OpenAI's error object in
  podly-pure-podcasts/podly_pure_podcasts#89; the structured-outputs guide: "the root level object
  of a schema must be an object, and not use anyOf"). With or without ``strict``: the answer
  quoted does not show the flag, and the guide states the rule for the schema as a whole. A root
  with no ``type`` is named ``'type: None'``, and one that is an object beside ``anyOf`` (or the
  others) ``'type: "object"'``: the fake's words;
- a function tool whose parameters hold a ``type`` JSON Schema does not have (Google's upper-case
  ``"OBJECT"``, at any depth): "Invalid schema for function '<name>': '<TYPE>' is not valid under
  any of the given schemas." (param ``tools[N].function.parameters``, code
  ``invalid_function_parameters``). The frame, param and code are OpenAI's answer to a schema its
  check refuses ("Invalid schema for function 'generate_simple_list': 'items' is not of type
  'array'.", https://community.openai.com/t/quirk-in-openai-s-function-call-schema-single-property-schemas-fail-to-execute/1062703);
  the clause after the colon is what that check, a JSON Schema validator, says of a type name
  outside the draft's list, and what Anthropic's answer to the same schema ends with
  (messages_rules.py). No answer quoted for this very schema was found: the words are the fake's;
- a function tool whose parameters declare an object (``{"type": "object"}``, as MCP's Go SDK
  writes a tool without arguments, xpzouying/xiaohongshu-mcp#677) but no ``properties``:
  "Invalid schema for function '<name>': In context=(), object schema missing properties."
  (param ``tools[N].function.parameters``, code ``invalid_function_parameters``;
  https://github.com/evalstate/fast-agent/issues/143 with OpenAI's whole error object;
  ``{"type": "object", "additionalProperties": false}`` answered the same,
  https://github.com/github/copilot-cli/issues/1825). Only the top level is judged: no answer
  quoted refuses an object without ``properties`` further in;
- a ``strict`` function tool whose parameters hold an object, at any depth, that is not closed
  or does not require all its properties: "Invalid schema for function '<name>': In
  context=('properties', 'body'), 'additionalProperties' is required to be supplied and to be
  false." (code ``invalid_function_parameters``, https://github.com/camel-ai/camel/issues/2231)
  and "... In context=(), 'required' is required to be supplied and to be an array including
  every key in properties. Missing 'params'." (the same code, param ``tools[1].parameters`` on
  the Responses API: https://github.com/kevinwatt/mysql-mcp/issues/5), param
  ``tools[N].function.parameters``: strict mode's rules for ``response_format`` (above), for a
  function's parameters;
- an image whose data URL names a type other than PNG, JPEG, GIF or WebP (HEIC, which Gemini
  clients send): "You uploaded an unsupported image. Please make sure your image has of one the
  following formats: ['png', 'jpeg', 'gif', 'webp']." (code ``invalid_image_format``, no param;
  https://github.com/marketing-factory/ai-filemetadata/issues/18 for an AVIF, with the code in
  clients' recorded answers). ``image/jpg`` is not judged: no answer says whether OpenAI reads
  the name.

- a tool call id longer than 40 characters: "Invalid 'messages[N].tool_calls[M].id': string too
  long. Expected a string with maximum length 40, but got a string with length L instead." (code
  ``string_above_max_length``; https://github.com/anomalyco/opencode/issues/12653,
  https://github.com/Portkey-AI/gateway/issues/1062 for Azure, BerriAI/litellm#17343 for GitHub
  Copilot). A 2026 reproduction found OpenAI's own endpoint taking 51 characters
  (https://github.com/vercel/ai/pull/17233): the fake keeps the limit Azure and Copilot hold;
- function tools beside ``reasoning_effort`` on gpt-5.4 and later: "Function tools with
  reasoning_effort are not supported for <model> in /v1/chat/completions. Please use
  /v1/responses instead." (param ``reasoning_effort``, no code; gpt-5.4 in
  https://github.com/pipecat-ai/pipecat/issues/4043, gpt-5.5 in
  https://github.com/charmbracelet/crush/issues/2913), from gpt-5.6 on "... To use function tools,
  use /v1/responses or set reasoning_effort to 'none'." (https://github.com/GEMISIS/leviath/issues/333).
  gpt-5.4 takes tools without the field (https://github.com/openai/openai-openapi/issues/541:
  clients leave it out to go on); gpt-5.5 and later refuse their own default effort too, and take
  ``"none"`` ("tools only => 400 ...; tools + reasoning_effort=none => 200",
  https://github.com/BerriAI/litellm/pull/34569 for gpt-5.6; for gpt-5.5,
  https://github.com/jeffdafoe/llm-memory-api/pull/178). That gpt-5.5 takes "none" is the fake's
  reading of the newer wording;
- ``stop`` to a reasoning model: "Unsupported parameter: 'stop' is not supported with this model."
  (param ``stop``, code ``unsupported_parameter``; o3 in https://github.com/crewAIInc/crewAI/issues/2738,
  o1-preview in crewAIInc/crewAI#1908, gpt-5 in FlowiseAI/Flowise#5046, gpt-5.2 in
  huggingface/smolagents#1893). The models: o1, o3 and o4-mini (o3-mini takes it, as
  huggingface/smolagents#1211 found), every gpt-5 but the non-reasoning ``-chat`` ones;
- a reasoning model's settings (the models as for ``stop``, o3-mini too), one refused per answer
  in this order, param the field: ``max_tokens``, "Unsupported parameter: 'max_tokens' is not
  supported with this model. Use 'max_completion_tokens' instead." (code ``unsupported_parameter``;
  o1 in yym68686/ChatGPT-Telegram-Bot#82, gpt-5.1 in fish2018/YPrompt#26 with the whole object);
  ``temperature`` other than 1, "Unsupported value: 'temperature' does not support 0.1 with this
  model. Only the default (1) value is supported." (code ``unsupported_value``; o3 in
  microsoft/vscode#255504; 1 is taken, community.openai.com's "temperature in GPT-5 models", as
  the same words say); ``top_p``, "Unsupported parameter: 'top_p' is not supported with this
  model." (code ``unsupported_parameter``; gpt-5 in lfnovo/open-notebook#107 with the object,
  HIllya51/LunaTranslator#1842; o1-preview in aandrew-me/tgpt#333, whose client sent it at 1 too);
  ``presence_penalty`` and ``frequency_penalty`` in the same words (gpt-5-mini in
  nextai-translator/nextai-translator#1781, o1-preview in lobehub/lobehub#5053). Any value of
  these three is refused, as those answers came to clients that sent defaults. ``logprobs`` is not
  judged: no answer quoted gives OpenAI's words for it;
- more than 4 stop strings: "Invalid 'stop': array too long. Expected an array with maximum
  length 4, but got an array with length N instead." (param ``stop``, code
  ``array_above_max_length``; https://github.com/continuedev/continue/issues/1572);
- more than 128 tools: "Invalid 'tools': array too long. Expected an array with maximum length
  128, but got an array with length N instead." (param ``tools``, code ``array_above_max_length``;
  https://github.com/vishalmysore/Tools4AI/issues/16);
- an empty ``tools`` list: "Invalid 'tools': empty array. Expected an array with minimum length 1,
  but got an empty array instead." (https://github.com/continuedev/continue/issues/3370 on gpt-4o,
  https://github.com/dnakov/anon-kode/issues/20), and the same words for an assistant turn's empty
  ``tool_calls``: "Invalid 'messages[2].tool_calls': empty array. ..." (param
  ``messages[2].tool_calls``, code ``empty_array``: https://github.com/home-assistant/core/pull/118577
  with OpenAI's error object; https://github.com/openai/openai-node/pull/1341). The param and code
  of the ``tools`` answer are the fake's, after that one;
- a message whose ``content`` is null: "Invalid value for 'content': expected a string, got null."
  (param ``messages.[N].content``, no code: the whole object in
  https://github.com/langchain-ai/langchainjs/issues/4153 for a user turn, in
  https://github.com/songquanpeng/one-api/issues/784 for ``messages.[1].content``; a tool's null
  output in https://github.com/run-llama/llama_index/issues/17555). An assistant turn may leave it
  null beside its ``tool_calls``, not without them
  (https://github.com/vercel/ai/pull/13744: "This breaks vanilla openai with ... if you happen to
  have no tool calls and empty text"). A ``content`` left out is not judged: no answer quoted;
- ``stream_options`` on a request that does not stream: "The 'stream_options' parameter is only
  allowed when 'stream' is enabled." (param ``stream_options``, no code;
  https://github.com/BerriAI/litellm/issues/5803);
- ``metadata`` without ``store: true`` (chat stores nothing unless asked): "The 'metadata'
  parameter is only allowed when 'store' is enabled." (https://github.com/tmc/langchaingo/issues/1484,
  spiceai/spiceai#5231; neither prints the param: ``metadata`` is the fake's);
- ``parallel_tool_calls`` or ``tool_choice`` without tools: "Invalid value for
  'parallel_tool_calls': 'parallel_tool_calls' is only allowed when 'tools' are specified."
  (param ``parallel_tool_calls``, no code; https://github.com/openai/swarm/issues/30) and
  "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified."
  (https://github.com/writer/writer-framework/pull/1013, in a relay's envelope; the param, as
  ``parallel_tool_calls``'s, is the fake's). Any ``tool_choice`` at all, ``"none"`` too: a check
  against OpenAI found it so (https://github.com/vllm-project/vllm/pull/40311).

- both output budgets at once: "Setting 'max_tokens' and 'max_completion_tokens' at the same time
  is not supported." (param ``max_tokens``, code ``invalid_parameter_combination``: OpenAI's
  whole error object in https://github.com/langchain-ai/langgraph/issues/5943, gpt-4.1; the same
  words from gpt-5.4 in smallmain/vscode-unify-chat-provider#279). Any two values, equal too:
  the answers quoted name the pair, not their values.

Where a request breaks more than one rule, the order they are checked in is the fake's own.
"""

from __future__ import annotations

import re
from typing import Any

from gateway.fake.responses import responses_error
from gateway.fake.schemas import TYPES, mistyped, objects
from gateway.fake.steps import Reply

Fault = tuple[str, str | None, str | None]  # message, param, code

_FUNCTION_NAME = re.compile(r"[a-zA-Z0-9_-]+")
_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/jpg", "image/gif", "image/webp"})
_DATA_URL = re.compile(r"data:([^;,]+)[;,]")
_GPT5_MINOR = re.compile(r"gpt-5\.(\d+)(?!\d)")
# The reasoning models that refuse ``stop``: o1, o3 (not o3-mini), o4-mini, gpt-5 (not -chat).
_NO_STOP = re.compile(r"(o1|o3(?!-mini)|o4-mini)(-|$)|gpt-5(?!.*-chat)")
# The reasoning models, which refuse the sampling settings (o3-mini among them).
_REASONING = re.compile(r"(o1|o3|o4-mini)(-|$)|gpt-5(?!.*-chat)")
_UNSUPPORTED = ("top_p", "presence_penalty", "frequency_penalty")
CALL_ID_MAX = 40


def refusal(path: str, payload: dict[str, Any]) -> Reply | None:
    """OpenAI's 400 for this chat request, or None when OpenAI takes it."""
    if not path.endswith("/chat/completions"):
        return None
    found = (_fields(payload) or _model_fields(payload) or _user(payload.get("user"))
             or _tool_names(payload.get("tools")) or _parameters(payload.get("tools"))
             or root_schema(payload.get("response_format"), "response_format")
             or _strict_schema(payload.get("response_format")) or _why(payload.get("messages"))
             or _images(payload.get("messages")))  # fmt: skip
    if found is None:
        return None
    message, param, code = found
    return responses_error(400, message, "invalid_request_error", code, param)


def _fields(payload: dict[str, Any]) -> Fault | None:
    """What OpenAI refuses of the request's own fields, whatever the model."""
    tools = payload.get("tools")
    if tools == []:
        return _empty("tools")
    if isinstance(tools, list) and len(tools) > 128:
        return _too_many("tools", 128, len(tools))
    stop = payload.get("stop")
    if isinstance(stop, list) and len(stop) > 4:
        return _too_many("stop", 4, len(stop))
    if payload.get("stream_options") is not None and payload.get("stream") is not True:
        return "The 'stream_options' parameter is only allowed when 'stream' is enabled.", "stream_options", None
    if payload.get("max_tokens") is not None and payload.get("max_completion_tokens") is not None:
        return ("Setting 'max_tokens' and 'max_completion_tokens' at the same time is not supported.",
                "max_tokens", "invalid_parameter_combination")  # fmt: skip
    if payload.get("metadata") is not None and payload.get("store") is not True:
        return "The 'metadata' parameter is only allowed when 'store' is enabled.", "metadata", None
    if not tools:
        for key in ("parallel_tool_calls", "tool_choice"):
            if payload.get(key) is not None:
                return (f"Invalid value for '{key}': '{key}' is only allowed when 'tools' are specified.",
                        key, None)  # fmt: skip
    return None


def _model_fields(payload: dict[str, Any]) -> Fault | None:
    """What one model refuses that another takes."""
    model = payload.get("model")
    if not isinstance(model, str):
        return None
    reasoning = _reasoning_settings(payload) if _REASONING.match(model) else None
    if reasoning is not None:
        return reasoning
    if payload.get("stop") is not None and _NO_STOP.match(model):
        return _unsupported("stop")
    minor = _GPT5_MINOR.match(model)
    version = int(minor.group(1)) if minor else 0
    effort = payload.get("reasoning_effort")
    if version >= 4 and payload.get("tools") and effort != "none" and (effort is not None or version >= 5):
        way_out = ("Please use /v1/responses instead." if version < 6
                   else "To use function tools, use /v1/responses or set reasoning_effort to 'none'.")  # fmt: skip
        return (f"Function tools with reasoning_effort are not supported for {model} in /v1/chat/completions. "
                f"{way_out}", "reasoning_effort", None)  # fmt: skip
    return None


def _reasoning_settings(payload: dict[str, Any]) -> Fault | None:
    if payload.get("max_tokens") is not None:
        return ("Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' "
                "instead.", "max_tokens", "unsupported_parameter")  # fmt: skip
    temperature = payload.get("temperature")
    if temperature is not None and temperature != 1:
        return (f"Unsupported value: 'temperature' does not support {temperature} with this model. Only the default "
                "(1) value is supported.", "temperature", "unsupported_value")  # fmt: skip
    for key in _UNSUPPORTED:
        if payload.get(key) is not None:
            return _unsupported(key)
    return None


def _unsupported(param: str) -> Fault:
    return f"Unsupported parameter: '{param}' is not supported with this model.", param, "unsupported_parameter"


def _too_many(param: str, limit: int, length: int) -> Fault:
    return (f"Invalid '{param}': array too long. Expected an array with maximum length {limit}, but got an array "
            f"with length {length} instead.", param, "array_above_max_length")  # fmt: skip


def _why(messages: Any) -> Fault | None:
    if messages == []:
        return "[] is too short - 'messages'", None, None
    if not isinstance(messages, list):
        return None
    window: set[str] = set()  # the calls of the assistant turn the tool messages now answer
    waiting: list[str] = []  # of those, the ones no tool message answered yet
    answered: dict[Any, int] = {}  # of those, where each was answered
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        if message.get("role") == "assistant" and message.get("tool_calls") == []:
            return _empty(f"messages[{i}].tool_calls")
        said = message.get("role") == "assistant" and (message.get("tool_calls") or message.get("function_call"))
        if "content" in message and message["content"] is None and not said:
            return "Invalid value for 'content': expected a string, got null.", f"messages.[{i}].content", None
        if message.get("role") == "tool":
            call = message.get("tool_call_id")
            if call not in window:
                return ("Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
                        "with 'tool_calls'.", f"messages.[{i}].role", None)  # fmt: skip
            if call in answered and call not in waiting:  # a turn calling twice with one id is answered twice
                return (f"Invalid parameter: Duplicate value for 'tool_call_id' of '{call}', in "
                        f"messages[{answered[call]}] and messages[{i}].", f"messages.[{i}].tool_call_id", None)  # fmt: skip
            answered.setdefault(call, i)
            if call in waiting:
                waiting.remove(call)
            continue
        if waiting:
            return _unanswered(waiting)
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        ids = [str(c.get("id")) for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []
        for j, call_id in enumerate(ids):
            if len(call_id) > CALL_ID_MAX:
                return _too_long(f"messages[{i}].tool_calls[{j}].id", CALL_ID_MAX, len(call_id))
        named = _called_names(calls, i)
        if named is not None:
            return named
        window, waiting, answered = set(ids), list(ids), {}
    return _unanswered(waiting) if waiting else None


def _called_names(calls: Any, i: int) -> Fault | None:
    for j, call in enumerate(calls if isinstance(calls, list) else ()):
        function = call.get("function") if isinstance(call, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if isinstance(name, str) and not _FUNCTION_NAME.fullmatch(name):
            param = f"messages[{i}].tool_calls[{j}].function.name"
            return (f"Invalid '{param}': string does not match pattern. Expected a string that matches the "
                    "pattern '^[a-zA-Z0-9_-]+$'.", param, "invalid_value")  # fmt: skip
    return None


def _empty(param: str) -> Fault:
    return (f"Invalid '{param}': empty array. Expected an array with minimum length 1, but got an empty array "
            "instead.", param, "empty_array")  # fmt: skip


def _unanswered(ids: list[str]) -> Fault:
    return ("An assistant message with 'tool_calls' must be followed by tool messages responding to each "
            f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(ids)}",
            "messages", None)  # fmt: skip


def _user(user: Any) -> Fault | None:
    if isinstance(user, str) and len(user) > 64:
        return _too_long("user", 64, len(user))
    return None


def _tool_names(tools: Any) -> Fault | None:
    if not isinstance(tools, list):
        return None
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str):
            continue  # not a function tool, or one the fake's other checks answer
        found = name_fault(name, f"tools[{i}].function.name")
        if found is not None:
            return found
    return None


def name_fault(name: str, param: str) -> Fault | None:
    """What OpenAI refuses of a function tool's name at ``param``: longer than 64, or another
    character than a letter, a digit, ``_`` or ``-``. Shared with responses_rules.py."""
    if len(name) > 64:
        return _too_long(param, 64, len(name))
    if not _FUNCTION_NAME.fullmatch(name):
        return (f"Invalid '{param}': string does not match pattern. Expected a string that matches the "
                "pattern '^[a-zA-Z0-9_-]+$'.", param, "invalid_value")  # fmt: skip
    return None


def _parameters(tools: Any) -> Fault | None:
    for i, tool in enumerate(tools if isinstance(tools, list) else ()):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict):
            continue
        parameters, param = function.get("parameters"), f"tools[{i}].function.parameters"
        prefix = f"Invalid schema for function '{function.get('name')}': "
        wrong = mistyped(parameters)
        if wrong is not None:
            kinds = wrong["type"] if isinstance(wrong["type"], list) else [wrong["type"]]
            bad = next(k for k in kinds if k not in TYPES)
            return f"{prefix}{bad!r} is not valid under any of the given schemas.", param, "invalid_function_parameters"
        if unnamed_properties(parameters):
            return f"{prefix}{NO_PROPERTIES}", param, "invalid_function_parameters"
        if function.get("strict") is True:
            for where, obj in objects(parameters):
                why = _unclosed(obj)
                if why is not None:
                    return f"{prefix}In context={where!r}, {why}", param, "invalid_function_parameters"
    return None


NO_PROPERTIES = "In context=(), object schema missing properties."


def unnamed_properties(parameters: Any) -> bool:
    """A function's parameters that declare an object but no ``properties`` (the top level only:
    no answer quoted refuses one further in without strict). Shared with responses_rules.py."""
    if not isinstance(parameters, dict) or "properties" in parameters:
        return False
    kind = parameters.get("type")
    return kind == "object" or (isinstance(kind, list) and "object" in kind)


def _images(messages: Any) -> Fault | None:
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else ():
            spec = part.get("image_url") if isinstance(part, dict) and part.get("type") == "image_url" else None
            url = spec.get("url") if isinstance(spec, dict) else spec
            found = _DATA_URL.match(url) if isinstance(url, str) else None
            if found is not None and found.group(1).lower() not in _IMAGE_TYPES:
                return ("You uploaded an unsupported image. Please make sure your image has of one the following "
                        "formats: ['png', 'jpeg', 'gif', 'webp'].", None, "invalid_image_format")  # fmt: skip
    return None


def _too_long(param: str, limit: int, length: int) -> Fault:
    return (f"Invalid '{param}': string too long. Expected a string with maximum length {limit}, but got a "
            f"string with length {length} instead.", param, "string_above_max_length")  # fmt: skip


def root_schema(fmt: Any, param: str) -> Fault | None:
    """A structured output whose root OpenAI refuses: ``fmt`` chat's ``response_format``, or
    Responses' ``text.format`` (its schema at the top). Shared with responses_rules.py."""
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        return None
    spec = fmt.get("json_schema", fmt) if param == "response_format" else fmt
    schema = spec.get("schema") if isinstance(spec, dict) else None
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if kind == "object" and not any(k in schema for k in ("anyOf", "oneOf", "enum", "const")):
        return None
    got = f'"{kind}"' if isinstance(kind, str) else "None"
    return (f"Invalid schema for response_format '{spec.get('name')}': schema must be a JSON Schema of "
            f"'type: \"object\"', got 'type: {got}'.", param, None)  # fmt: skip


def _strict_schema(response_format: Any) -> Fault | None:
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        return None
    spec = response_format.get("json_schema")
    if not isinstance(spec, dict) or spec.get("strict") is not True:
        return None  # without strict, OpenAI takes any schema
    for where, obj in objects(spec.get("schema")):
        why = _unclosed(obj)
        if why is not None:
            return (f"Invalid schema for response_format '{spec.get('name')}': In context={where!r}, {why}",
                    "response_format", None)  # fmt: skip
    return None


def _unclosed(obj: dict[str, Any]) -> str | None:
    if obj.get("additionalProperties") is not False:
        return "'additionalProperties' is required to be supplied and to be false."
    properties, required = obj.get("properties"), obj.get("required")
    listed = required if isinstance(required, list) else []
    missing = [key for key in properties if key not in listed] if isinstance(properties, dict) else []
    if missing:
        return ("'required' is required to be supplied and to be an array including every key in properties. "
                f"Missing '{missing[0]}'.")  # fmt: skip
    return None
