"""OpenAI chat completions client → Anthropic Messages upstream: the request.

What is carried, dropped or refused, each with its reason, is the table in
``docs/translation/chat_messages.md``; this module is that table in code. The answer and the
stream come back through ``answer.py``.

Facts about the Messages API relied on here (Anthropic API reference, "Create a Message",
and the extended-thinking guide's "Feature compatibility"):

* there is no system role in ``messages``: instructions go in the top-level ``system``;
* consecutive turns of one role are combined into one turn by the API, so merging them here
  changes nothing; it is done so that tool results land in one user turn, first in it;
* ``max_tokens`` is required; ``temperature`` ranges 0–1 and newer models refuse it
  together with ``top_p``; the adaptive-only ones refuse it, ``top_p`` and ``top_k`` each, and
  some refuse a forced ``tool_choice`` outright (``apis/messages/claude_models.py``);
* ``tool_use.id`` must match ``^[a-zA-Z0-9_-]+$``, and the calls of one turn have distinct ids
  ("messages.1.content.1: `tool_use` ids must be unique", trycua/cua #524); a turn answering
  calls starts with their results ("Did not find 1 `tool_result` block(s) at the beginning of
  this message", claude-code #37), and answers each call once ("messages.4.content.1: each
  tool_use must have a single result. Found multiple `tool_result` blocks with id", quoted in
  LiteLLM's regression test and oai-compatible-copilot #270);
* a tool's ``input_schema`` names its ``type`` ("tools.0.custom.input_schema.type: Field
  required", kilocode #12238);
* a ``cache_control`` with ``ttl: "1h"`` never follows a five-minute one in the order tools,
  system, messages ("a ttl='1h' cache_control block must not come after a ttl='5m'
  cache_control block", claude-code-cache-fix #44);
* thinking needs ``budget_tokens`` ≥ 1024 and < ``max_tokens`` (or, on the newer models, is
  asked as ``adaptive`` with an effort: ``apis/messages/claude_models.py``), is incompatible with a changed
  ``temperature`` or ``top_k``, with ``top_p`` below 0.95, with a forced ``tool_choice`` and
  with a prefilled answer, and a final assistant turn that called tools must start with its
  (signed) thinking block ("messages.1.content.0.type: Expected `thinking` or
  `redacted_thinking`, but found `tool_use`. When `thinking` is enabled, a final `assistant`
  message must start with a thinking block (preceeding the lastmost set of `tool_use` and
  `tool_result` blocks)", quoted in opencode #3077 and kilocode #5219). The thinking guide's
  "Preserving thinking blocks" and its tool-workflow page add: a tool loop is one assistant
  turn with one thinking configuration, and its thinking and redacted_thinking blocks come
  back complete and unmodified (the signature is checked). Those blocks reach this side in
  the assistant message's ``thinking_blocks`` (what ``answer.py`` writes there), are put
  first in their turn, and thinking stays on through a tool loop whose last call has them;
  without them it is dropped there, as before. With thinking off none is sent: they exist to
  keep it on, and a final assistant turn with thinking in it while thinking is off is a 400
  ("When thinking is disabled, an `assistant` message in the final position cannot contain
  `thinking`", forgecode #1853); and an assistant turn holding thinking starts with it ("If
  an assistant message contains any thinking blocks, the first block must be thinking or
  redacted_thinking. Found text.", claude-code #20705), which a turn merged from two chat
  messages may need them moved for;
* on the models that bind thinking to its prefix (``claude_models.binds_thinking``), a replayed
  block is refused once the top-level ``system``, the ``tools`` or a message before it differs
  from when it was produced ("The block is bound to a different conversation", the
  preserved-thinking guide), and this translation writes that prefix itself: a request that
  replays thinking there asks for ``drop_block`` (``apis/messages/binding.py``, which the
  pipeline's beta header follows);
* at most four blocks carry ``cache_control`` ("A maximum of 4 blocks with cache_control may be
  provided. Found 5."; "up to 4 cache breakpoints", the prompt-caching guide), and the
  top-level, automatic one takes one of the four ("When used together, the automatic cache
  breakpoint uses one of the 4 available breakpoint slots", its "Combining with block-level
  caching", quoted in UKGovernmentBEIS/inspect_ai #4505);
* an image is one of four types, and says which its bytes are ("messages.6.content.5.image.source.
  base64.data: Image does not match the provided media type image/png", claude-code #15746), in at
  most 5 MB of base64 ("image exceeds 5 MB maximum: 6275800 bytes > 5242880 bytes", lobehub
  #14711) and 8000 pixels a side, 2000 in a request of more than 20 images (``image_limits``); a
  document is a PDF (base64 or by URL) or plain text, the document block's sources
  (``Base64PDFSource``, ``PlainTextSource``, ``URLPDFSource``: anthropic-sdk-python's
  ``types/document_block_param.py``);
* a conversation may open on an assistant turn: "messages: first message must use the \"user\"
  role" was answered in 2024, and since December 2024 Anthropic takes it where Bedrock still did
  not (anthropic-sdk-typescript #622); the API reference no longer says "The first message must
  always use the `user` role" (``fake/messages_rules.py``);
* a text block must hold more than whitespace ("messages: text content blocks must contain
  non-whitespace text"), a prefilled answer must not end in whitespace ("messages: final
  assistant content cannot end with trailing whitespace"), and so must each stop sequence
  ("stop_sequences: each stop sequence must contain non-whitespace");
* ``metadata.user_id`` must be opaque: an email address in it is a 400 ("user_id appears to
  contain an email address"), and it is at most 256 characters;
* structured outputs want every object schema closed (``additionalProperties: false``,
  "For 'object' type, 'additionalProperties' must be explicitly set to false"), and take a
  subset of JSON Schema: no numerical constraints, no string lengths, no array constraints
  beyond a ``minItems`` of 0 or 1, a ``format`` from a short list (the structured-outputs
  guide's "JSON Schema limitations"; "For 'integer' type, property 'minimum' is not
  supported", agentjido/req_llm #302), no ``oneOf`` ("Schema type 'oneOf' is not supported"),
  and no prefilled answer beside them ("Message Prefilling: Incompatible with JSON outputs", the
  guide's "Feature compatibility"). A tool that is not strict takes any schema: Claude Code
  sends ``minimum``, ``maxItems`` and ``minLength`` in its own tools'.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gateway.apis.messages import binding
from gateway.apis.messages.claude_models import (
    DISABLED,
    FORCED,
    LEAST,
    context_window,
    is_claude,
    takes_forced_tool,
    takes_prefill,
    takes_sampling,
    thinking_for,
    unforced,
)
from gateway.memo import by_name
from gateway.translate import image_size, json_schema, names, thinking_room, typed
from gateway.translate.base import Context, Known, Refusal, Target, call_arguments, held, option_kind
from gateway.translate.chat_messages.answer import ChatStream, chat_completion, function_names
from gateway.translate.image_limits import (
    IMAGE_MAX,
    MANY_IMAGES,
    MANY_SIDE_MAX,
    SIDE_MAX,
    Over,
    Seen,
    most_images,
    plan,
)
from gateway.translate.names import Names
from gateway.translate.tool_ids import to_anthropic_id
from gateway.translate.typed import WrongType

# The chat request's fields that no answer translated back to chat reads.
UNREAD = frozenset({"messages", "tools", "functions"})
# The tools stay for the answer only when it has names to give back (translate/names.py).
UNREAD_NAMED = UNREAD - {"tools"}

# Upper bounds the client's effort asks for; the answer keeps its share of max_tokens
# (``thinking_room``).
EFFORT_BUDGET = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384, "xhigh": 32768}
MIN_BUDGET = 1024
# The same efforts on a model that thinks adaptively: Anthropic's levels start at low, and
# xhigh falls back to high on a model without it.
ADAPTIVE_EFFORT = {"minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "xhigh"}
USER_ID_MAX = 256
CONTINUE = "Continue."  # the user turn a conversation ending on the assistant gets (no prefill)
# What a json_object request's instructions end with: one object, bare, as OpenAI's JSON mode
# gives it (a fenced or prefaced answer fails JSON.parse in the AI SDK's generateObject).
JSON_NOTE = "Answer with one JSON object and nothing else: no text before or after it, no code fence."

# Default max_tokens when the client sets none: the documented maximum output of the model
# family (Anthropic "Models overview"), its oldest member's where members differ, so that the
# default is never above what the model accepts. First match in the upstream model name wins.
# Fable and Mythos from 5 on: 128K ("Context window: 1M tokens · Max output: 128K tokens", the
# Claude Fable 5 model page, https://platform.claude.com/docs/en/models/fable-5/overview, whose
# specifications Mythos 5 shares; "up to 128K output tokens per request" for Fable and Mythos 5.1,
# the migration guide; "128k max output tokens" for 5.2, its "What's new"). Mythos Preview is
# not named there and keeps the fallback. Opus, Sonnet and Haiku from 5 on: 128K too (Opus 5 and
# 5.5, Sonnet 5 and 5.5, Haiku 5.5: "Max output: 128K tokens" on each model page, e.g.
# https://platform.claude.com/docs/en/models/sonnet-5/overview and
# https://platform.claude.com/docs/en/models/haiku-5-5/overview, whose comparison tables list all
# five). Without them Codex or Gemini CLI on claude-sonnet-5-5 got 4096 and answers cut short.
DEFAULT_MAX_TOKENS = (
    ("claude-opus-4", 32000), ("claude-sonnet-4", 64000), ("claude-haiku-4", 64000),
    ("claude-3-7-sonnet", 64000), ("claude-3-5", 8192), ("claude-3", 4096),
    ("claude-fable-5", 128000), ("claude-mythos-5", 128000),
    ("claude-opus-5", 128000), ("claude-sonnet-5", 128000), ("claude-haiku-5", 128000),
)  # fmt: skip
FALLBACK_MAX_TOKENS = 4096
# Anthropic's SDKs refuse a buffered request above this (it risks an HTTP timeout); a default
# never pushes a buffered request past it.
BUFFERED_MAX_TOKENS = 21333
# Anthropic's limit on cache breakpoints in one request (``_latest``).
MAX_BREAKPOINTS = 4

_IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
# A name for JPEG that clients write (Gemini takes it) and Anthropic refuses.
_IMAGE_ALIASES = {"image/jpg": "image/jpeg"}
# The signatures the four types' files start with (PNG's, JPEG's SOI marker, GIF's two versions;
# WebP's RIFF container, checked apart, names it at bytes 8 to 12).
_MAGIC = ((b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"), (b"GIF87a", "image/gif"),
          (b"GIF89a", "image/gif"))  # fmt: skip
# Text a document may be written in besides text/*: Claude reads it as plain text.
_TEXT_TYPES = frozenset({"application/json", "application/xml", "application/yaml", "application/x-yaml"})
_DATA_URL = re.compile(r"^data:([\w.+-]+/[\w.+-]+);base64,(.*)$", re.DOTALL)
# The keywords Anthropic's structured outputs take (the structured-outputs guide's "JSON Schema
# limitations", "Supported features": the types, `enum`, `const`, "`anyOf` and `allOf` (with
# limitations)", `$ref` and `$defs`/`definitions`, `default`, `required`, `additionalProperties`,
# string formats, `minItems` 0 or 1; "Pattern support (regex)"), the annotations the SDKs'
# transform_schema keeps, and what holds the schemas. "If you use an unsupported feature, you'll
# receive a 400 error": every other keyword is moved into the description, as transform_schema
# moves it (the numerical and string constraints Anthropic names, `not`, `if`, `prefixItems`,
# `patternProperties`, OpenAPI's `discriminator`...). `oneOf` is rewritten before (`_any_of`).
SUPPORTED = frozenset({"type", "enum", "const", "anyOf", "allOf", "$ref", "$defs", "definitions", "default",
                       "required", "additionalProperties", "properties", "items", "minItems", "format",
                       "pattern", "description", "title"})  # fmt: skip
FORMATS = frozenset({"date-time", "time", "date", "duration", "email", "hostname", "uri", "ipv4", "ipv6",
                     "uuid"})  # fmt: skip


class _Refused(Exception):
    def __init__(self, message: str) -> None:
        self.message = message


class ChatToMessages:
    client = "chat"
    upstream = "messages"

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock

    def request(self, payload: Mapping[str, Any], target: Target) -> dict[str, Any] | Refusal:
        try:
            return _request(payload, target)
        except _Refused as r:
            return Refusal(r.message)
        except WrongType as e:
            return typed.refusal(e, "chat")

    def dropped(self, payload: Mapping[str, Any]) -> tuple[str, ...]:
        return ()  # its table's drops are said there, not per request

    def answer(self, doc: Mapping[str, Any], ctx: Context) -> dict[str, Any]:
        return chat_completion(doc, ctx, int(self._clock()))

    def stream(self, ctx: Context, known: Known | None = None) -> ChatStream:
        return ChatStream(ctx, int(self._clock()), known)

    def held(self, ctx: Context) -> Context:
        # Its answers read ``stream_options``, and the tools when names were mapped.
        return held(ctx, UNREAD_NAMED if function_names(ctx.request.get("tools")).mapped else UNREAD)


def _request(p: Mapping[str, Any], target: Target) -> dict[str, Any]:
    _refuse_uncarried(p)
    most = most_images(context_window(target.model) or target.context_window)
    functions = function_names(p.get("tools"))
    system, messages = _conversation(typed.objects(p.get("messages"), ("messages",)), most, functions)
    if not messages:
        # Empty messages vanish in translation (Anthropic refuses an empty text block); with
        # nothing left, Anthropic refuses the request ("messages: at least one message is
        # required"), so it is refused here, before any call, in words that say why.
        raise _Refused("the conversation has no content to send: an Anthropic upstream needs at least one "
                       "message with text, an image or a tool call or result")  # fmt: skip
    _trim_prefill(messages)
    fmt = _response_format(p.get("response_format"))
    if _kind(p.get("response_format")) == "json_object":
        # Anthropic has no JSON mode without a schema (output_config.format's one type is
        # json_schema, and its objects must be closed: "For 'object' type,
        # 'additionalProperties' must be explicitly set to false", so an open object cannot be
        # asked). The AI SDK's generateObject on createOpenAICompatible sends json_object and
        # no word of JSON, and Claude answered in prose: the shape is asked in words, last in
        # the instructions, as chat_gemini asks for it beside tools.
        system.append({"type": "text", "text": JSON_NOTE})
    schema_bars_prefill = fmt is not None and is_claude(target.model)
    if messages[-1]["role"] == "assistant" and (schema_bars_prefill or not takes_prefill(target.model)):
        # A chat conversation may end on the assistant (OpenAI answers with the next turn);
        # Claude 4.6 and later refuse that as a prefill, and every Claude refuses a prefill
        # beside a schema ("Message Prefilling: Incompatible with JSON outputs", the
        # structured-outputs guide): asked to go on instead. A model behind a compatible
        # server keeps its prefill (nothing documents the rule for it).
        messages.append({"role": "user", "content": [{"type": "text", "text": CONTINUE}]})
    out: dict[str, Any] = {"model": target.model}
    if system:
        out["system"] = system
    out["messages"] = messages
    stream = p.get("stream") is True
    if stream:
        out["stream"] = True
    newer, older = _int(p, "max_completion_tokens"), _int(p, "max_tokens")
    max_tokens = newer or older
    out["max_tokens"] = max_tokens or default_max_tokens(target.model, stream)
    tools, choice = _tools(p, functions)
    if not tools and any(b["type"] == "tool_use" for t in messages for b in t["content"]):
        tools, choice = _called_before(messages), {"type": "none"}
    if choice is not None and choice["type"] in FORCED and not takes_forced_tool(target.model):
        # Fable and Mythos 5.1, Opus and Sonnet 5.5 refuse a forced call on every request.
        tools, choice = unforced(tools, choice)
    if tools:
        out["tools"] = tools
        if choice is not None:
            out["tool_choice"] = choice
    stops = typed.strings(p.get("stop"), ("stop",), one=True)
    # A blank stop sequence ("\n", common with completion-style clients) is a 400 from
    # Anthropic; it is dropped, and the answer then runs on past where it would have stopped.
    stops = [s for s in stops if s.strip()]
    if stops:
        out["stop_sequences"] = stops
    _sampling(p, out)
    output_config: dict[str, Any] = {}
    thinking, effort = _thinking(p, out, messages, choice)
    if effort is not None:
        output_config["effort"] = effort
    if thinking is None or thinking["type"] == "disabled":
        if thinking is not None:
            out["thinking"] = thinking
        _unthought(messages)
    else:
        out["thinking"] = thinking
        out.pop("temperature", None)  # thinking accepts only the default temperature
        out.pop("top_k", None)  # nor a changed top_k
        if out.get("top_p", 1) < 0.95:
            out.pop("top_p")
    if "user" in p or "safety_identifier" in p:
        user, safety = typed.top(p, "user", typed.text), typed.top(p, "safety_identifier", typed.text)
        user = user or safety
        if user:
            out["metadata"] = {"user_id": _opaque_user(user)}
    if fmt is not None:
        output_config["format"] = fmt
    if output_config:
        out["output_config"] = output_config
    marked = _breakpoints(out)
    _ttl_in_order(_latest(marked))
    if not marked:
        # OpenAI caches every long prompt by itself; Anthropic only where asked. Asked at the
        # top level, it puts the breakpoint on the last block and moves it on as the
        # conversation grows ("automatic caching", Anthropic's prompt-caching guide), so an
        # agent on a translated Claude reads its history at a tenth of the input price
        # instead of paying all of it every turn. A client's own breakpoints are left alone:
        # beside them it would take one of their four places.
        out["cache_control"] = {"type": "ephemeral"}
    # Written by the gateway, the prefix a replayed thinking block is bound to may differ from
    # the one it was produced under (narrowed tools, a system message moved up): dropped, not
    # refused, on the models that check it.
    return binding.translated(out)


def _breakpoints(out: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The blocks the client placed a cache breakpoint on (carried from its content parts), in
    the order Anthropic reads them: tools, system, messages, a tool result's own text blocks
    right after it."""
    system = out.get("system")
    blocks: list[dict[str, Any]] = [*out.get("tools", ()), *(system if isinstance(system, list) else [])]
    for turn in out["messages"]:
        for block in turn["content"]:
            blocks.append(block)
            inner = block.get("content") if block["type"] == "tool_result" else None
            if isinstance(inner, list):
                blocks += inner
    return [b for b in blocks if isinstance(b.get("cache_control"), dict)]


