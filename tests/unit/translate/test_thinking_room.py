"""A translated thinking budget leaves the answer its share of the output limit (``thinking_room``).

The audit drove the OpenAI Agents SDK 0.24.0 with a reasoning effort beside ``max_tokens``:
on a Gemini upstream ``maxOutputTokens: 256`` went with ``thinkingBudget: 1024`` and 4,096 with
24,576 (Gemini counts thoughts against the limit: an empty answer ending MAX_TOKENS), and on an
Anthropic one the budget was ``max_tokens − 1``, one token for the answer or tool call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.fake import gemini_rules, messages_rules
from gateway.translate import default_translations, thinking_room
from gateway.translate.base import Refusal, Target

REQUESTS = Path(__file__).resolve().parents[2] / "corpus" / "requests"
TABLE = default_translations().table


def client_request(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((REQUESTS / f"{name}.json").read_text())["body"]
    return body


# The SDK's ModelSettings(reasoning=Reasoning(effort="high"), max_tokens=4096), as it sent them.
AGENTS = client_request("agents-sdk-0.24-effort-max-tokens")


def sdk(effort: str, limit: int) -> dict[str, Any]:
    """The captured request with the other settings the audit ran, in the fields the SDK wrote."""
    return {**AGENTS, "reasoning": {"effort": effort}, "max_output_tokens": limit}


def sent(client: str, upstream: str, payload: dict[str, Any], model: str) -> dict[str, Any]:
    out = TABLE[client, upstream].request(payload, Target(model))
    assert not isinstance(out, Refusal), out
    return out


def test_the_captured_request_names_an_effort_and_a_limit() -> None:
    assert AGENTS["reasoning"] == {"effort": "high"} and AGENTS["max_output_tokens"] == 4096


@pytest.mark.parametrize(("limit", "room"), [(256, -768), (2047, 1023), (2048, 1024), (4096, 3072),
                                             (8000, 6000), (21333, 16000), (64000, 48000)])  # fmt: skip
def test_the_answer_keeps_a_quarter_and_never_under_1024(limit: int, room: int) -> None:
    assert thinking_room.room(limit) == room


@pytest.mark.parametrize(("model", "effort", "limit", "budget"), [
    ("gemini-2.5-flash", "high", 4096, 3072),  # was 24,576 under 4,096
    ("gemini-2.5-pro", "high", 4096, 3072),
    ("gemini-2.5-flash", "medium", 2000, 976),  # was 8,192 under 2,000
    ("gemini-2.5-flash", "low", 256, 0),  # was 1,024 under 256: no room, thinking off
    ("gemini-2.5-flash-lite", "medium", 1400, 0),  # 376 is under Flash-Lite's least (512): off
    ("gemini-2.5-pro", "low", 256, 128),  # Pro cannot stop thinking: its least
    ("gemini-2.5-pro", "medium", 1400, 376),
    ("gemini-3-pro-preview", "low", 256, 512),  # only thinks: the least every effort sends
    ("gemini-2.5-flash", "high", 64000, 24576),  # room enough: the effort's own budget
])  # fmt: skip
def test_the_agents_sdk_on_gemini_leaves_its_answer_room(model: str, effort: str, limit: int, budget: int) -> None:
    out = sent("responses", "gemini", sdk(effort, limit), model)
    config = out["generationConfig"]
    assert config["maxOutputTokens"] == limit  # never raised: a key's spend is reserved on it
    assert config["thinkingConfig"]["thinkingBudget"] == budget
    # Thoughts are asked for only where there is thinking to show.
    assert config["thinkingConfig"].get("includeThoughts", False) is (budget > 0)
    wire = {k: v for k, v in out.items() if k not in ("model", "stream")}  # those go in the URL
    assert gemini_rules.refusal(wire, model=model) is None


def test_a_chat_client_on_gemini_gets_the_same_rule() -> None:
    chat = {"model": "m", "messages": [{"role": "user", "content": "2+2?"}], "reasoning_effort": "high",
            "max_tokens": 4096}  # fmt: skip
    out = sent("chat", "gemini", chat, "gemini-2.5-flash")
    assert out["generationConfig"]["thinkingConfig"]["thinkingBudget"] == 3072
    unbounded = sent("chat", "gemini", {**chat, "max_tokens": None}, "gemini-2.5-flash")
    assert unbounded["generationConfig"]["thinkingConfig"]["thinkingBudget"] == 24576  # no limit to share


@pytest.mark.parametrize(("model", "config"), [
    ("gemini-2.5-flash", {"thinkingBudget": 0}),  # can stop: off
    ("models/gemini-2.5-flash-lite", {"thinkingBudget": 0}),
    ("gemini-2.5-pro", {"thinkingBudget": 128}),  # cannot stop (0 is refused): its least
    ("gemini-3-pro-preview", {"thinkingLevel": "low"}),  # thinks HIGH unless asked; low is its least
    ("gemini-3.1-pro-preview", {"thinkingLevel": "low"}),
    ("gemini-3-flash-preview", {"thinkingLevel": "minimal"}),
    ("gemini-3.7-flash", {"thinkingLevel": "low"}),  # refuses minimal
    ("gemini-2.0-flash", None),  # does not think
    # No version, no known least: the model's own default, not a guess. 512 turned thinking ON
    # for the Flash-Lite alias (its default is off) and is refused by a model that does not
    # think ("Thinking is not enabled for models/…", review).
    ("gemini-flash-latest", None),
    ("gemini-flash-lite-latest", None),
    ("gemini-pro-latest", None),
    ("gemma-3-27b-it", None),
    ("gemini-2.5-flash-image-preview", None),  # "Thinking is not enabled for models/gemini-2.5-flash-image-preview"
    ("gemini-2.5-computer-use-preview-10-2025", None),  # a 2.5 name outside the budgets table
])  # fmt: skip
def test_no_reasoning_asked_of_gemini_is_the_least_the_model_does(model: str, config: dict[str, Any] | None) -> None:
    """``reasoning_effort: "none"`` sent no thinkingConfig, and the model's default thinking ran."""
    chat = {"model": "m", "messages": [{"role": "user", "content": "2+2?"}], "reasoning_effort": "none"}
    out = sent("chat", "gemini", chat, model)
    assert out.get("generationConfig", {}).get("thinkingConfig") == config
    wire = {k: v for k, v in out.items() if k not in ("model", "stream")}
    assert gemini_rules.refusal(wire, model=model.removeprefix("models/")) is None


