"""Reasoning an upstream will not take back, left out so that the conversation goes on.

What a provider returns of its model's reasoning comes back signed, and the signature holds
only where it was issued: Anthropic's thinking ``signature``, OpenAI's reasoning
``encrypted_content`` and Gemini's ``thoughtSignature`` are bound to the account that made them
(sub2api #393 for Gemini, happyclaw #474 for Anthropic, sub2api #2863 for OpenAI, all met when a
pool moved a conversation to another account). A conversation moved to another key of a pool,
to a fallback, or back from a deployment the gateway translated (whose thinking it could not
sign) carries values the new upstream refuses, on every turn after, until the client starts a
new one:

- Anthropic: "messages.1.content.0: Invalid `signature` in `thinking` block" (better-ccflare
  #52, forgecode #2646); Bedrock the same without the backticks (cc-connect #897); and
  "`thinking` or `redacted_thinking` blocks in the latest assistant message cannot be
  modified" (claude-code #63284);
- OpenAI: ``invalid_encrypted_content``, "The encrypted content for item rs_… could not be
  verified. Reason: Encrypted content could not be decrypted or parsed." (codex #8145,
  vscode-unify-chat-provider #178); and a reasoning item it holds no record of, the
  gateway's own included (a conversation translated from chat, where reasoning has no
  encrypted form, moved to an OpenAI deployment): 404 "Item with id 'rs_…' not found. Items
  are not persisted when `store` is set to false. …" (oh-my-pi #41);
- Gemini: "Corrupted thought signature." (gemini-cli #13467), Vertex's "Unable to submit
  request because Thought signature is not valid." (9router #301), "Invalid thought
  signature." (Antigravity-Manager #3342).

``strip`` writes the request once more without them, in the upstream's API: Anthropic's
thinking blocks are left out of the history (and thinking turned off for this request when
the tool loop in progress then lacks the thinking block Anthropic requires it to start with);
OpenAI's reasoning items are left out (an item is either sealed for an account or a record
of one); Gemini's signatures become the value Google's
thought-signatures page gives for history from elsewhere. Only the model's earlier reasoning is
lost, which the client never showed; the answer is asked for as before.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from gateway.apis.messages.claude_models import DISABLED, LEAST, thinking_for

# How the gateway carries Claude's signed thinking in a Responses reasoning item's
# ``encrypted_content`` and a Gemini part's ``thoughtSignature`` (``translate/sealed_thinking.py``):
# no OpenAI account or Gemini model reads it.
GATEWAY_THINKING_MARK = "llm-gateway.thinking.v1:"
# Google's value for a signature it did not issue: "skip_thought_signature_validator"
# (https://ai.google.dev/gemini-api/docs/thought-signatures, FAQ).
GEMINI_SKIP = "skip_thought_signature_validator"
_SIGNATURE_KEYS = ("thoughtSignature", "thought_signature")  # Gemini's JSON and its proto spelling

_REFUSALS = re.compile(
    r"invalid\s+`?signature`?\s+in\s+`?thinking`?\s+block"
    r"|`?thinking`?\s+or\s+`?redacted_thinking`?\s+blocks\s+in\s+the\s+latest\s+assistant\s+message\s+cannot\s+be\s+modified"
    r"|expected\s+`?thinking`?\s+or\s+`?redacted_thinking`?,?\s+but\s+found"
    r"|encrypted\s+content\b.{0,300}?\bcould\s+not\s+be\s+verified"
    r"|item\s+with\s+id\s+'rs_[^']*'\s+not\s+found"
    r"|corrupted\s+thought\s+signature"
    r"|thought\s+signature\s+is\s+not\s+valid"
    r"|invalid\s+thought\s+signature",
    re.IGNORECASE | re.DOTALL,
)
# Anthropic's tool-loop rule, met when a loop's turn came from where thinking was off or not
# signed (a key that answered with thinking left out, a chat relay): "messages.3.content.0.type:
# Expected `thinking` or `redacted_thinking`, but found `tool_use`. When `thinking` is enabled, a
# final `assistant` message must start with a thinking block (preceeding the lastmost set of
# `tool_use` and `tool_result` blocks). ... To avoid this requirement, disable `thinking`."
# (opencode #3077, kilocode #5219, mastra #7799).
_UNTHOUGHT = re.compile(
    r"expected\s+`?thinking`?\s+or\s+`?redacted_thinking`?,?\s+but\s+found", re.IGNORECASE
)
THOUGHT = ("thinking", "redacted_thinking")  # Messages block types that carry signed thinking
# Whether a thinking block, a reasoning item or a signed Gemini part is to be left out.
Foreign = Callable[[Mapping[str, Any]], bool]


def refused_reasoning(message: str | None, body: bytes = b"") -> bool:
    """Whether an upstream's refusal is of reasoning it did not issue (or cannot read)."""
    if message and _REFUSALS.search(message):
        return True
    return b"invalid_encrypted_content" in body[:65536]