def _latest(marked: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The last ``MAX_BREAKPOINTS`` of the ``marked`` blocks, the earlier ones' markers removed:
    Anthropic refuses a fifth ("A maximum of 4 blocks with cache_control may be provided. Found
    5."), which a client that marks each system part and its newest user parts sends, the more
    so as this translation gathers every system message into one ``system``. The latest
    breakpoints are the ones a growing conversation reads most of from the cache; the prefix
    before a dropped one is still read through a later one."""
    for block in marked[:-MAX_BREAKPOINTS]:
        del block["cache_control"]
    return marked[-MAX_BREAKPOINTS:]


def _ttl_in_order(marked: list[dict[str, Any]]) -> None:
    """A one-hour breakpoint after a five-minute one (in Anthropic's order: tools, system,
    messages) becomes a five-minute one: Anthropic refuses the request otherwise, and the
    system text this translation moves ahead of the conversation can put a client's markers in
    that order. The block is still cached, for the shorter time."""
    short = False
    for block in marked:
        marker = block["cache_control"]
        if marker.get("ttl", "5m") == "5m":
            short = True
        elif marker.get("ttl") == "1h" and short:
            block["cache_control"] = {**marker, "ttl": "5m"}


def _opaque_user(user: str) -> str:
    """The user as Anthropic takes it: an email address or an over-long id becomes its
    SHA-256, which tells users apart as well and names no one."""
    if "@" in user or len(user) > USER_ID_MAX:
        return hashlib.sha256(user.encode()).hexdigest()
    return user


def _trim_prefill(turns: list[dict[str, Any]]) -> None:
    """A prefilled answer (the conversation ends on the assistant) loses its trailing
    whitespace, which Anthropic refuses there; a prefill that was only whitespace goes."""
    last = turns[-1]
    if last["role"] != "assistant" or last["content"][-1]["type"] != "text":
        return
    block = last["content"][-1]
    block["text"] = block["text"].rstrip()
    if block["text"]:
        return
    last["content"].pop()
    if not last["content"]:
        turns.pop()


def default_max_tokens(model: str, stream: bool) -> int:
    found = _family_max_tokens(model)
    return found if stream else min(found, BUFFERED_MAX_TOKENS)


@by_name
def _family_max_tokens(model: str) -> int:
    return next((n for family, n in DEFAULT_MAX_TOKENS if family in model), FALLBACK_MAX_TOKENS)


# The chat fields an Anthropic upstream has no place for (``_refuse_uncarried``).
_UNCARRIED = frozenset({"n", "logprobs", "top_logprobs", "audio", "modalities", "functions", "function_call"})
# The fields ``_tools`` reads: a request with none of them declares no tool.
_TOOL_FIELDS = frozenset({"tools", "tool_choice", "parallel_tool_calls"})


def _refuse_uncarried(p: Mapping[str, Any]) -> None:
    if _UNCARRIED.isdisjoint(p):
        return  # most requests carry none of them: one pass in C, not a read of each (#38)
    n = typed.top(p, "n", typed.integer)
    if n is not None and n > 1:
        raise _Refused("'n' > 1 cannot be sent to an Anthropic upstream: it gives one answer per request")
    if typed.top(p, "logprobs", typed.flag) or typed.top(p, "top_logprobs", typed.integer):
        raise _Refused("'logprobs' cannot be sent to an Anthropic upstream: it has no token probabilities")
    if typed.top(p, "audio", typed.obj) or "audio" in typed.top(p, "modalities", typed.items):
        raise _Refused("audio output cannot be sent to an Anthropic upstream")
    if p.get("functions") or p.get("function_call"):
        raise _Refused(
            "legacy 'functions' / 'function_call' are not translated: send 'tools' / 'tool_choice'"
        )


def _conversation(
    items: list[dict[str, Any]], most: int, functions: Names
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The top-level system blocks, and the turns with one role each, tool results first;
    ``most``: the images the model takes in a request (``image_limits.most_images``)."""
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    asked = asked_from(items, lambda m: m.get("role") == "assistant")
    over = _image_plan(items, asked, most)
    # The ids the last turn's results answer, and whether one came twice: only then is there
    # anything to fold (#38: the fold cost ~35 µs on a 200-turn history that never needs it).
    answered: set[str] = set()
    repeated = False
    for i, m in enumerate(items):
        role = typed.text(m.get("role"), ("messages", i, "role"))
        call = None  # the call a tool message answers
        if role in ("system", "developer"):
            # Wherever it stands: Messages has no system turn; it stays an instruction.
            system += _text_blocks(m.get("content"), i)
            continue
        if role == "user":
            role, blocks = "user", _user_blocks(m.get("content"), i, i >= asked, over)
        elif role == "assistant":
            blocks = _assistant_blocks(m, i, functions)
        elif role == "tool":
            result = _tool_result(m, i)
            role, blocks, call = "user", [result], result["tool_use_id"]
        else:
            raise _Refused(f"messages[{i}]: role {role!r} cannot be sent to an Anthropic upstream")
        if not blocks:
            continue  # an empty turn carries nothing, and Anthropic refuses empty content
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += blocks
        else:
            turns.append({"role": role, "content": blocks})
            if answered:
                answered = set()
        if call is not None:
            repeated = repeated or call in answered
            answered.add(call)
    _distinct_calls(turns)
    if repeated:
        _one_result_per_call(turns)
    for turn in turns:
        if turn["role"] == "user":
            # Anthropic wants a turn's tool results before any text in it.
            turn["content"].sort(key=lambda b: b.get("type") != "tool_result")
        elif turn["content"][0]["type"] not in _THOUGHT and any(b["type"] in _THOUGHT
                                                                for b in turn["content"]):
            # Only then: thinking interleaved with calls in a turn that starts with it is
            # how Anthropic gave it, and stays in that order.
            turn["content"].sort(key=lambda b: b["type"] not in _THOUGHT)
    return system, turns


def _distinct_calls(turns: list[dict[str, Any]]) -> None:
    """The calls of one assistant turn under distinct ids, their results with them: chat takes
    two calls with one id (servers that give none send ``""`` for each, and their results
    answer by order), Anthropic refuses it ("`tool_use` ids must be unique"). The second call
    with an id becomes ``<id>_2`` (the next free suffix), the second result for that id answers
    it; the same conversation always gets the same ids."""
    for k, turn in enumerate(turns):
        calls = [b for b in turn["content"] if b["type"] == "tool_use"] if turn["role"] == "assistant" else []
        taken = {b["id"] for b in calls}
        if len(taken) == len(calls):
            continue
        given: dict[str, list[str]] = {}
        for b in calls:
            ids = given.setdefault(b["id"], [])
            if ids:
                n = len(ids) + 1
                while f"{b['id']}_{n}" in taken:
                    n += 1
                b["id"] = f"{b['id']}_{n}"
                taken.add(b["id"])
            ids.append(b["id"])
        answer = turns[k + 1]["content"] if k + 1 < len(turns) and turns[k + 1]["role"] == "user" else []
        queues = {first: iter(ids) for first, ids in given.items() if len(ids) > 1}
        for b in answer:
            if b["type"] == "tool_result" and b["tool_use_id"] in queues:
                b["tool_use_id"] = next(queues[b["tool_use_id"]], b["tool_use_id"])


def _one_result_per_call(turns: list[dict[str, Any]]) -> None:
    """A turn's later results for a call folded into its first, their blocks in order. Chat
    takes two ``tool`` messages for one ``tool_call_id``, Anthropic refuses two results for one
    call ("each tool_use must have a single result"), and Codex's code mode sends a script's
    output and each ``notify()`` it made as outputs of one call: all of them are what the call
    returned. Run after ``_distinct_calls``, which gives a repeated call's result its own id."""
    for turn in turns:
        if turn["role"] != "user":
            continue
        first: dict[str, dict[str, Any]] = {}
        kept = []
        for b in turn["content"]:
            held = first.get(b["tool_use_id"]) if b["type"] == "tool_result" else None
            if held is None:
                if b["type"] == "tool_result":
                    first[b["tool_use_id"]] = b
                kept.append(b)
                continue
            said = [x for x in (*_as_blocks(held["content"]), *_as_blocks(b["content"]))
                    if x != _NOTHING]  # fmt: skip
            held["content"] = said or NO_OUTPUT
        turn["content"] = kept


def _as_blocks(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def _text_blocks(content: Any, i: int) -> list[dict[str, Any]]:
    """The text of a message that Anthropic takes as text only (system, assistant, tool)."""
    content = typed.content(content, ("messages", i, "content"))
    # Whitespace-only text is dropped as empty text is: Anthropic refuses both, and a model
    # loses nothing by it ("\n\n" before a tool call is how many chat models answer).
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content.strip() else []
    blocks = []
    for j, part in enumerate(content or ()):
        kind = typed.text(part.get("type"), ("messages", i, "content", j, "type"))
        if kind not in ("text", "refusal"):
            raise _Refused(f"messages[{i}]: only text parts can be carried here")
        blocks += _text_block(part, kind, ("messages", i, "content", j))
    return blocks


def _text_block(part: dict[str, Any], kind: str, at: typed.Path) -> list[dict[str, Any]]:
    """A text (or refusal) part as a text block; none when blank."""
    text = typed.text(part.get(kind), (*at, kind))
    if not text or not text.strip():
        return []
    block: dict[str, Any] = {"type": "text", "text": text}
    if isinstance(part.get("cache_control"), dict):
        # Anthropic's own marker, which clients that know Claude add to chat parts.
        block["cache_control"] = part["cache_control"]
    return [block]


def _image_plan(items: list[dict[str, Any]], asked: int, most: int) -> dict[tuple[int, int], Over]:
    """The image parts of a chat conversation that cannot go as they are, by (message, part):
    every image part becomes an Anthropic image (a tool message carries text only); ``asked``:
    the first message of what the client asks about now."""
    seen: dict[tuple[int, int], Seen] = {}
    for i, m in enumerate(items):
        content = m.get("content")
        if m.get("role") != "user" or not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if isinstance(part, dict) and part.get("type") == "image_url":
                spec = part.get("image_url")
                seen[i, j] = image_seen(spec.get("url") if isinstance(spec, dict) else spec, i >= asked)
    return plan(seen, most)


def _user_blocks(
    content: Any, i: int, asked: bool, over: Mapping[tuple[int, int], Over]
) -> list[dict[str, Any]]:
    """``asked``: the message is part of what the client asks about now (after the last answer);
    ``over``: the images that cannot go as they are (``_image_plan``)."""
    content = typed.content(content, ("messages", i, "content"))
    if isinstance(content, str) or content is None:
        return _text_blocks(content, i)
    blocks: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        kind = typed.text(part.get("type"), ("messages", i, "content", j, "type"))
        where = f"messages[{i}].content[{j}]"
        if kind == "text":
            blocks += _text_block(part, kind, ("messages", i, "content", j))
        elif kind == "image_url":
            blocks.append(_image(part.get("image_url"), where, asked, over.get((i, j))))
        elif kind == "file":
            blocks.append(_document(part.get("file"), where))
        else:
            raise _Refused(f"{where}: a {kind!r} part cannot be sent to an Anthropic upstream")
    return blocks


def _image(spec: Any, where: str, asked: bool, over: Over | None) -> dict[str, Any]:
    url = spec.get("url") if isinstance(spec, dict) else spec
    if not isinstance(url, str):
        raise _Refused(f"{where}: image_url needs a url")
    found = _DATA_URL.match(url)
    if found:
        said, data = found.groups()
        media_type = image_type(said, data)
        if media_type not in _IMAGE_TYPES:
            raise _Refused(f"{where}: {unread_image_words(media_type)}")
        if over is not None:
            # The gateway cannot make it smaller. Asked about now, the client hears why before any
            # call; earlier in the conversation, refusing would fail every later turn of a session
            # that keeps it in its history (claude-code #12167), so the model is told instead.
            if asked:
                raise _Refused(f"{where}: {over_words(over)}")
            return {"type": "text", "text": _note(over, media_type)}
        return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
    if url.startswith(("http://", "https://")):
        if over is not None and over.count and not asked:  # counted as Anthropic counts it
            return {"type": "text", "text": _note(over, "by URL")}
        return {"type": "image", "source": {"type": "url", "url": url}}
    raise _Refused(f"{where}: an image must be a base64 data URL or an http(s) URL")


def image_type(said: str, data: str) -> str:
    """The type an image goes to Anthropic as: what its bytes start as, when they are one of the
    four it reads, whatever the client said (Anthropic refuses a PNG sent as JPEG, where OpenAI
    reads it); else the type the client said, JPEG's alias written as Anthropic spells it."""
    return sniffed_image(data) or _IMAGE_ALIASES.get(said, said)


def sniffed_image(data: str) -> str | None:
    """Which of Anthropic's four image types the base64 ``data`` starts as, or None."""
    head = "".join(data[:32].split())[:16]
    try:
        raw = base64.b64decode(head + "=" * (-len(head) % 4))
    except ValueError:
        return None
    found = next((kind for magic, kind in _MAGIC if raw.startswith(magic)), None)
    return found or ("image/webp" if raw[:4] == b"RIFF" and raw[8:12] == b"WEBP" else None)


def unread_image(url: str) -> str | None:
    """The type of an image given as a base64 data URL that Anthropic does not read, or None.
    (For a client translated on through chat, whose refusal then names the client's field.)"""
    found = _DATA_URL.match(url)
    media_type = image_type(*found.groups()) if found else None
    return media_type if media_type is not None and media_type not in _IMAGE_TYPES else None


def unread_image_words(media_type: str) -> str:
    return f"image type {media_type} is not jpeg, png, gif or webp (Anthropic's)"


def asked_from(items: Iterable[Any], said: Callable[[Any], bool]) -> int:
    """The index of the first item after the last the model ``said``: what follows it is what
    the client asks about now, where an image too large is refused rather than noted (a
    session keeping it in its history would fail on every later turn). One mark for every
    API's conversation: chat's messages, Responses' input items, Gemini's contents."""
    return 1 + max((i for i, item in enumerate(items) if said(item)), default=-1)


def image_seen(url: Any, asked: bool) -> Seen:
    """An image part's url as ``image_limits`` reads it: a base64 data URL's length and the sides
    its header states; a URL Anthropic fetches is counted, and judged there."""
    found = _DATA_URL.match(url) if isinstance(url, str) else None
    if found is None:
        return Seen(0, None, asked)
    data = found.group(2)
    return Seen(len(data), image_size.dimensions(data) if len(data) <= IMAGE_MAX else None, asked)


def over_words(over: Over) -> str:
    """Why an image asked about now is refused (``image_limits.plan``)."""
    if over.sides is None:
        return (f"the image is {over.chars:,} bytes of base64, over the 5 MB ({IMAGE_MAX:,} bytes) Anthropic "
                "takes per image, and the gateway cannot make it smaller: resize it and send it again")
    width, height = over.sides
    return (f"the image is {width}x{height} pixels, over the {_side_limit(over.many):,} pixels a side "
            f"Anthropic takes{_per_request(over.many)}, and the gateway cannot make it smaller: resize it "
            "and send it again")  # fmt: skip


def _note(over: Over, media_type: str) -> str:
    """What the model reads where an earlier image was."""
    if over.count:
        return (f"[image ({media_type}) left out: the conversation holds more than the {over.most} images "
                "Anthropic takes in a request, and the oldest go first]")
    if over.sides is None:
        return (f"[image ({media_type}) left out: its {over.chars:,} bytes of base64 are over the 5 MB "
                f"({IMAGE_MAX:,} bytes) Anthropic takes per image]")
    width, height = over.sides
    return (f"[image ({media_type}) left out: its {width}x{height} pixels are over the "
            f"{_side_limit(over.many):,} a side Anthropic takes{_per_request(over.many)}]")  # fmt: skip


def _side_limit(many: bool) -> int:
    return MANY_SIDE_MAX if many else SIDE_MAX


def _per_request(many: bool) -> str:
    return f" in a request of more than {MANY_IMAGES} images" if many else ""


def _document(spec: Any, where: str) -> dict[str, Any]:
    source = _document_source(spec)
    if isinstance(source, str):
        raise _Refused(f"{where}: {source}")
    return {"type": "document", "source": source}


def unread_document(spec: Mapping[str, Any]) -> str | None:
    """Why a chat ``file`` (its ``file_data``, ``file_url``, ``file_id``) cannot go to Anthropic as
    a document, or None. (For a client translated on through chat, whose refusal then names the
    client's field.)"""
    source = _document_source(spec)
    return source if isinstance(source, str) else None


def reads_as_text(media_type: str) -> bool:
    """A document of this type goes to Anthropic as plain text."""
    return media_type.startswith("text/") or media_type in _TEXT_TYPES


def _document_source(spec: Any) -> dict[str, Any] | str:
    """The source of Anthropic's document block for a chat ``file``, or the words why there is
    none. Anthropic reads a PDF, in base64 or by its URL, and plain text (anthropic-sdk-python's
    ``types/document_block_param.py``: ``Base64PDFSourceParam``, ``PlainTextSourceParam``,
    ``URLPDFSourceParam``). A text file of any text type is plain text to it: ``data`` is then
    the text itself. ``file_url`` is no chat field: it is how a Responses ``input_file`` by URL
    (``responses_chat``) reaches this translator."""
    spec = spec if isinstance(spec, dict) else {}
    data, url = spec.get("file_data"), spec.get("file_url")
    if isinstance(data, str) and data:
        found = _DATA_URL.match(data)
        if found is None:
            return "file_data must be a base64 data URL (data:<type>;base64,...) to name the document's type"
        media_type, encoded = found.groups()
        if media_type == "application/pdf":
            return {"type": "base64", "media_type": media_type, "data": encoded}
        if not reads_as_text(media_type):
            return (f"a document of type {media_type} cannot be read by an Anthropic upstream, which reads "
                    "PDF and plain text: send its text as a text part")  # fmt: skip
        try:
            raw = base64.b64decode(encoded)
        except ValueError:
            return f"file_data of type {media_type} is not valid base64"
        # Text in another encoding than UTF-8 is still mostly readable; its odd bytes show as such.
        return {"type": "text", "media_type": "text/plain", "data": raw.decode("utf-8", errors="replace")}
    if isinstance(url, str) and url.startswith(("http://", "https://")):
        return {"type": "url", "url": url}
    if spec.get("file_id"):
        return ("a file given by file_id (a file id of OpenAI's file store) cannot be read by an Anthropic "
                "upstream: send the document as file_data (a base64 data URL)")  # fmt: skip
    return "a file part needs file_data (a base64 data URL) for an Anthropic upstream"


_THOUGHT = ("thinking", "redacted_thinking")


def _signed(m: Mapping[str, Any], i: int) -> list[dict[str, Any]]:
    """The signed thinking blocks ``thinking_blocks`` carries, as Anthropic issued them (only
    the fields it sent: it refuses others, and any change breaks the signature); an entry
    that cannot be one (unsigned, unknown type) is left out."""
    out: list[dict[str, Any]] = []
    for j, b in enumerate(typed.objects(m.get("thinking_blocks"), ("messages", i, "thinking_blocks"))):
        kind = b.get("type")
        if kind == "thinking" and isinstance(b.get("signature"), str) and b["signature"]:
            thinking = b.get("thinking")
            if not isinstance(thinking, str):
                raise typed.wrong(thinking, ("messages", i, "thinking_blocks", j, "thinking"), "string")
            out.append({"type": "thinking", "thinking": thinking, "signature": b["signature"]})
        elif kind == "redacted_thinking" and isinstance(b.get("data"), str) and b["data"]:
            out.append({"type": "redacted_thinking", "data": b["data"]})
    return out


def _unthought(turns: list[dict[str, Any]]) -> None:
    for turn in turns:
        if turn["role"] == "assistant":
            turn["content"] = [b for b in turn["content"] if b["type"] not in _THOUGHT]


def _assistant_blocks(m: Mapping[str, Any], i: int, functions: Names) -> list[dict[str, Any]]:
    # reasoning_content is not sent back: Anthropic accepts only signed thinking blocks,
    # which come in thinking_blocks.
    blocks = _text_blocks(m.get("content"), i)
    for j, call in enumerate(typed.objects(m.get("tool_calls"), ("messages", i, "tool_calls"))):
        where = f"messages[{i}].tool_calls[{j}]"
        fn = typed.obj(call.get("function"), ("messages", i, "tool_calls", j, "function"))
        if call.get("type", "function") != "function" or fn is None:
            raise _Refused(f"{where}: only function tool calls can be carried")
        arguments = fn.get("arguments") or "{}"
        if not isinstance(arguments, str | dict):
            raise _Refused(f"{where}: function.arguments must be a JSON object for an Anthropic upstream")
        args = call_arguments(arguments) if isinstance(arguments, str) else arguments
        call_id = typed.text(call.get("id"), ("messages", i, "tool_calls", j, "id")) or ""
        name = typed.text(fn.get("name"), ("messages", i, "tool_calls", j, "function", "name")) or ""
        name = names.sent(functions, name, names.MESSAGES) if name else ""
        blocks.append({"type": "tool_use", "id": to_anthropic_id(call_id), "name": name, "input": args})
    # Thinking alone makes no turn: the turn it came with had its text or calls.
    return _signed(m, i) + blocks if blocks else []


NO_OUTPUT = "(no output)"
_NOTHING = {"type": "text", "text": NO_OUTPUT}  # a blank output's stand-in, dropped beside a real one


def _tool_result(m: Mapping[str, Any], i: int) -> dict[str, Any]:
    content = m.get("content")
    call_id = to_anthropic_id(typed.text(m.get("tool_call_id"), ("messages", i, "tool_call_id")) or "")
    # A result that is empty or only whitespace (a shell command that printed a newline) is
    # refused by Anthropic, and, kept in the history, again every turn after: whitespace as
    # a blank text block is ("text content blocks must contain non-whitespace text",
    # NousResearch/hermes-agent#97641), an empty string as a tool_use left unanswered
    # (zed-industries/zed#27130, whose fix, like opencode's own results, says so in words).
    if isinstance(content, str):
        result: str | list[dict[str, Any]] = content if content.strip() else NO_OUTPUT
    else:
        result = _text_blocks(content, i) or NO_OUTPUT
    return {"type": "tool_result", "tool_use_id": call_id, "content": result}


def _tools(p: Mapping[str, Any], functions: Names) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    if _TOOL_FIELDS.isdisjoint(p):
        return [], None
    listed_tools = typed.objects(p.get("tools"), ("tools",))
    tools = _once([_tool(tool, j, functions) for j, tool in enumerate(listed_tools)])
    choice = p.get("tool_choice")
    kind = typed.text(choice.get("type"), ("tool_choice", "type")) if isinstance(choice, dict) else None
    mapped: dict[str, Any] | None
    if choice is None or choice == "auto":
        mapped = None if choice is None else {"type": "auto"}
    elif choice == "none":
        mapped = {"type": "none"}
    elif choice == "required":
        mapped = {"type": "any"}
    elif not isinstance(choice, str | dict):
        raise typed.wrong(choice, ("tool_choice",), "string", "object")
    elif isinstance(choice, dict) and kind == "function":
        mapped = {"type": "tool", "name": functions.upstream(_chosen(choice, ("tool_choice",)) or "")}
    elif isinstance(choice, dict) and kind == "allowed_tools":
        allowed = typed.obj(choice.get("allowed_tools"), ("tool_choice", "allowed_tools")) or {}
        listed = typed.objects(allowed.get("tools"), ("tool_choice", "allowed_tools", "tools"))
        allowed_names = {functions.upstream(_chosen(t, ("tool_choice", "allowed_tools", "tools", k)) or "")
                         for k, t in enumerate(listed)}  # fmt: skip
        tools = [t for t in tools if t["name"] in allowed_names]
        mapped = {"type": "any" if allowed.get("mode") == "required" else "auto"}
    else:
        raise _Refused(f"tool_choice of type {option_kind(choice)} cannot be sent to an Anthropic upstream")
    if typed.flag(p.get("parallel_tool_calls"), ("parallel_tool_calls",)) is False and (
        mapped is None or mapped["type"] != "none"
    ):
        mapped = {**(mapped or {"type": "auto"}), "disable_parallel_tool_use": True}
    return tools, mapped


def _once(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each name's first tool. OpenAI takes two tools of one name (an MCP server's beside the
    agent's own: the same agent works on OpenAI's models, theia #16122, LibreChat #13162);
    Anthropic refuses the request ("tools: Tool names must be unique.", claude-code #10687).
    The model calls a tool by its name, so the client could run only one of them for it."""
    kept: dict[str, dict[str, Any]] = {}
    for tool in tools:
        kept.setdefault(tool["name"], tool)
    return list(kept.values())


def _tool(tool: dict[str, Any], j: int, functions: Names) -> dict[str, Any]:
    fn = typed.obj(tool.get("function"), ("tools", j, "function"))
    if tool.get("type") != "function" or fn is None:
        raise _Refused(f"tools[{j}]: only function tools can be sent to an Anthropic upstream")
    name = typed.text(fn.get("name"), ("tools", j, "function", "name")) or ""
    out: dict[str, Any] = {"name": functions.upstream(name)}
    description = typed.text(fn.get("description"), ("tools", j, "function", "description"))
    if description:
        out["description"] = description
    parameters = typed.obj(fn.get("parameters"), ("tools", j, "function", "parameters"))
    if parameters and "type" not in parameters:
        # JSON Schema lets an object schema leave its type unsaid; Anthropic requires it.
        parameters = {"type": "object", **parameters}
    out["input_schema"] = parameters or {"type": "object", "properties": {}}
    return out


def _chosen(choice: dict[str, Any], at: typed.Path) -> str | None:
    """The function name a tool choice (or an allowed tool) gives."""
    fn = typed.obj(choice.get("function"), (*at, "function")) or {}
    return typed.text(fn.get("name"), (*at, "function", "name"))


def _called_before(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tools for the names the conversation called, none of them callable now: Anthropic
    refuses tool blocks in a request that declares no tools ("Requests which include
    `tool_use` or `tool_result` blocks must define tools."), which is what an agent's summary
    request is (Codex's compaction sends ``tools: []``). Sent with ``tool_choice: none``,
    the client's own word that no tool may be called; the rounds stay structured, where
    flattened into text they teach the model to write calls as text."""
    names = dict.fromkeys(b["name"] for t in turns for b in t["content"] if b["type"] == "tool_use")
    return [{"name": name, "description": "Called earlier in this conversation; not offered now.",
             "input_schema": {"type": "object", "properties": {}}} for name in names]  # fmt: skip


def _sampling(p: Mapping[str, Any], out: dict[str, Any]) -> None:
    temperature = typed.number(p.get("temperature"), ("temperature",))
    top_p = typed.number(p.get("top_p"), ("top_p",))
    top_k = typed.integer(p.get("top_k"), ("top_k",))
    if not takes_sampling(out["model"]):
        return  # removed from Opus 4.7 on, Fable and Mythos: each is a 400 (claude_models.py)
    if temperature is not None:
        out["temperature"] = min(max(float(temperature), 0.0), 1.0)  # OpenAI's 0–2 onto Anthropic's 0–1
    elif top_p is not None:
        out["top_p"] = top_p  # only without temperature: newer models refuse the pair
    if top_k is not None:
        out["top_k"] = top_k


def _thinking(
    p: Mapping[str, Any], out: Mapping[str, Any], turns: list[dict[str, Any]], choice: dict[str, Any] | None
) -> tuple[dict[str, Any] | None, str | None]:
    """The ``thinking`` to send (None: no thinking) and the ``output_config.effort``."""
    effort = typed.text(p.get("reasoning_effort"), ("reasoning_effort",))
    model = thinking_for(out["model"])
    # Opus 5 and Sonnet 5 think on a request without ``thinking`` (``claude_models``): where
    # thinking must stay off they are told so, whatever the client asked.
    off = {"type": "disabled"} if model.off == DISABLED else None
    held = _thinking_held(turns, choice)
    unasked = None if held else _unasked(model.off, turns)
    if effort is None:
        return (off if held else unasked), None
    if effort == "none":
        # A model that thinks unasked is told not to, one that always thinks gets the least
        # effort (``claude_models``: Opus 5 thinks by default, Opus 5.5 refuses "disabled").
        return (off or unasked), (LEAST if model.off == LEAST else None)
    if effort not in EFFORT_BUDGET:
        raise _Refused(f"reasoning_effort {effort!r} is not one of none, {', '.join(EFFORT_BUDGET)}")
    # Effort "doesn't require thinking to be enabled" (platform.claude.com/docs/en/build-with-claude/
    # effort): where thinking is left out below, a model that takes it still gets the client's.
    level = ADAPTIVE_EFFORT[effort] if model.efforts else None
    if level is not None and level not in model.efforts:
        level = "high"
    if held:
        if off is not None and level in ("xhigh", "max"):
            level = "high"  # "disabled" is taken at effort high or lower (the Opus 5 migration guide)
        return off, level
    if not model.thinks:
        return None, None  # Claude 3 and 3.5 refuse any ("... does not support thinking."): answered without
    if model.adaptive:
        return {"type": "adaptive"}, level
    named = typed.integer(p.get(thinking_room.NAMED), (thinking_room.NAMED,))
    if named is not None and named > 0:
        budget = thinking_room.anthropic_named(named, out["max_tokens"])
    else:  # the answer keeps its share of max_tokens (thinking_room.py)
        budget = thinking_room.anthropic_budget(EFFORT_BUDGET[effort], out["max_tokens"])
    if budget is None:
        return None, level  # max_tokens leaves no room for Anthropic's minimum budget beside an answer
    return {"type": "enabled", "budget_tokens": budget}, level  # Opus 4.5 takes an effort beside it


def _unasked(off: str, turns: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The thinking a model that thinks unasked does anyway (Opus and Sonnet 5 on, Fable and
    Mythos: adaptive, "on Claude Opus 5, the same requests run with adaptive thinking", its
    migration guide), said where the conversation replays signed thinking. Left out, those
    blocks were dropped as for a model that thinks only when asked, and the tool loop's turn
    went without the thinking Anthropic wants first in it ("Expected `thinking` or
    `redacted_thinking`, but found `tool_use`"); said, the replay also gets ``drop_block`` on a
    model that binds it (``binding.translated``). Nothing replayed: left out, as before."""
    if off not in (DISABLED, LEAST):
        return None
    replays = any(b["type"] in _THOUGHT for t in turns if t["role"] == "assistant" for b in t["content"])
    return {"type": "adaptive"} if replays else None


def _thinking_held(turns: list[dict[str, Any]], choice: dict[str, Any] | None) -> bool:
    """Whether thinking must stay off for this request, whatever was asked."""
    if choice is not None and choice["type"] in FORCED:
        return True  # Anthropic refuses thinking with a forced tool; the forced call is kept
    if turns and turns[-1]["role"] == "assistant":
        return True  # a prefilled answer: Anthropic refuses prefill with thinking
    last = next((t for t in reversed(turns) if t["role"] == "assistant"), None)
    # Mid tool loop without that turn's signed thinking, which Anthropic requires first in it.
    return (last is not None and any(b["type"] == "tool_use" for b in last["content"])
            and last["content"][0]["type"] not in _THOUGHT)  # fmt: skip


def _kind(fmt: Any) -> str | None:
    fmt = typed.obj(fmt, ("response_format",))
    return typed.text(fmt.get("type"), ("response_format", "type")) if fmt is not None else None


def _response_format(fmt: Any) -> dict[str, Any] | None:
    fmt = typed.obj(fmt, ("response_format",))
    kind = _kind(fmt)
    if fmt is None or kind in ("text", "json_object"):
        return None  # json_object: asked in words (JSON_NOTE), Anthropic has no schema-less mode
    if kind == "json_schema":
        spec = typed.obj(fmt.get("json_schema"), ("response_format", "json_schema")) or {}
        schema = typed.obj(spec.get("schema"), ("response_format", "json_schema", "schema"))
        if schema is not None:
            return {"type": "json_schema", "schema": output_schema(schema)}
    raise _Refused(f"response_format of type {option_kind(fmt)} cannot be sent to an Anthropic upstream")


def _int(p: Mapping[str, Any], key: str) -> int | None:
    value = typed.integer(p.get(key), (key,))
    return value if value is not None and value > 0 else None


def output_schema(schema: Any) -> Any:
    """A copy of ``schema`` as Anthropic's structured outputs take it: every object schema
    closed (``additionalProperties: false``: an open or unsaid one is a 400; an open object
    then holds only its named properties), ``oneOf`` as ``anyOf``, and each keyword they do not
    take moved into its schema's ``description`` (a 400 too: "For 'array' type, property
    'maxItems' is not supported", job-ops #654), so that the model still reads it. That is what
    Anthropic's own SDKs do (``transform_schema``), in their words: ``{minimum: 0, maximum:
    150}`` after the description. Only the guarantee is lost; a client that checks the answer
    (the openai SDK's ``parse()`` against its pydantic model) still holds it to the bound."""
    if isinstance(schema, list):
        return [output_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = _any_of(json_schema.with_nested(schema, output_schema))
    if json_schema.is_object(out):
        out["additionalProperties"] = False
    moved = {key: out.pop(key) for key, value in schema.items() if _unsupported(key, value)}
    if moved:
        said = "{" + ", ".join(f"{key}: {json.dumps(value)}" for key, value in moved.items()) + "}"
        kept = out.get("description")
        out["description"] = f"{kept}\n\n{said}" if isinstance(kept, str) and kept else said
    return out


def _any_of(out: dict[str, Any]) -> dict[str, Any]:
    """``oneOf`` as ``anyOf``: Anthropic refuses it ("output_config.format.schema: Schema type
    'oneOf' is not supported", vercel/ai's changeset "convert oneOf to anyOf in tool and
    output_format schemas"), and the SDKs' transform_schema sends it so. The values it takes
    are those of its alternatives, exactly one at a time where ``anyOf`` allows several: a
    discriminated union (zod's, pydantic's) is one no value matches twice. Beside an ``anyOf``
    of its own, it goes into ``allOf``, which holds both."""
    if "oneOf" not in out:
        return out
    one_of = out.pop("oneOf")
    if "anyOf" not in out:
        out["anyOf"] = one_of
    else:
        both = out.get("allOf")
        out["allOf"] = [*(both if isinstance(both, list) else []), {"anyOf": one_of}]
    return out


def _unsupported(key: str, value: Any) -> bool:
    if key == "minItems":
        return value not in (0, 1)
    if key == "format":
        return not (isinstance(value, str) and value in FORMATS)
    if key == "enum":  # "Complex types within enums" are not supported
        return not (isinstance(value, list) and all(_primitive(v) for v in value))
    if key == "const":
        return not _primitive(value)
    return key not in SUPPORTED and key != "oneOf"  # oneOf: rewritten, not moved


def _primitive(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)
