"""Request and answer bodies of the four APIs as the OpenTelemetry GenAI conventions record
conversations: pure functions over parsed JSON, no SDK, no redaction (``attrs`` does that).

The conventions (open-telemetry/semantic-conventions-genai, docs/gen-ai/gen-ai-spans.md,
notes on the attributes) say of ``gen_ai.input.messages``: "Instrumentations MUST follow
[Input messages JSON schema](/docs/gen-ai/gen-ai-input-messages.json)", the same of
``gen_ai.output.messages`` (gen-ai-output-messages.json) and ``gen_ai.system_instructions``
(gen-ai-system-instructions.json), and of the latter: "This attribute SHOULD be used when the
corresponding provider or API allows to provide system instructions or messages separately
from the chat history. Instructions that are part of the chat history SHOULD be recorded in
`gen_ai.input.messages` attribute instead." So a Messages ``system``, a Responses
``instructions`` and a Gemini ``systemInstruction`` are system instructions; a chat
completions ``system`` message, or a Responses ``input`` item of role ``developer``, stays a
message of the history.

The schemas: a message is ``{"role", "parts": [...]}`` (an output message also has
``finish_reason``, one of ``stop | length | content_filter | tool_call | error`` or any
other string); a part is one of ``text {content}``, ``tool_call {id, name, arguments}``,
``tool_call_response {id, response}``, ``server_tool_call {id, name, server_tool_call:
{type}}``, ``server_tool_call_response {id, server_tool_call_response: {type}}``, ``blob
{mime_type, modality, content}``, ``file {mime_type, modality, file_id}``, ``uri {mime_type,
modality, uri}``, ``reasoning {content}``, or a generic part ``{type, ...}``. System
instructions are a list of parts. Each output message is one choice / candidate.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

Part = dict[str, Any]
Message = dict[str, Any]


# Parts shared by the APIs


def _text(s: str) -> Part:
    return {"type": "text", "content": s}


def _arguments(raw: Any) -> Any:
    """Tool call arguments as the schema's example has them (an object); a JSON string that
    does not parse (a model's broken call) is kept as it came."""
    if isinstance(raw, str):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            return raw
    return raw


def _tool_call(id_: Any, name: Any, arguments: Any) -> Part:
    return {"type": "tool_call", "id": id_ if isinstance(id_, str) else None,
            "name": name if isinstance(name, str) else "", "arguments": _arguments(arguments)}  # fmt: skip


def _tool_result(id_: Any, response: Any) -> Part:
    return {"type": "tool_call_response", "id": id_ if isinstance(id_, str) else None, "response": response}


def _modality(mime: str | None, default: str = "image") -> str:
    if mime:
        head = mime.split("/", 1)[0]
        if head in ("image", "video", "audio"):
            return head
        return "document"
    return default


def _data_url(url: str, modality: str) -> Part:
    """A ``data:`` URL is inline bytes (a blob part; the schema says a uri part "should not be
    a base64 data URL"), anything else a uri part."""
    if url.startswith("data:") and "," in url:
        head, data = url[5:].split(",", 1)
        mime = head.split(";", 1)[0] or None
        return {"type": "blob", "mime_type": mime, "modality": _modality(mime, modality), "content": data}
    return {"type": "uri", "mime_type": None, "modality": modality, "uri": url}


def _blob(mime: str | None, modality: str, content: Any) -> Part:
    return {"type": "blob", "mime_type": mime, "modality": modality, "content": content}


def _file(file_id: str, modality: str) -> Part:
    return {"type": "file", "mime_type": None, "modality": modality, "file_id": file_id}


def _empty() -> Message:
    return {"role": "assistant", "parts": []}


def _generic(kind: Any, **extra: Any) -> Part:
    return {"type": kind if isinstance(kind, str) else "unknown", **extra}


def _joined_text(content: Any) -> Any:
    """A tool result's content: a string stays one; a list of text parts becomes their text;
    anything else (images among the parts) is kept as it came."""
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        return "".join(str(p.get("text", "")) for p in content)
    return content


# OpenAI chat completions


def _chat_parts(content: Any) -> list[Part]:
    if isinstance(content, str):
        return [_text(content)] if content else []
    parts: list[Part] = []
    if not isinstance(content, list):
        return parts
    for p in content:
        if not isinstance(p, dict):
            continue
        kind = p.get("type")
        if kind == "text":
            parts.append(_text(str(p.get("text", ""))))
        elif kind == "refusal":
            parts.append(_generic("refusal", content=p.get("refusal")))
        elif kind == "image_url":
            image = p.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            if isinstance(url, str):
                parts.append(_data_url(url, "image"))
        elif kind == "input_audio":
            audio = p.get("input_audio") or {}
            fmt = audio.get("format")
            parts.append({"type": "blob", "mime_type": f"audio/{fmt}" if isinstance(fmt, str) else None,
                          "modality": "audio", "content": audio.get("data", "")})  # fmt: skip
        elif kind == "file":
            f = p.get("file") or {}
            if isinstance(f.get("file_id"), str):
                parts.append(_file(f["file_id"], "document"))
            elif isinstance(f.get("file_data"), str):
                parts.append(_data_url(f["file_data"], "document"))
        else:
            parts.append(_generic(kind))
    return parts


def _chat_message(m: Mapping[str, Any]) -> Message:
    role = m.get("role")
    if role in ("tool", "function"):
        id_ = m.get("tool_call_id") if role == "tool" else None
        return {"role": "tool", "parts": [_tool_result(id_, _joined_text(m.get("content")))]}
    parts: list[Part] = []
    reasoning = m.get("reasoning_content") or m.get("reasoning")  # DeepSeek, vLLM / OpenRouter
    if isinstance(reasoning, str) and reasoning:
        parts.append({"type": "reasoning", "content": reasoning})
    parts.extend(_chat_parts(m.get("content")))
    if isinstance(m.get("refusal"), str):
        parts.append(_generic("refusal", content=m["refusal"]))
    for call in m.get("tool_calls") or ():
        if isinstance(call, dict):
            fn = call.get("function") or call.get("custom") or {}
            parts.append(_tool_call(call.get("id"), fn.get("name"), fn.get("arguments", fn.get("input"))))
    fc = m.get("function_call")
    if isinstance(fc, dict):
        parts.append(_tool_call(None, fc.get("name"), fc.get("arguments")))
    msg: Message = {"role": role if isinstance(role, str) else "user", "parts": parts}
    if isinstance(m.get("name"), str):
        msg["name"] = m["name"]
    return msg


def _chat_input(doc: Mapping[str, Any]) -> tuple[list[Part], list[Message]]:
    msgs = doc.get("messages")
    return [], [_chat_message(m) for m in msgs if isinstance(m, dict)] if isinstance(msgs, list) else []


# finish_reason of a chat choice; the schema's own values, else the provider's string.
_CHAT_FINISH = {"stop": "stop", "length": "length", "content_filter": "content_filter",
                "tool_calls": "tool_call", "function_call": "tool_call"}  # fmt: skip


def _chat_output(doc: Mapping[str, Any]) -> list[Message]:
    out = []
    for choice in doc.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        m = choice.get("message")
        msg = _chat_message(m) if isinstance(m, dict) else _empty()
        msg["finish_reason"] = _finish(_CHAT_FINISH, choice.get("finish_reason"))
        out.append(msg)
    return out


def _finish(table: Mapping[str, str], raw: Any) -> str:
    # Required by the output schema: an answer that names no reason did not end as asked.
    if not isinstance(raw, str) or not raw:
        return "error"
    return table.get(raw, raw)


# Anthropic Messages


def _source_part(block: Mapping[str, Any], modality: str) -> Part:
    src = block.get("source") or {}
    kind = src.get("type")
    mime = src.get("media_type") if isinstance(src.get("media_type"), str) else None
    if kind == "base64":
        return _blob(mime, _modality(mime, modality), src.get("data", ""))
    if kind == "url":
        return {"type": "uri", "mime_type": mime, "modality": modality, "uri": src.get("url", "")}
    if kind == "file":
        return {"type": "file", "mime_type": mime, "modality": modality, "file_id": src.get("file_id", "")}
    if kind == "text":
        return _text(str(src.get("data", "")))
    return _generic(block.get("type"))


def _messages_parts(content: Any) -> list[Part]:
    if isinstance(content, str):
        return [_text(content)] if content else []
    parts: list[Part] = []
    for b in content if isinstance(content, list) else ():
        if not isinstance(b, dict):
            continue
        kind = b.get("type")
        if kind == "text":
            parts.append(_text(str(b.get("text", ""))))
        elif kind == "thinking":
            parts.append({"type": "reasoning", "content": str(b.get("thinking", ""))})
        elif kind == "tool_use":
            parts.append(_tool_call(b.get("id"), b.get("name"), b.get("input")))
        elif kind == "tool_result":
            parts.append(_tool_result(b.get("tool_use_id"), _joined_text(b.get("content"))))
        elif kind == "image":
            parts.append(_source_part(b, "image"))
        elif kind == "document":
            parts.append(_source_part(b, "document"))
        elif kind in ("server_tool_use", "mcp_tool_use"):
            name = b.get("name") if isinstance(b.get("name"), str) else ""
            parts.append({"type": "server_tool_call", "id": b.get("id"), "name": name,
                          "server_tool_call": {"type": name or kind, "input": b.get("input")}})  # fmt: skip
        elif isinstance(kind, str) and kind.endswith("_tool_result"):  # web_search_tool_result, ...
            answer = {"type": kind, "content": b.get("content")}
            parts.append({"type": "server_tool_call_response", "id": b.get("tool_use_id"),
                          "server_tool_call_response": answer})  # fmt: skip
        else:  # redacted_thinking (opaque), and what comes later
            parts.append(_generic(kind))
    return parts


def _system_parts(system: Any) -> list[Part]:
    if isinstance(system, str):
        return [_text(system)] if system else []
    if isinstance(system, list):
        blocks = [b for b in system if isinstance(b, dict) and b.get("type") == "text"]
        return [_text(str(b.get("text", ""))) for b in blocks]
    return []


def _messages_input(doc: Mapping[str, Any]) -> tuple[list[Part], list[Message]]:
    msgs = doc.get("messages")
    history = [{"role": m["role"] if isinstance(m.get("role"), str) else "user",
                "parts": _messages_parts(m.get("content"))}
               for m in (msgs if isinstance(msgs, list) else ()) if isinstance(m, dict)]  # fmt: skip
    return _system_parts(doc.get("system")), history


# stop_reason of a Messages answer, as the chat translation reads it (FINISH_REASON in
# gateway/translate/chat_messages/answer.py): end_turn / stop_sequence end as asked, max_tokens
# and a full context window cut the answer, refusal is the model's safety stop. pause_turn (a
# server tool's long turn, paused) stays the provider's word: the answer is not finished.
_MESSAGES_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length",
                    "model_context_window_exceeded": "length", "tool_use": "tool_call",
                    "refusal": "content_filter"}  # fmt: skip