def refused_unthought(message: str | None) -> bool:
    """Whether a Messages refusal is of a tool loop whose turn does not start with thinking."""
    return bool(message) and _UNTHOUGHT.search(message or "") is not None


def strip(api: str, doc: Mapping[str, Any], foreign: Foreign | None = None) -> dict[str, Any] | None:
    """``doc`` (a request in ``api``) without the reasoning an upstream may refuse as foreign:
    the thinking blocks, reasoning items or signed parts ``foreign`` says are, when given, else
    every one; None when it carries none."""
    if api == "messages":
        out = thinking_left_out(doc, foreign=foreign)
        return None if out is None else loop_unthought(out) or out
    if api == "responses":
        return _responses(doc, foreign)
    if api == "gemini":
        return _gemini(doc, foreign)
    return None  # chat carries no signed reasoning


def thinking_left_out(
    doc: Mapping[str, Any], since: int = 0, foreign: Foreign | None = None
) -> dict[str, Any] | None:
    """A Messages request without the thinking and redacted_thinking blocks of its assistant
    turns from ``messages[since]`` on (those before it kept as they are), only those
    ``foreign`` says are when given; None when there are none."""
    messages = doc.get("messages")
    if not isinstance(messages, list):
        return None
    turns = [i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "assistant"]
    last = turns[-1] if turns else -1
    kept_messages: list[Any] = []
    removed = last_lost = False
    lost: set[int] = set()  # the assistant turns that lost a block, by identity
    for i, m in enumerate(messages):
        owned = i >= since and isinstance(m, dict) and m.get("role") == "assistant"
        content = m.get("content") if owned else None
        if isinstance(content, list):
            kept = [b for b in content if not _left_out(b, foreign)]
            if len(kept) != len(content):
                removed = True
                last_lost = last_lost or i == last
                if not kept:
                    continue  # a turn that was thinking alone says nothing to the model
                m = {**m, "content": kept}
                lost.add(id(m))
        kept_messages.append(m)
    if not removed:
        return None
    out = {**doc, "messages": kept_messages}
    loop_lost = any(id(kept_messages[i]) in lost for i in _open_loop(kept_messages))
    if loop_lost and thinks(doc) and _always_thinks(doc):
        # A model that thinks on every request takes no step of this loop without its thinking.
        _loop_in_words(out)
    elif last_lost and _calls_tools(messages[last]) and thinks(doc):
        # Anthropic: "When `thinking` is enabled, a final `assistant` message must start with a
        # thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks)";
        # the loop's own block is the one left out, so this request is asked without thinking.
        _unthought(out)
    return out


def _left_out(block: Any, foreign: Foreign | None) -> bool:
    return isinstance(block, dict) and block.get("type") in THOUGHT and (foreign is None or foreign(block))


def loop_unthought(
    doc: Mapping[str, Any], asked_off: Callable[[str], bool] | None = None
) -> dict[str, Any] | None:
    """``doc`` asked without thinking while the tool loop in progress began without it; None
    when the rule does not apply (thinking off, no loop open, or its turn starts with thinking).
    ``asked_off``: whether the gateway asked a request holding this tool call without thinking;
    when given, the rule applies only to a loop it did so for (a turn without thinking is also
    what an adaptive model that chose not to think answers, which Anthropic takes back as it
    came: thinking is left as the client asked there, and its prompt cache with it). Without it
    (after Anthropic refused the step) any such loop.

    Anthropic wants the loop's assistant turn to start with its thinking block while thinking is
    on ("Expected `thinking` or `redacted_thinking`, but found `tool_use`", ``_UNTHOUGHT``), and
    says "a tool-use loop is one assistant turn, so change the configuration only between turns"
    (https://platform.claude.com/docs/build-with-claude/thinking-tool-workflows). A turn
    answered with thinking off (this module's own rescue, another key) or by a chat
    relay has no such block: the loop goes on without thinking until the user's next turn, when
    the request asks with thinking as the client wrote it. Only the last two messages are read."""
    messages = doc.get("messages")
    if not thinks(doc) or not isinstance(messages, list) or len(messages) < 2:
        return None
    turn, results = messages[-2], messages[-1]
    if not (isinstance(results, dict) and results.get("role") == "user" and _has(results, "tool_result")):
        return None
    if not (isinstance(turn, dict) and turn.get("role") == "assistant" and _calls_tools(turn)):
        return None
    content = turn.get("content")
    assert isinstance(content, list)  # _calls_tools read it
    first = content[0]
    if isinstance(first, dict) and first.get("type") in THOUGHT:
        return None
    if asked_off is not None and not any(asked_off(i) for i in loop_calls(messages[:-2])):
        return None
    out = dict(doc)
    _unthought(out)
    return out


