"""A Gemini ``generateContent`` request as an OpenAI chat completions request.

Rules (each with its reason in docs/translation/gemini_chat.md):

* ``systemInstruction`` (a Content, whatever its ``role``: google-genai sends ``"user"``, or a
  bare string) becomes the first ``system`` message, its text parts one per paragraph.
* ``contents``: ``user`` turns become user messages (text, ``inlineData`` images as data URLs),
  ``model`` turns assistant messages (text, ``functionCall`` parts as ``tool_calls``);
  ``functionResponse`` parts become ``tool`` messages right after the call they answer; several
  for one id (Gemini CLI's) are one message, their texts in order, as OpenAI takes them.
* Call ids are kept (Gemini CLI sends one on every call and echoes it on the response). A call
  without one (google-genai sends none) gets ``call_<turn>_<part>``, and a response without
  one answers the first call of that name the previous model turn left unanswered: the Gemini
  API pairs them by name and order. An id longer than OpenAI's 40 characters (Gemini CLI's own,
  ``run_shell_command-1759912345678-3f2a9c8b1d4e7``) goes to a chat upstream as a digest of
  itself, on the call and its response alike (``apis/chat/ids.py``).
* ``stopSequences``: the first 4 go to a chat upstream, OpenAI's most (Gemini takes 5).
* Thoughts (``thought: true`` parts) and ``thoughtSignature`` are dropped from history: chat
  has no input field for reasoning, and a signature only a Gemini model can check means
  nothing to another one. The exception is the gateway's own: on to a Messages upstream, a
  call's signature that seals Claude's thinking (``answer.py`` wrote it) becomes the turn's
  ``thinking_blocks``, which chat → Messages puts first in the turn, so a tool loop keeps
  thinking on; one that does not unseal, or that another model made (Anthropic refuses those;
  Gemini CLI's ``auto`` switches models), is dropped as any other.
* Everything that needs Google's servers (hosted tools, ``cachedContent``, Files-API
  ``fileData``, image or audio output) is refused, and so are log probabilities, as chat's
  are on every translation; sampling knobs chat lacks (``topK``, ``safetySettings``) are
  dropped, but ``topK`` goes on to Messages, which has ``top_k``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from gateway.apis.chat.ids import to_chat_id
from gateway.apis.gemini.fields import field, has, snake
from gateway.translate import json_schema as nesting
from gateway.translate import root, sealed_thinking, thinking_room, tool_cap, typed
from gateway.translate.base import Refusal, Target
from gateway.translate.chat_messages.request import (
    EFFORT_BUDGET,
    asked_from,
    image_seen,
    over_words,
    reads_as_text,
    sniffed_image,
)
from gateway.translate.gemini_chat.names import Names, names_for
from gateway.translate.image_limits import Over, Seen, plan
from gateway.translate.messages_chat.request import STOP_MAX
from gateway.translate.tool_results import folded_into
from gateway.translate.typed import WrongType

# thinkingBudget → reasoning_effort: the thresholds messages_chat uses for Anthropic's
# budget_tokens, so one budget means the same effort from either client.
_LOW, _MEDIUM = 4096, 16384
# thinkingLevel → reasoning_effort: the three values every chat server that takes the field
# accepts (vLLM validates exactly these).
_LEVEL = {"minimal": "low", "low": "low", "medium": "medium", "high": "high"}
TOO_MANY_TOOLS = ("Connect fewer MCP servers or keep fewer of their tools (Gemini CLI: an MCP server's "
                  "includeTools or excludeTools), or route this model to an upstream that speaks the "
                  "Gemini API, Messages or Responses.")  # fmt: skip
ENUM_MIME = "text/x.enum"  # one value of a string enum, answered bare
DYNAMIC = "medium"  # thinkingBudget -1, the model's own choice, as an effort (``_effort``)
# MODE_UNSPECIFIED is a value of Google's enum: the default, AUTO.
_MODE = {"AUTO": "auto", "ANY": "required", "NONE": "none", "VALIDATED": "auto", "MODE_UNSPECIFIED": "auto"}
# Tools that run inside Google's servers; a chat server cannot run them.
_HOSTED = ("googleSearch", "googleSearchRetrieval", "codeExecution", "urlContext", "retrieval",
           "googleMaps", "computerUse", "fileSearch", "enterpriseWebSearch", "mcpServers")  # fmt: skip
# Google's Schema (an OpenAPI 3.0 subset) keys that are JSON Schema keys under the same name.
_SCHEMA_KEYS = ("format", "title", "description", "enum", "maxItems", "minItems", "required",
                "minProperties", "maxProperties", "minLength", "maxLength", "pattern", "default",
                "minimum", "maximum", "example")  # fmt: skip
# Google's Schema counts are int64, which protobuf's JSON writes as strings (the google-genai JS
# SDK types them so); JSON Schema wants integers.
_COUNTS = ("maxItems", "minItems", "minProperties", "maxProperties", "minLength", "maxLength")
# JSON Schema's type names; Google spells the same names upper-case, in its Schema and, as
# Gemini takes them, in the JSON Schema fields too (Gemini CLI's routing call: "OBJECT").
_JSON_TYPES = frozenset({"string", "number", "integer", "boolean", "array", "object", "null"})
# JSON Schema keys holding one schema that ``json_schema.with_nested`` leaves alone (it serves
# the walks that close objects, which set ``additionalProperties`` themselves).
_MORE_NESTED = ("additionalProperties", "propertyNames", "unevaluatedProperties", "unevaluatedItems")
NOTE = "[{what} ({mime}) left out: this model cannot read it]"
# generationConfig's sampling knobs chat has too: (Gemini's name, chat's, the JSON type).
_KNOBS: tuple[tuple[str, str, Callable[[Any, typed.Path], int | float | None]], ...] = (
    ("temperature", "temperature", typed.number), ("topP", "top_p", typed.number),
    ("maxOutputTokens", "max_tokens", typed.integer), ("presencePenalty", "presence_penalty", typed.number),
    ("frequencyPenalty", "frequency_penalty", typed.number), ("seed", "seed", typed.integer),
)  # fmt: skip
T = TypeVar("T")
# The image types both OpenAI ("png, jpeg, gif, webp") and Anthropic (jpeg, png, gif, webp)
# read. Gemini also takes HEIC and HEIF, which neither does.
_IMAGES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
# Gemini takes "image/jpg" for JPEG; Anthropic takes only the registered name.
_ALIASES = {"image/jpg": "image/jpeg"}


class Untranslatable(Exception):
    """Raised inside the walk; becomes a ``Refusal``."""


def to_chat(payload: Mapping[str, Any], target: Target) -> dict[str, Any] | Refusal:
    try:
        return _request(payload, target)
    except Untranslatable as e:
        return Refusal(str(e))
    except WrongType as e:
        return typed.refusal(e, "gemini")


def _request(payload: Mapping[str, Any], target: Target) -> dict[str, Any]:
    api = _UPSTREAM_API.get(target.onward, "this upstream")
    if field(payload, "cachedContent"):
        raise Untranslatable(f"'cachedContent' names a cache kept by Google's API; the gateway does not "
                             f"carry it to {api}")  # fmt: skip
    messages: list[dict[str, Any]] = []
    system = _system(field(payload, "systemInstruction"))
    if system:
        messages.append({"role": "system", "content": system})
    contents = payload.get("contents")
    if not isinstance(contents, list):
        raise Untranslatable("'contents' must be a list of Content objects")
    names = names_for(payload.get("tools"), contents)
    messages += _messages(contents, names, files=target.onward in ("messages", "responses"),
                          short_ids=not target.onward, anthropic=target.onward == "messages",
                          model=target.model or None, api=api)  # fmt: skip
    out: dict[str, Any] = {"model": target.model, "messages": messages}
    config = typed.obj(field(payload, "generationConfig"), ("generationConfig",))
    if config is not None:
        _generation(config, out, target.onward)
    tools = _tools(payload.get("tools"), names, target.onward)
    tool_config = typed.obj(field(payload, "toolConfig"), ("toolConfig",)) or {}
    calling = typed.obj(field(tool_config, "functionCallingConfig"), ("toolConfig", "functionCallingConfig"))
    if tools and calling is not None:
        tools = _choice(calling, tools, out, names)
    if target.tools_max is not None and len(tools) > target.tools_max and not target.onward:
        raise Untranslatable(tool_cap.too_many(len(tools), target.tools_max, TOO_MANY_TOOLS).message)
    if tools:
        out["tools"] = tools
    if payload.get("stream") is True:
        out["stream"] = True
        if target.stream_usage:
            out["stream_options"] = {"include_usage": True}
    return out


# --- system and contents --------------------------------------------------------------


def _system(instruction: Any) -> str:
    if instruction is None:
        return ""
    if isinstance(instruction, str):
        return instruction
    if not isinstance(instruction, dict | list):
        raise typed.wrong(instruction, ("systemInstruction",), "object")
    parts, at = (instruction.get("parts"), ("systemInstruction", "parts")) if isinstance(instruction, dict) \
        else (instruction, ("systemInstruction",))  # fmt: skip
    if not isinstance(parts, list):
        raise typed.wrong(parts, at, "array")
    texts = []
    for k, part in enumerate(typed.objects(parts, at)):
        text = typed.text(part.get("text"), (*at, k, "text"))
        if text is None:
            raise Untranslatable("'systemInstruction' may hold only text parts")
        texts.append(text)
    return "\n\n".join(texts)


class _Convo:
    """Chat messages as they are built, with the calls still waiting for their response."""

    def __init__(self, names: Names, files: bool, short_ids: bool = False, anthropic: bool = False,
                 asked_from: int = 0) -> None:  # fmt: skip
        self.names = names
        self.files = files  # a PDF may go as a chat file part: it goes on to a Messages or Responses upstream
        # It goes on to Messages: an image too large for Anthropic that the client asks about now
        # (contents from ``asked_from`` on) is refused here, where the client's own field is known.
        self.anthropic = anthropic
        self.model: str | None = None  # the upstream's: another model's sealed thinking is left out
        self.api = "chat completions"  # the API the route ends on, as a refusal names it (``_UPSTREAM_API``)
        self.asked_from = asked_from
        self.over: dict[typed.Path, Over] = {}  # the images that cannot go on to Messages as they are
        self.ids = to_chat_id if short_ids else str  # how an id is written, on a call and its response
        self.messages: list[dict[str, Any]] = []
        self.open_calls: list[tuple[str, str]] = []  # (name, id) of the last model turn, unanswered

    def user(self, parts: list[dict[str, Any]]) -> None:
        if not parts:
            return
        last = self.messages[-1] if self.messages else None
        if last is not None and last["role"] == "user":
            last["content"] = _content(_parts_of(last["content"]) + parts)  # consecutive user turns merge
        else:
            self.messages.append({"role": "user", "content": _content(parts)})

    def answer_id(self, name: str, given: Any) -> str:
        if isinstance(given, str) and given:
            self.open_calls = [c for c in self.open_calls if c[1] != given]
            return given
        for i, (call_name, call_id) in enumerate(self.open_calls):
            if call_name == name:
                del self.open_calls[i]
                return call_id
        return f"call_{len(self.messages)}_{name}"  # answers no call the request shows


def _messages(
    contents: list[Any], names: Names, files: bool, short_ids: bool = False, anthropic: bool = False,
    model: str | None = None, api: str = "chat completions",
) -> list[dict[str, Any]]:  # fmt: skip
    asked = asked_from(contents, lambda c: isinstance(c, dict) and c.get("role") == "model")
    convo = _Convo(names, files, short_ids, anthropic, asked)
    convo.model = model
    convo.api = api
    convo.over = _image_plan(contents, asked) if anthropic else {}
    for i, content in enumerate(contents):
        if not isinstance(content, dict):
            raise typed.wrong(content, ("contents", i), "object")
        parts = content.get("parts")
        if not isinstance(parts, list):
            raise typed.wrong(parts, ("contents", i, "parts"), "array")
        typed.objects(parts, ("contents", i, "parts"))
        role = typed.text(content.get("role"), ("contents", i, "role")) or "user"
        if role == "model":
            _model_turn(convo, parts, i)
        elif role in ("user", "function", "tool"):
            _user_turn(convo, parts, i)
        else:
            raise Untranslatable(f"contents[{i}].role must be 'user' or 'model', not {role!r}")
    return convo.messages


def _model_turn(convo: _Convo, parts: list[dict[str, Any]], i: int) -> None:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    signed: list[dict[str, Any]] = []
    convo.open_calls = []
    for j, part in enumerate(parts):
        at = ("contents", i, "parts", j)
        if typed.flag(part.get("thought"), (*at, "thought")):
            continue  # reasoning history: no chat field takes it
        call = typed.obj(field(part, "functionCall"), (*at, "functionCall"))
        text = typed.text(part.get("text"), (*at, "text"))
        if call is not None:
            name = typed.text(call.get("name"), (*at, "functionCall", "name"))
            if not name:
                raise Untranslatable(f"contents[{i}].parts[{j}].functionCall needs a name")
            call_id = convo.ids(typed.text(call.get("id"), (*at, "functionCall", "id")) or f"call_{i}_{j}")
            args = typed.obj(call.get("args"), (*at, "functionCall", "args"))
            calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": convo.names.upstream(name),
                                 "arguments": json.dumps(args if args is not None else {})},
                }
            )
            convo.open_calls.append((name, call_id))
            if convo.anthropic and not signed:
                signed = sealed_thinking.unseal(field(part, "thoughtSignature"), convo.model)
        elif text is not None:
            texts.append(text)
        elif _only_metadata(part):
            continue
        else:
            raise Untranslatable(
                f"contents[{i}].parts[{j}]: the gateway does not carry a model turn's {_kind(part)} part "
                f"to {convo.api}"
            )
    # content "", not null, beside tool calls: llama-cpp-python answers 500 to null (tests/real/NOTES.md).
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
    if calls:
        message["tool_calls"] = calls
    if signed:
        message["thinking_blocks"] = signed
    if calls or texts:
        convo.messages.append(message)


def _user_turn(convo: _Convo, parts: list[dict[str, Any]], i: int) -> None:
    chat_parts: list[dict[str, Any]] = []
    images_after: list[dict[str, Any]] = []
    for j, part in enumerate(parts):
        at = ("contents", i, "parts", j)
        response = typed.obj(field(part, "functionResponse"), (*at, "functionResponse"))
        text = typed.text(part.get("text"), (*at, "text"))
        if response is not None:
            call_id, said, images, given = _function_response(convo, response, i, j)
            # Responses for one id (Gemini CLI's) are one message, as OpenAI takes them
            # (``tool_results.py``); on to Messages ``chat_messages`` folds them. Responses
            # without an id answer calls by name and order: each keeps its own.
            joined = folded_into(convo.messages, call_id) if given and not convo.anthropic else None
            if joined is not None:
                joined["content"] = "\n\n".join(t for t in (joined["content"], said) if t)
            else:
                convo.messages.append({"role": "tool", "tool_call_id": call_id, "content": said})
            images_after += images
        elif text is not None:
            if not typed.flag(part.get("thought"), (*at, "thought")):
                chat_parts.append({"type": "text", "text": text})
        elif has(part, "inlineData"):
            chat_parts.append(_inline(field(part, "inlineData"), at, convo, i))
        elif has(part, "fileData"):
            raise Untranslatable(f"contents[{i}].parts[{j}].fileData names a file kept by Google's API; "
                                 f"the gateway does not carry it to {convo.api}")  # fmt: skip
        elif _only_metadata(part):
            continue
        else:
            raise Untranslatable(
                f"contents[{i}].parts[{j}]: the gateway does not carry a user turn's {_kind(part)} part "
                f"to {convo.api}"
            )
    if images_after:
        # A chat tool message carries text only: the images a function returned follow it.
        # Named for what they are: a PDF (or its note, on a chat server) is no image.
        what = "Images" if all(p["type"] == "image_url" for p in images_after) else "Files"
        convo.user([{"type": "text", "text": f"{what} returned by the function calls above:"}, *images_after])
    convo.user(chat_parts)


def _function_response(
    convo: _Convo, fr: dict[str, Any], i: int, j: int
) -> tuple[str, str, list[dict[str, Any]], bool]:
    """The id the response answers, its text, its images, and whether the client gave the id."""
    at = ("contents", i, "parts", j, "functionResponse")
    name = typed.text(fr.get("name"), (*at, "name"))
    if name is None:
        raise Untranslatable(f"contents[{i}].parts[{j}].functionResponse needs a name")
    given = typed.text(fr.get("id"), (*at, "id"))
    call_id = convo.answer_id(name, convo.ids(given) if given else given)
    response = typed.obj(fr.get("response"), (*at, "response"))
    if isinstance(response, dict) and set(response) == {"output"} and isinstance(response["output"], str):
        text = response["output"]  # Gemini CLI's shape: the output as the model would read it
    elif isinstance(response, dict) and set(response) == {"error"} and isinstance(response["error"], str):
        text = "Error: " + response["error"]  # chat has no error flag; the model must still know
    else:
        text = json.dumps(response, ensure_ascii=False)
    images = []
    for k, inner in enumerate(typed.objects(fr.get("parts"), (*at, "parts"))):
        if has(inner, "inlineData"):
            images.append(_inline(field(inner, "inlineData"), (*at, "parts", k), convo, i))
    return call_id, text, images, bool(given)


def _image_plan(contents: list[Any], asked: int) -> dict[typed.Path, Over]:
    """The images that cannot go on to Messages as they are, by their part's place: each
    ``inlineData`` that goes on as an image (``_inline``'s reading: one of the four types; another
    is a note), a function's response's included; ``asked``: the first content asked about now.
    ``chat_messages`` plans the same images again, and comes to the same count."""
    seen: dict[typed.Path, Seen] = {}
    for i, at, blob in _blobs(contents):
        mime = _image_mime(blob)
        if mime in _IMAGES:
            data = blob["data"].replace("-", "+").replace("_", "/")
            seen[at] = image_seen(f"data:{mime};base64,{data}", i >= asked)
    return plan(seen)


def _blobs(contents: list[Any]) -> list[tuple[int, typed.Path, dict[str, Any]]]:
    """Each ``inlineData`` with base64 ``data``, with its content's index and its part's place,
    a function's response's parts included."""
    placed: list[tuple[int, typed.Path, Any]] = []
    for i, content in enumerate(contents):
        parts = content.get("parts") if isinstance(content, dict) else None
        for j, part in enumerate(parts if isinstance(parts, list) else ()):
            placed.append((i, ("contents", i, "parts", j), part))
            response = field(part, "functionResponse") if isinstance(part, dict) else None
            inner = response.get("parts") if isinstance(response, dict) else None
            placed += [(i, ("contents", i, "parts", j, "functionResponse", "parts", k), p)
                       for k, p in enumerate(inner if isinstance(inner, list) else ())]  # fmt: skip
    blobs = [(i, at, field(p, "inlineData") if isinstance(p, dict) else None) for i, at, p in placed]
    return [(i, at, b) for i, at, b in blobs if isinstance(b, dict) and isinstance(b.get("data"), str)]


def _image_mime(blob: dict[str, Any]) -> str:
    """The type an ``inlineData`` goes on as: an image the type its bytes are."""
    mime = field(blob, "mimeType")
    mime = _ALIASES.get(mime, mime) if isinstance(mime, str) else "application/octet-stream"
    if mime.startswith("image/"):
        mime = sniffed_image(blob["data"][:32].replace("-", "+").replace("_", "/")) or mime
    return mime


def _inline(blob: Any, at: typed.Path, convo: _Convo, i: int) -> dict[str, Any]:
    """``i``: the index of the content it is in."""
    if not isinstance(blob, dict) or not isinstance(blob.get("data"), str):
        raise Untranslatable(f"{typed.bracketed(at)}.inlineData needs base64 'data'")
    mime = typed.text(field(blob, "mimeType"), (*at, "inlineData", "mimeType")) or "application/octet-stream"
    mime = _ALIASES.get(mime, mime)
    # Protobuf's JSON bytes may be URL-safe base64 (google-genai 3.6 writes it so); a data URL
    # is standard base64, which is all some servers decode.
    data = blob["data"].replace("-", "+").replace("_", "/")
    if mime.startswith("image/"):
        # An image is the type its bytes are: Anthropic refuses JPEG bytes said to be PNG ("Image
        # does not match the provided media type image/png", claude-code #15746).
        mime = sniffed_image(data) or mime
    if mime in _IMAGES:
        url = f"data:{mime};base64,{data}"
        over = convo.over.get(at) if convo.anthropic and i >= convo.asked_from else None
        if over is not None:
            raise Untranslatable(f"{typed.bracketed(at)}: {over_words(over)}")
        return {"type": "image_url", "image_url": {"url": url}}
    if convo.files and (mime == "application/pdf" or reads_as_text(mime)):
        # Claude reads PDFs and plain text (chat_messages makes this part a document block), and
        # OpenAI's Responses both (chat_responses: an input_file).
        file: dict[str, Any] = {"file_data": f"data:{mime};base64,{data}"}
        name = field(blob, "displayName")
        if isinstance(name, str) and name:
            file["filename"] = name
        return {"type": "file", "file": file}
    # Chat servers read those images only (a document reaches Claude alone). Refusing would fail every
    # later turn of a session that once read a PDF or a phone's photo (the part stays in its
    # history); a note tells the model instead of letting it guess.
    what = "image" if mime.startswith("image/") else "inline data"
    return {"type": "text", "text": NOTE.format(what=what, mime=mime)}


def _only_metadata(part: dict[str, Any]) -> bool:
    """A part with nothing to carry: a thoughtSignature alone, or a video's offsets."""
    return all(snake(k) in ("thought_signature", "thought", "part_metadata", "video_metadata") for k in part)