def _messages_output(doc: Mapping[str, Any]) -> list[Message]:
    if doc.get("type") == "error" or "content" not in doc:
        return []
    return [{"role": doc.get("role") if isinstance(doc.get("role"), str) else "assistant",
             "parts": _messages_parts(doc.get("content")),
             "finish_reason": _finish(_MESSAGES_FINISH, doc.get("stop_reason"))}]  # fmt: skip


# OpenAI Responses


def _responses_content(content: Any) -> list[Part]:
    if isinstance(content, str):
        return [_text(content)] if content else []
    parts: list[Part] = []
    for p in content if isinstance(content, list) else ():
        if not isinstance(p, dict):
            continue
        kind = p.get("type")
        if kind in ("input_text", "output_text", "text"):
            parts.append(_text(str(p.get("text", ""))))
        elif kind == "refusal":
            parts.append(_generic("refusal", content=p.get("refusal")))
        elif kind == "input_image":
            if isinstance(p.get("image_url"), str):
                parts.append(_data_url(p["image_url"], "image"))
            elif isinstance(p.get("file_id"), str):
                parts.append(_file(p["file_id"], "image"))
        elif kind == "input_file":
            if isinstance(p.get("file_id"), str):
                parts.append(_file(p["file_id"], "document"))
            elif isinstance(p.get("file_data"), str):
                parts.append(_data_url(p["file_data"], "document"))
            elif isinstance(p.get("file_url"), str):
                parts.append({"type": "uri", "mime_type": None, "modality": "document", "uri": p["file_url"]})
        else:
            parts.append(_generic(kind))
    return parts