def _unthought(out: dict[str, Any]) -> None:
    """``out`` (a copy of the request, changed in place) asked so that its tool loop's last turn
    may go without the thinking block it has not: without thinking where the model thinks only
    when asked; with ``thinking: {type: disabled}`` where it thinks on a request without it
    (``claude_models.DISABLED``: Opus and Sonnet 5, at effort high at most, as their migration
    guide takes "disabled"); and where it thinks on every request and refuses "disabled"
    (``LEAST``: Opus and Sonnet 5.5, Fable and Mythos 5 on) with the loop's turns and their
    results said in words (``_loop_in_words``): there is no request of that loop such a model
    takes."""
    model = out.get("model")
    off = thinking_for(model).off if isinstance(model, str) else ""
    if off == LEAST:
        _loop_in_words(out)
        return
    out.pop("thinking", None)
    _without_thinking_edits(out)
    if off == DISABLED:
        out["thinking"] = {"type": "disabled"}
        config = out.get("output_config")
        if isinstance(config, dict) and config.get("effort") in ("xhigh", "max"):
            out["output_config"] = {**config, "effort": "high"}


def _always_thinks(doc: Mapping[str, Any]) -> bool:
    model = doc.get("model")
    return isinstance(model, str) and thinking_for(model).off == LEAST


def _open_loop(messages: list[Any]) -> list[int]:
    """The indexes of the assistant turns of the tool loop ``messages`` end in (``loop_calls``)."""
    found: list[int] = []
    i = len(messages) - 1
    while i >= 1:
        results, turn = messages[i], messages[i - 1]
        if not (isinstance(results, dict) and results.get("role") == "user" and _has(results, "tool_result")):
            break
        if not (isinstance(turn, dict) and turn.get("role") == "assistant" and _calls_tools(turn)):
            break
        found.append(i - 1)
        i -= 2
    return found


def _loop_in_words(out: dict[str, Any]) -> None:
    """The tool loop in progress, each of its turns' calls and the results after them, as text:
    the request then ends on a user turn of text (and any images a result held), which the model
    reads and thinks on, where a step of the loop without its thinking is refused on a model that
    always thinks (Anthropic holds every step of the loop to it). Other blocks stay as they were."""
    messages = list(out["messages"])
    for at in _open_loop(messages):
        messages[at], messages[at + 1] = _in_words(messages[at], messages[at + 1])
    out["messages"] = messages