@pytest.mark.parametrize(("model", "effort", "limit", "budget"), [
    ("claude-sonnet-4-5", "high", 4096, 3072),  # was 4,095
    ("claude-sonnet-4-5", "medium", 2000, None),  # 976 is under Anthropic's 1,024: no thinking
    ("claude-sonnet-4-5", "xhigh", 21333, 16000),  # was 21,332
    ("claude-sonnet-4-5", "low", 8000, 2048),  # room enough: the effort's own budget
])  # fmt: skip
def test_the_agents_sdk_on_claude_leaves_its_answer_room(
    model: str, effort: str, limit: int, budget: int | None
) -> None:
    out = sent("responses", "messages", sdk(effort, limit), model)
    assert out["max_tokens"] == limit
    assert out.get("thinking") == ({"type": "enabled", "budget_tokens": budget} if budget else None)
    assert messages_rules.refusal("/v1/messages", out, {}) is None


def test_a_default_max_tokens_is_shared_the_same_way() -> None:
    """No limit from the client: the model's default (4,096 for a name the table lacks) is."""
    body = {k: v for k, v in AGENTS.items() if k != "max_output_tokens"}
    out = sent("responses", "messages", body, "some-claude-proxy")
    assert out["max_tokens"] == 4096 and out["thinking"] == {"type": "enabled", "budget_tokens": 3072}


@pytest.mark.parametrize(("budget", "limit", "claude"), [
    (1500, 2000, 1500),  # the client's own split, taken as asked (was raised to 2,048, then 1,999)
    (8192, 40000, 8192),
    (9000, 40000, 9000),  # was rounded up to the next effort's 16,384
    (500, 4000, 1024),  # under Anthropic's least: raised to it, where it fits
    (500, 2000, None),  # ... and where it does not, no thinking
    (5000, 4000, 2976),  # at or over max_tokens, Anthropic's refusal: the answer's share kept
])  # fmt: skip
def test_a_budget_a_gemini_client_named_goes_to_claude_as_asked(budget: int, limit: int, claude: int | None) -> None:
    gemini = client_request("gemini-cli-0.61-first")
    gemini["generationConfig"] = {**gemini["generationConfig"], "maxOutputTokens": limit,
                                  "thinkingConfig": {"includeThoughts": True, "thinkingBudget": budget}}  # fmt: skip
    out = sent("gemini", "messages", gemini, "claude-sonnet-4-5")
    assert out.get("thinking") == ({"type": "enabled", "budget_tokens": claude} if claude else None)
    assert messages_rules.refusal("/v1/messages", out, {}) is None


def test_gemini_clis_own_budget_reaches_claude_unchanged() -> None:
    """Gemini CLI 0.61 sends ``thinkingBudget: 8192`` and no limit: the default (64,000) holds it."""
    out = sent("gemini", "messages", client_request("gemini-cli-0.61-first"), "claude-sonnet-4-5")
    assert out["thinking"] == {"type": "enabled", "budget_tokens": 8192}


def test_a_named_budget_on_an_adaptive_claude_goes_as_its_effort() -> None:
    """Opus 4.7 takes levels only: the budget is rounded to one there, as before."""
    gemini = client_request("gemini-cli-0.61-first")
    out = sent("gemini", "messages", gemini, "claude-opus-4-7")
    assert out["thinking"] == {"type": "adaptive"} and out["output_config"]["effort"] == "medium"