def _reasoning_text(item: Mapping[str, Any]) -> str:
    texts = [s.get("text") for key in ("content", "summary") for s in item.get(key) or ()
             if isinstance(s, dict) and isinstance(s.get("text"), str)]  # fmt: skip
    return "\n".join(t for t in texts if t)


def _responses_item(item: Mapping[str, Any]) -> tuple[str, list[Part]]:
    """The role an ``input`` / ``output`` item speaks in, and its parts."""
    kind = item.get("type")
    if kind in (None, "message"):
        role = item.get("role")
        return role if isinstance(role, str) else "user", _responses_content(item.get("content"))
    if kind in ("function_call", "custom_tool_call"):
        args = item.get("arguments") if kind == "function_call" else item.get("input")
        return "assistant", [_tool_call(item.get("call_id"), item.get("name"), args)]
    if kind in ("function_call_output", "custom_tool_call_output"):
        return "tool", [_tool_result(item.get("call_id"), _joined_output(item.get("output")))]
    if kind == "reasoning":
        text = _reasoning_text(item)
        return "assistant", [{"type": "reasoning", "content": text}] if text else []
    if isinstance(kind, str) and kind.endswith("_call"):  # web_search_call, local_shell_call, ...
        call = {k: v for k, v in item.items() if k not in ("id", "call_id", "status")}
        return "assistant", [{"type": "server_tool_call", "id": item.get("call_id") or item.get("id"),
                              "name": kind.removesuffix("_call"), "server_tool_call": call}]  # fmt: skip
    if isinstance(kind, str) and kind.endswith("_call_output"):
        return "tool", [_tool_result(item.get("call_id"), _joined_output(item.get("output")))]
    return "user", [_generic(kind)]