def _in_words(turn: dict[str, Any], results: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    names: dict[Any, Any] = {}
    said: list[dict[str, Any]] = []
    for block in turn["content"]:
        if _is_call(block):
            names[block.get("id")] = block.get("name")
            called = f"[called the tool {block.get('name')} (id {block.get('id')})"
            said.append({"type": "text", "text": f"{called} with {json.dumps(block.get('input'))}]"})
        elif not (isinstance(block, dict) and block.get("type") in THOUGHT):
            said.append(block)
    answered: list[dict[str, Any]] = []
    for block in results["content"]:
        if not (isinstance(block, dict) and block.get("type") == "tool_result"):
            answered.append(block)
            continue
        inner = block.get("content")
        parts = [{"type": "text", "text": inner}] if isinstance(inner, str) else inner
        parts = parts if isinstance(parts, list) else []
        given = [p.get("text") for p in parts if isinstance(p, dict) and p.get("type") == "text"]
        texts: list[str] = [t for t in given if isinstance(t, str) and t]
        failed = " (an error)" if block.get("is_error") else ""
        call = block.get("tool_use_id")
        head = f"[the tool {names.get(call, 'call')} (id {call}) returned{failed}:]"
        answered.append({"type": "text", "text": "\n".join([head, *texts]) if texts else f"{head} nothing"})
        answered += [p for p in parts if isinstance(p, dict) and p.get("type") == "image"]
    return {**turn, "content": said}, {**results, "content": answered}


def thinks(doc: Mapping[str, Any]) -> bool:
    """Whether a Messages request is asked with thinking: on as it says, or, saying nothing, on
    a model that thinks on a request without it (``claude_models``: Opus and Sonnet 5 on, Fable,
    Mythos)."""
    if _thinking_on(doc):
        return True
    model = doc.get("model")
    unasked = isinstance(model, str) and thinking_for(model).off in (DISABLED, LEAST)
    return doc.get("thinking") is None and unasked


def loop_calls(messages: list[Any]) -> list[str]:
    """The tool_use ids of the tool loop that ``messages`` end in: its assistant turns back to
    the user's last message that is not only tool results."""
    return [b["id"] for at in _open_loop(messages) for b in messages[at]["content"]
            if _is_call(b) and isinstance(b.get("id"), str)]  # fmt: skip


def _is_call(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "tool_use"


def _has(message: Mapping[str, Any], kind: str) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == kind for b in content)


def _calls_tools(message: Any) -> bool:
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return False
    return any(isinstance(b, dict) and b.get("type") == "tool_use" for b in content)


def _thinking_on(doc: Mapping[str, Any]) -> bool:
    thinking = doc.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")


def _without_thinking_edits(out: dict[str, Any]) -> None:
    """Context edits that clear thinking need thinking on (Claude Code sends
    ``clear_thinking_20251015``): they go with it."""
    cm = out.get("context_management")
    if not isinstance(cm, dict) or not isinstance(edits := cm.get("edits"), list):
        return
    kept = [
        e for e in edits if not (isinstance(e, dict) and str(e.get("type", "")).startswith("clear_thinking"))
    ]
    if len(kept) == len(edits):
        return
    if kept:
        out["context_management"] = {**cm, "edits": kept}
    else:
        rest = {k: v for k, v in cm.items() if k != "edits"}
        if rest:
            out["context_management"] = rest
        else:
            del out["context_management"]


def _responses(doc: Mapping[str, Any], foreign: Foreign | None) -> dict[str, Any] | None:
    items = doc.get("input")
    if not isinstance(items, list):
        return None
    kept = [
        i for i in items
        if not (isinstance(i, dict) and i.get("type") == "reasoning" and (foreign is None or foreign(i)))
    ]  # fmt: skip
    return None if len(kept) == len(items) else {**doc, "input": kept}


def _gemini(doc: Mapping[str, Any], foreign: Foreign | None) -> dict[str, Any] | None:
    contents = doc.get("contents")
    if not isinstance(contents, list):
        return None
    changed = False
    out_contents: list[Any] = []
    for c in contents:
        parts = c.get("parts") if isinstance(c, dict) else None
        if isinstance(parts, list):
            new_parts: list[Any] = []
            for p in parts:
                signed = _signed_keys(p)
                if signed and (foreign is None or foreign(p)):
                    p = {**p, **dict.fromkeys(signed, GEMINI_SKIP)}
                    changed = True
                new_parts.append(p)
            c = {**c, "parts": new_parts}
        out_contents.append(c)
    return {**doc, "contents": out_contents} if changed else None


def _signed_keys(part: Any) -> list[str]:
    if not isinstance(part, dict):
        return []
    return [k for k in _SIGNATURE_KEYS if k in part and part[k] != GEMINI_SKIP]


def gemini_without_gateway_thinking(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """A Gemini request whose parts carry Claude's thinking sealed in the gateway's own
    ``thoughtSignature`` (``translate/gemini_chat``: a conversation that moved from a Claude
    route to a Gemini one) with Google's stand-in there instead, as for any signature Google
    did not issue (it refuses them: "Corrupted thought signature."); None when there are none.
    Google's own signatures are left as they are."""
    mark = GATEWAY_THINKING_MARK

    def sealed(part: Mapping[str, Any]) -> bool:
        return any(isinstance(part.get(k), str) and part[k].startswith(mark) for k in _SIGNATURE_KEYS)

    return _gemini(doc, sealed)


def without_gateway_thinking(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """A Responses request without the reasoning items that carry Claude's thinking in the
    gateway's own ``encrypted_content`` (a conversation that moved from a Claude deployment to
    an OpenAI one: OpenAI refuses them as ``invalid_encrypted_content``, whichever account);
    None when there are none."""
    mark = GATEWAY_THINKING_MARK
    items = doc.get("input")
    if not isinstance(items, list):
        return None
    kept = [
        i for i in items
        if not (isinstance(i, dict) and i.get("type") == "reasoning"
                and isinstance(i.get("encrypted_content"), str) and i["encrypted_content"].startswith(mark))
    ]  # fmt: skip
    return None if len(kept) == len(items) else {**doc, "input": kept}