def _kind(part: dict[str, Any]) -> str:
    return next((k for k in part if k not in ("thoughtSignature", "thought_signature")), "empty")


def _parts_of(content: Any) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def _content(parts: list[dict[str, Any]]) -> Any:
    """A string when every part is text (what every chat server and template takes),
    parts only when an image is there."""
    if all(p["type"] == "text" for p in parts):
        return "\n\n".join(p["text"] for p in parts)
    return parts


# --- generation config -----------------------------------------------------------------


def _config(config: dict[str, Any], name: str, read: Callable[[Any, typed.Path], T]) -> T:
    """A generationConfig field, under either spelling."""
    return read(field(config, name), ("generationConfig", name))


def _generation(config: dict[str, Any], out: dict[str, Any], onward: str) -> None:
    count = _config(config, "candidateCount", typed.integer)
    if count is not None and count > 1:
        raise Untranslatable("'candidateCount' above 1 is not carried: the answer would hold one candidate")
    if _config(config, "responseLogprobs", typed.flag) or _config(config, "logprobs", typed.integer):
        # As chat's own logprobs on every translation (chat_messages, chat_responses, chat_gemini).
        raise Untranslatable("'responseLogprobs' is not carried: the translation brings no token "
                             "probabilities back")  # fmt: skip
    for name, chat, read in _KNOBS:
        value = _config(config, name, read)
        if value is not None:
            out[chat] = value
    top_k = _config(config, "topK", typed.number)
    if onward == "messages" and top_k is not None and top_k >= 1:
        # Anthropic's top_k; chat_messages drops it again with thinking on, which refuses it.
        out["top_k"] = int(top_k)
    stops = _config(config, "stopSequences", typed.strings)
    if stops:
        out["stop"] = list(stops)[:STOP_MAX] if not onward else list(stops)
    modalities = _config(config, "responseModalities", typed.strings)
    if any(m.upper() != "TEXT" for m in modalities):
        api = _UPSTREAM_API.get(onward, "this upstream")
        raise Untranslatable(f"'responseModalities' other than TEXT need a Gemini model; the gateway "
                             f"does not carry them to {api}")  # fmt: skip
    fmt = _response_format(config)
    if fmt is not None:
        out["response_format"] = fmt
        if fmt["type"] == "json_object" and not _says_json(out["messages"]):
            # OpenAI takes JSON mode only when the conversation says so ("'messages' must
            # contain the word 'json' in some form, to use 'response_format' of type
            # 'json_object'", quoted in mem0ai/mem0#3559); Gemini's JSON mime type needs no word.
            out["messages"].insert(0, {"role": "system", "content": "Answer in JSON."})
    thinking = _config(config, "thinkingConfig", typed.obj)
    effort = _effort(thinking, onward) if thinking is not None else None
    if effort:
        out["reasoning_effort"] = effort
        at = ("generationConfig", "thinkingConfig", "thinkingBudget")
        budget = typed.integer(field(thinking or {}, "thinkingBudget"), at)
        if onward == "messages" and budget is not None and budget > 0:
            # The client's own budget: a Claude that takes budgets gets it as asked where it
            # fits (``thinking_room.anthropic_named``); the effort is for one that thinks
            # adaptively, which has only levels.
            out[thinking_room.NAMED] = budget