def _joined_output(output: Any) -> Any:
    if isinstance(output, list) and all(isinstance(p, dict) and p.get("type") in ("input_text", "output_text")
                                        for p in output):  # fmt: skip
        return "".join(str(p.get("text", "")) for p in output)
    return output


def _responses_items(items: list[Any]) -> list[Message]:
    """Items in order; a run of the assistant's items (its text, reasoning and calls of one
    turn) is one message, as the other APIs carry a turn."""
    out: list[Message] = []
    for item in items:
        if not isinstance(item, dict):
            continue
        role, parts = _responses_item(item)
        if role == "assistant" and out and out[-1]["role"] == "assistant":
            out[-1]["parts"].extend(parts)
        else:
            out.append({"role": role, "parts": parts})
    return out


def _responses_input(doc: Mapping[str, Any]) -> tuple[list[Part], list[Message]]:
    instructions = doc.get("instructions")
    system = [_text(instructions)] if isinstance(instructions, str) and instructions else []
    given = doc.get("input")
    if isinstance(given, str):
        return system, [{"role": "user", "parts": [_text(given)]}]
    return system, _responses_items(given) if isinstance(given, list) else []


# A Responses answer is one generation: its status, why it is incomplete, and whether it ends
# in a call say how it finished.
_RESPONSES_INCOMPLETE = {"max_output_tokens": "length", "content_filter": "content_filter"}


def _responses_output(doc: Mapping[str, Any]) -> list[Message]:
    if doc.get("object") != "response":
        return []
    parts = [p for m in _responses_items(doc.get("output") or []) for p in m["parts"]]
    status = doc.get("status")
    if status == "incomplete":
        details = doc.get("incomplete_details") or {}
        reason = _finish(_RESPONSES_INCOMPLETE, details.get("reason") if isinstance(details, dict) else None)
    elif status == "completed":
        reason = "tool_call" if any(p["type"] == "tool_call" for p in parts) else "stop"
    else:  # failed, cancelled
        reason = "error"
    return [{"role": "assistant", "parts": parts, "finish_reason": reason}]


# Gemini


def _g(d: Mapping[str, Any], camel: str, snake: str) -> Any:
    """A member by its JSON name or its proto field name (the API takes either)."""
    v = d.get(camel)
    return d.get(snake) if v is None else v


