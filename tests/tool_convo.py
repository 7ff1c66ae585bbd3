"""One list of tool calls and their outputs, written as each wire API carries it, and read
back with the pair rules of that API checked on the way (tests of the per-tool policy)."""

from __future__ import annotations

from typing import Any


def chat_payload(calls: list[tuple[str, str, str]]) -> dict[str, Any]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "look things up"}]
    for cid, name, output in calls:
        msgs.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": "{}"}}]})
        msgs.append({"role": "tool", "tool_call_id": cid, "content": output})
    return {"model": "m", "messages": msgs}


def chat_outputs(payload: dict[str, Any]) -> list[tuple[str, str, Any, bool]]:
    names: dict[str, str] = {}
    out = []
    for m in payload["messages"]:
        for c in m.get("tool_calls") or ():
            names[c["id"]] = c["function"]["name"]
        if m["role"] == "tool":
            assert m["tool_call_id"] in names  # answers a call made before it
            out.append((m["tool_call_id"], names[m["tool_call_id"]], m["content"], False))
    return out


def messages_payload(calls: list[tuple[str, str, str]]) -> dict[str, Any]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "look things up"}]
    for cid, name, output in calls:
        msgs.append({"role": "assistant", "content": [
            {"type": "text", "text": "calling"}, {"type": "tool_use", "id": cid, "name": name, "input": {}}]})
        msgs.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": cid, "content": [{"type": "text", "text": output}]}]})
    # Claude Code's shape: text parts inside the result, cache_control on the last one only
    # (Anthropic takes at most 4 breakpoints: "A maximum of 4 blocks with cache_control").
    msgs[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    # Anthropic refuses tool blocks in a request that declares no tools.
    tools = [{"name": n, "input_schema": {"type": "object"}} for n in dict.fromkeys(c[1] for c in calls)]
    return {"model": "claude", "max_tokens": 100, "messages": msgs, "tools": tools}


def messages_outputs(payload: dict[str, Any]) -> list[tuple[str, str, Any, bool]]:
    pending: dict[str, str] = {}
    out = []
    for m in payload["messages"]:
        blocks = m["content"] if isinstance(m["content"], list) else []
        if m["role"] == "assistant":
            assert not pending
            pending = {b["id"]: b["name"] for b in blocks if b["type"] == "tool_use"}
            continue
        results = [b for b in blocks if b["type"] == "tool_result"]
        assert {b["tool_use_id"] for b in results} == set(pending)  # all and only its calls' results
        assert blocks[: len(results)] == results  # tool_result blocks first in their message
        for b in results:
            assert b.get("cache_control") in (None, {"type": "ephemeral"})  # the client's mark, kept as given
            content = b["content"]
            text = content if isinstance(content, str) else "".join(p["text"] for p in content)
            out.append((b["tool_use_id"], pending[b["tool_use_id"]], text, b.get("is_error", False)))
        pending = {}
    return out


def responses_payload(calls: list[tuple[str, str, str]]) -> dict[str, Any]:
    items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "look"}]}]
    for cid, name, output in calls:
        items.append({"type": "function_call", "id": f"fc_{cid}", "call_id": cid, "name": name, "arguments": "{}"})
        items.append({"type": "function_call_output", "call_id": cid, "output": output})
    return {"model": "gpt-5-codex", "input": items}


def responses_outputs(payload: dict[str, Any]) -> list[tuple[str, str, Any, bool]]:
    names: dict[str, str] = {}
    out = []
    for item in payload["input"]:
        if item["type"] == "function_call":
            names[item["call_id"]] = item["name"]
        elif item["type"] == "function_call_output":
            assert item["call_id"] in names
            out.append((item["call_id"], names[item["call_id"]], item["output"], False))
    return out