def _says_json(messages: list[dict[str, Any]]) -> bool:
    """Whether a message's text has the word: read in texts only, as an image's base64 data URL
    spells "json" by chance (about once a megabyte) and says nothing to the model."""
    for message in messages:
        content = message.get("content")
        parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
        for part in parts:
            text = part.get("text") if isinstance(part, dict) and part.get("type") == "text" else None
            if isinstance(text, str) and "json" in text.lower():
                return True
    return False


def _response_format(config: dict[str, Any]) -> dict[str, Any] | None:
    mime = _config(config, "responseMimeType", typed.text)
    schema = _schema(config)
    if schema is not None:
        # A root other than an object goes inside one (``root.py``): OpenAI refuses it.
        sent = root.wrapped(schema) if root.needs_wrapping(schema) else schema
        return {"type": "json_schema", "json_schema": {"name": root.KEY, "schema": sent}}
    if mime == "application/json":
        return {"type": "json_object"}
    return None


def _schema(config: dict[str, Any]) -> Any:
    """The structured output's JSON Schema, from either of Gemini's fields; None without one."""
    given = _config(config, "responseJsonSchema", typed.obj)
    hidden = _config(config, "_responseJsonSchema", typed.obj)
    google = _config(config, "responseSchema", typed.obj)
    schema = given if given is not None else hidden
    if schema is not None:
        return lowered(schema)
    return json_schema(google) if google is not None else None


