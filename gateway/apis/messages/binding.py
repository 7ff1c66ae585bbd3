"""Thinking replayed to a model that binds it to its prefix: asking Anthropic to drop, not refuse,
a block whose prefix changed, and the beta header that asking needs.

On the models ``claude_models.binds_thinking`` names, a replayed thinking or redacted_thinking
block is taken only behind the prefix it was written under: "The top-level ``system`` prompt,
``tools``, and ``messages`` before the block are its prefix. If the prefix differs from what you
sent when the block was produced, that block and every later thinking block are invalid"
(https://platform.claude.com/docs/en/build-with-claude/preserved-thinking), a 400 by default
("The block is bound to a different conversation") on every later turn of the session. The
documented remedy is ``thinking.block_binding.prefix_mismatch_behavior: "drop_block"`` with
``type: "adaptive"`` and the beta header ``anthropic-beta: thinking-binding-controls-2026-08-01``,
sent "on every request after that conversation, since the API does not store the setting"
(…/preserved-thinking/fix-bound-to-a-different-conversation, step 1). The field without the
header is itself a 400, "thinking.adaptive.block_binding: Extra inputs are not permitted"
(Amazon Bedrock's "Preserved thinking" page, claude-messages-thinking-block-binding).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gateway.apis.messages.claude_models import binds_thinking

DROP_BLOCK = "drop_block"
BINDING_BETA = "thinking-binding-controls-2026-08-01"
BETA_HEADER = "anthropic-beta"
THOUGHT = ("thinking", "redacted_thinking")


def dropping_bound(thinking: Any) -> dict[str, Any]:
    """The request's ``thinking`` asking Anthropic to drop, not refuse, the blocks whose prefix
    changed. "If your request did not set the thinking parameter, adding it does not change
    anything else, since models with preserved thinking think adaptively by default" (the fix
    page): the type is adaptive whatever it was. The blocks themselves stay as they were
    (signed: never edited). Any other binding setting the request had is kept."""
    kept = dict(thinking) if isinstance(thinking, dict) else {}
    binding = kept.get("block_binding")
    binding = {**(binding if isinstance(binding, dict) else {}), "prefix_mismatch_behavior": DROP_BLOCK}
    return {**kept, "type": "adaptive", "block_binding": binding}


def replays_thinking(messages: Iterable[Any]) -> bool:
    """Whether an assistant turn among ``messages`` holds a thinking or redacted_thinking block."""
    for m in messages:
        content = m.get("content") if isinstance(m, dict) and m.get("role") == "assistant" else None
        blocks = content if isinstance(content, list) else ()
        if any(isinstance(b, dict) and b.get("type") in THOUGHT for b in blocks):
            return True
    return False


def translated(out: dict[str, Any]) -> dict[str, Any]:
    """``out``, a request the gateway translated into Messages, asking for ``drop_block`` when it
    replays thinking to a model that binds it. The client cannot keep a prefix it never sees:
    the gateway writes it, and writes it differently from one turn to the next by its own rules
    (a forced tool choice sent as ``auto`` with the tools narrowed to the one named, where the
    next turn's ``auto`` sends them all; ``allowed_tools`` applied by narrowing ``tools``; a
    chat system message from mid-conversation moved into the top-level ``system``; stub tools
    for a compaction request that declares none; the conversation compressed after an
    overflow). Where the prefix is unchanged nothing is dropped; where it changed, the block
    goes instead of every later turn of the session failing. Thinking turned off replays no
    block (the translators leave them out), so it never needs this."""
    model = out.get("model")
    thinking = out.get("thinking")
    if not (isinstance(model, str) and binds_thinking(model)) or not isinstance(thinking, dict):
        return out
    if thinking.get("type") == "disabled" or not replays_thinking(out.get("messages") or ()):
        return out
    out["thinking"] = dropping_bound(thinking)
    return out


def betas(payload: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """The beta header a Messages body's fields need: ``block_binding`` is refused without it.
    Added to the headers with ``routing.headers.with_added``, which joins it to the betas the
    client or the config sent and never repeats one."""
    thinking = payload.get("thinking")
    if isinstance(thinking, dict) and "block_binding" in thinking:
        return ((BETA_HEADER, BINDING_BETA),)
    return ()