def _gemini_parts(parts: Any) -> list[Part]:
    out: list[Part] = []
    for p in parts if isinstance(parts, list) else ():
        if not isinstance(p, dict):
            continue
        text = p.get("text")
        inline = _g(p, "inlineData", "inline_data")
        file = _g(p, "fileData", "file_data")
        call = _g(p, "functionCall", "function_call")
        response = _g(p, "functionResponse", "function_response")
        if isinstance(text, str):
            out.append({"type": "reasoning", "content": text} if p.get("thought") else _text(text))
        elif isinstance(call, dict):
            out.append(_tool_call(call.get("id"), call.get("name"), call.get("args")))
        elif isinstance(response, dict):
            out.append(_tool_result(response.get("id"), response.get("response")))
        elif isinstance(inline, dict):
            mime = _g(inline, "mimeType", "mime_type")
            mime = mime if isinstance(mime, str) else None
            out.append(_blob(mime, _modality(mime), inline.get("data", "")))
        elif isinstance(file, dict):
            mime = _g(file, "mimeType", "mime_type")
            mime = mime if isinstance(mime, str) else None
            out.append({"type": "uri", "mime_type": mime, "modality": _modality(mime, "document"),
                        "uri": _g(file, "fileUri", "file_uri") or ""})  # fmt: skip
        else:  # executableCode, codeExecutionResult, a thought signature alone
            keys = [k for k in p if k not in ("thought", "thoughtSignature", "thought_signature")]
            if keys:
                out.append(_generic(keys[0], **{keys[0]: p[keys[0]]}))
    return out


# Gemini's "model" is the assistant; "function" an older name for a turn of function results.
_GEMINI_ROLE = {"model": "assistant", "function": "tool"}


def _gemini_content(c: Mapping[str, Any], default: str) -> Message:
    role: str = c["role"] if isinstance(c.get("role"), str) else default
    return {"role": _GEMINI_ROLE.get(role, role), "parts": _gemini_parts(c.get("parts"))}


def _gemini_input(doc: Mapping[str, Any]) -> tuple[list[Part], list[Message]]:
    si = _g(doc, "systemInstruction", "system_instruction")
    parts = _gemini_parts(si.get("parts")) if isinstance(si, dict) else []
    system = [p for p in parts if p["type"] == "text"]
    contents = doc.get("contents")
    given = contents if isinstance(contents, list) else []
    history = [_gemini_content(c, "user") for c in given if isinstance(c, dict)]
    return system, history


# Candidate.FinishReason (https://docs.cloud.google.com/ruby/docs/reference/google-cloud-ai_platform-v1/0.43.0/Google-Cloud-AIPlatform-V1-Candidate-FinishReason;
# https://ai.google.dev/api/python/google/generativeai/protos/Candidate/FinishReason):
# "STOP: Natural stop point of the model or provided stop sequence" (a function call ends with
# STOP too: named tool_call below), "MAX_TOKENS: The maximum number of tokens as specified in
# the request was reached", SAFETY / RECITATION / BLOCKLIST / PROHIBITED_CONTENT / SPII "flagged
# for ..." (content filters), MALFORMED_FUNCTION_CALL a failed generation. OTHER and what
# comes later stay the provider's word (the schema takes any string).
_GEMINI_FINISH = {"STOP": "stop", "MAX_TOKENS": "length", "SAFETY": "content_filter",
                  "RECITATION": "content_filter", "BLOCKLIST": "content_filter",
                  "PROHIBITED_CONTENT": "content_filter", "SPII": "content_filter",
                  "MALFORMED_FUNCTION_CALL": "error"}  # fmt: skip


def _gemini_output(doc: Mapping[str, Any]) -> list[Message]:
    out = []
    for cand in doc.get("candidates") or ():
        if not isinstance(cand, dict):
            continue
        content = cand.get("content")
        msg = _gemini_content(content, "model") if isinstance(content, dict) else _empty()
        reason = _finish(_GEMINI_FINISH, _g(cand, "finishReason", "finish_reason"))
        if reason == "stop" and any(p["type"] == "tool_call" for p in msg["parts"]):
            reason = "tool_call"
        msg["finish_reason"] = reason
        out.append(msg)
    return out


_INPUT = {"chat": _chat_input, "messages": _messages_input,
          "responses": _responses_input, "gemini": _gemini_input}  # fmt: skip
_OUTPUT = {"chat": _chat_output, "messages": _messages_output,
           "responses": _responses_output, "gemini": _gemini_output}  # fmt: skip


def input_messages(api: str, doc: Any) -> tuple[list[Part], list[Message]]:
    """(system instructions, input messages) of a request body in ``api``; empty lists for a
    body that is not a generation request of that API."""
    fn = _INPUT.get(api)
    if fn is None or not isinstance(doc, dict):
        return [], []
    return fn(doc)


def output_messages(api: str, doc: Any) -> list[Message]:
    """The output messages (one per choice / candidate) of a buffered answer in ``api``."""
    fn = _OUTPUT.get(api)
    if fn is None or not isinstance(doc, dict):
        return []
    return fn(doc)