def answer_wrapping(request: Mapping[str, Any]) -> str | None:
    """How the answer's text comes out of the wrapper ``_response_format`` put the schema in
    (``root.unwrapped``): "enum" (the bare string, what Gemini answers for ``text/x.enum``),
    "json", or None when it put it in none. For a request it already carried."""
    config = field(request, "generationConfig")
    try:
        schema = _schema(config) if isinstance(config, dict) else None
    except (WrongType, Untranslatable, RecursionError):
        return None
    if not root.needs_wrapping(schema):
        return None
    assert isinstance(config, dict)  # a schema was read from it
    return "enum" if field(config, "responseMimeType") == ENUM_MIME else "json"


def _effort(thinking: dict[str, Any], onward: str) -> str | None:
    at = ("generationConfig", "thinkingConfig")
    typed.flag(field(thinking, "includeThoughts"), (*at, "includeThoughts"))  # what answers read
    level = typed.text(field(thinking, "thinkingLevel"), (*at, "thinkingLevel"))
    if level is not None and level.lower() in _LEVEL:
        return _LEVEL[level.lower()]
    budget = typed.integer(field(thinking, "thinkingBudget"), (*at, "thinkingBudget"))
    if budget == 0 and onward == "messages":
        # Thinking off ("0 is DISABLED"), said as chat says it: a Claude that thinks unasked
        # (Opus 5) is then told not to, as chat_messages words it for that model.
        return "none"
    if budget is None or budget == 0:
        return None  # unset: the server's default; 0: thinking off ("0 is DISABLED")
    if budget < 0:
        # -1: "To use dynamic thinking, which allows the model to decide on the thinking budget
        # based on the task, set this value to `-1`" (Google's ThinkingConfig reference,
        # https://firebase.google.cn/docs/reference/js/ai.thinkingconfig; "0 is DISABLED. -1 is
        # AUTOMATIC", https://googleapis.github.io/java-genai/javadoc/google-genai/com.google.genai.types/-thinking-config/thinking-budget.html).
        # Chat's middle effort: a Claude that thinks adaptively is asked {type: adaptive} by
        # chat_messages, the model deciding; one with a budget only the middle budget; chat and
        # Responses servers "medium".
        return DYNAMIC
    if onward == "messages":
        # chat_messages gives each effort a budget (1,024 the least, Anthropic's minimum): the
        # least effort whose budget covers the one asked, so Claude thinks at least as long.
        return next((effort for effort, tokens in EFFORT_BUDGET.items() if tokens >= budget), "xhigh")
    return "low" if budget < _LOW else "medium" if budget < _MEDIUM else "high"


# --- tools ---------------------------------------------------------------------------------


# The API the upstream speaks, by ``Target.onward``: the refusal names the one the model is on,
# and what the gateway does not carry there, not what that API lacks (Responses and Anthropic's
# API have web search of their own).
_UPSTREAM_API = {"": "chat completions", "messages": "Anthropic Messages", "responses": "OpenAI Responses"}


def _tools(tools: Any, names: Names, onward: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, tool in enumerate(typed.objects(tools, ("tools",))):
        hosted = [k for k in _HOSTED if has(tool, k)]
        if hosted:
            api = _UPSTREAM_API.get(onward, "this upstream")
            raise Untranslatable(f"tools[{i}].{hosted[0]} runs inside Google's API; the gateway does not "
                                 f"carry it to {api} (a model routed to a Gemini API upstream "
                                 "can run it)")  # fmt: skip
        at = ("tools", i, "functionDeclarations")
        decls = typed.objects(field(tool, "functionDeclarations"), at)
        out += [_function(decl, (*at, j), names) for j, decl in enumerate(decls)]
    return out


def _function(decl: dict[str, Any], at: typed.Path, names: Names) -> dict[str, Any]:
    name = typed.text(decl.get("name"), (*at, "name"))
    if name is None:
        raise Untranslatable(f"{typed.bracketed(at)} needs a name")
    params = typed.obj(field(decl, "parametersJsonSchema"), (*at, "parametersJsonSchema"))
    if params is not None:
        params = lowered(params)
    else:
        google = typed.obj(decl.get("parameters"), (*at, "parameters"))
        params = json_schema(google) if google is not None else None
    function: dict[str, Any] = {"name": names.upstream(name)}
    description = typed.text(decl.get("description"), (*at, "description"))
    if description is not None:
        function["description"] = description
    if not isinstance(params, dict):
        params = {"type": "object", "properties": {}}
    function["parameters"] = nesting.with_properties(_object(params))
    return {"type": "function", "function": function}


def _object(params: dict[str, Any]) -> dict[str, Any]:
    """A function's arguments are an object, whatever ``nullable`` says: Anthropic refuses any
    other top ``type`` ("input_schema.type: Input should be 'object'"), ``["object", "null"]`` too."""
    kind = params.get("type")
    return {**params, "type": "object"} if isinstance(kind, list) and "object" in kind else params


def _choice(
    calling: dict[str, Any], tools: list[dict[str, Any]], out: dict[str, Any], names: Names
) -> list[dict[str, Any]]:
    """``functionCallingConfig`` → ``tool_choice``; ``allowedFunctionNames`` keeps only those
    tools (chat has no list of allowed names; a tool the model is not shown cannot be called)."""
    at = ("toolConfig", "functionCallingConfig")
    allowed = typed.strings(field(calling, "allowedFunctionNames"), (*at, "allowedFunctionNames"))
    if allowed:
        chat_names = {names.upstream(n) for n in allowed}
        kept = [t for t in tools if t["function"]["name"] in chat_names]
        if not kept:
            # Sent without them, the model would answer as if it had no tools at all.
            raise Untranslatable(f"functionCallingConfig.allowedFunctionNames {allowed!r} names no function "
                                 "in 'tools'; each must be a functionDeclarations[].name")  # fmt: skip
        tools = kept
    mode = (typed.text(calling.get("mode"), (*at, "mode")) or "AUTO").upper()
    choice = _MODE.get(mode)
    if choice is None:
        raise Untranslatable(f"functionCallingConfig.mode {mode!r} is not one of AUTO, ANY, NONE, VALIDATED")
    if choice == "required" and len(tools) == 1:
        choice = {"type": "function", "function": {"name": tools[0]["function"]["name"]}}  # type: ignore[assignment]
    if tools:
        out["tool_choice"] = choice
    return tools


def lowered(schema: Any) -> Any:
    """A JSON Schema (``responseJsonSchema``, ``parametersJsonSchema``) with Google's upper-case
    type names written as JSON Schema's. Gemini takes either; Anthropic refuses ``"OBJECT"``
    ("Invalid JSON Schema in output format") and llama-cpp-python fails to build its grammar
    ("Unrecognized schema"). A valid JSON Schema comes back equal: only ``type`` changes."""
    if isinstance(schema, list):
        return [lowered(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = nesting.with_nested(schema, lowered)
    for key in _MORE_NESTED:
        if isinstance(out.get(key), dict):
            out[key] = lowered(out[key])
    if isinstance(out.get("dependentSchemas"), dict):
        out["dependentSchemas"] = {k: lowered(v) for k, v in out["dependentSchemas"].items()}
    kind = out.get("type")
    if isinstance(kind, str) and kind.upper() == "TYPE_UNSPECIFIED":
        del out["type"]
    elif isinstance(kind, str):
        out["type"] = _json_type(kind)
    elif isinstance(kind, list):
        out["type"] = [_json_type(k) if isinstance(k, str) else k for k in kind]
    return out


def _json_type(name: str) -> str:
    lower = name.lower()
    return lower if lower in _JSON_TYPES else name


def json_schema(schema: Any) -> Any:
    """Google's Schema (an OpenAPI 3.0 subset: upper-case ``type``, ``nullable``,
    ``propertyOrdering``, either spelling of each key) as JSON Schema."""
    if isinstance(schema, list):
        return [json_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    kind = schema.get("type")
    if isinstance(kind, str) and kind.upper() != "TYPE_UNSPECIFIED":
        out["type"] = kind.lower()
    for key in _SCHEMA_KEYS:
        value = field(schema, key)
        if value is not None:
            out[key] = value
    for key in _COUNTS:
        if isinstance(out.get(key), str) and out[key].isdigit():
            out[key] = int(out[key])
    if out.get("format") == "enum":
        del out["format"]  # Google's mark of an enum, which ``enum`` says; JSON Schema has no such format
    if out.get("type") in ("integer", "number") and isinstance(out.get("enum"), list):
        # Google's enum is a list of strings whatever the type ({type: INTEGER, format: enum,
        # enum: ["101", "201"]}); as JSON Schema no integer would match a string.
        numbers = _numbers(out["enum"], integer=out["type"] == "integer")
        if numbers is not None:
            out["enum"] = numbers
        else:
            del out["type"]  # values that are no numbers: the listed values are what may be given
    if field(schema, "nullable") is True and "type" in out:
        out["type"] = [out["type"], "null"]
    props = schema.get("properties")
    if isinstance(props, dict):
        out["properties"] = {k: json_schema(v) for k, v in props.items()}
    if schema.get("items") is not None:
        out["items"] = json_schema(schema["items"])
    any_of = field(schema, "anyOf")
    if isinstance(any_of, list):
        out["anyOf"] = json_schema(any_of)
    return out


def _numbers(values: list[Any], integer: bool) -> list[int | float] | None:
    out: list[int | float] = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            return None
        if not isinstance(value, str):
            out.append(value)
            continue
        try:
            out.append(int(value))
            continue
        except ValueError:
            pass
        try:
            number = float(value)
        except ValueError:
            return None
        if integer or not math.isfinite(number):
            return None
        out.append(number)
    return out
