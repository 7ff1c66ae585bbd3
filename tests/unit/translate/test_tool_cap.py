"""More tools than OpenAI's 128 on a translated chat request (``translate/tool_cap.py``).

OpenAI and Azure OpenAI refuse a chat request with more ("Invalid 'tools': array too long.
Expected an array with maximum length 128, but got an array with length 134 instead.", the fake's
chat_rules.py in OpenAI's words). Each request here is a real client's (tests/corpus/requests/)
with its own tools grown past the cap the way a large MCP server grows them: copies of one of its
tools under MCP names, as Claude Code (``mcp__<server>__<tool>``), Codex and Gemini CLI name
them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gateway.apis import DIALECT_FOR_API
from gateway.config import parse_config
from gateway.fake import chat_rules
from gateway.translate import Leg, default_translations
from gateway.translate.base import Refusal, Target
from gateway.translate.tool_cap import CHAT_MAX, host_max

CORPUS = Path(__file__).resolve().parents[2] / "corpus" / "requests"
TABLE = default_translations().table
OPENAI = Target("gpt-4.1", tools_max=128)  # a chat upstream at api.openai.com
LOCAL = Target("local-model")  # a chat server whose host caps nothing known (vLLM, llama.cpp)


def body(name: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads((CORPUS / f"{name}.json").read_text())["body"]
    return found


def with_mcp_tools(request: dict[str, Any], count: int, deferred: bool) -> dict[str, Any]:
    """Claude Code's request with ``count`` more tools, copies of its Read tool named as an MCP
    server's; ``deferred``: marked ``defer_loading``, as Anthropic's tool-search guide has a
    client send the tools it is to find."""
    read = next(t for t in request["tools"] if t["name"] == "Read")
    extra = [{**read, "name": f"mcp__github__tool_{n}", **({"defer_loading": True} if deferred else {})}
             for n in range(count)]  # fmt: skip
    return {**request, "tools": [*request["tools"], *extra]}


def sent(client: str, request: dict[str, Any], target: Target) -> dict[str, Any] | Refusal:
    return TABLE[client, "chat"].request(request, target)


def fake_takes(out: dict[str, Any] | Refusal) -> bool:
    assert isinstance(out, dict), out
    return chat_rules.refusal("/v1/chat/completions", out) is None


def test_deferred_tools_not_yet_loaded_are_left_out_over_the_cap() -> None:
    """Claude Code's ToolSearch round (it loaded CronList: a ``tool_reference`` in its result),
    with 130 more deferred tools: 143 in all. Over the cap, the deferred ones neither loaded nor
    called stay out, as Anthropic's API would show the model; the one loaded stays in."""
    request = with_mcp_tools(body("claude-code-2.1.332-tool-reference"), 130, deferred=True)
    assert len(request["tools"]) == 143
    for target in (OPENAI, LOCAL):
        out = sent("messages", request, target)
        assert fake_takes(out)
        assert isinstance(out, dict)
        names = [t["function"]["name"] for t in out["tools"]]
        assert "CronList" in names and "ToolSearch" in names and not any(n.startswith("mcp__") for n in names)
        assert len(names) == 12  # its 13, less its placeholder: no tool this conversation used


def test_a_deferred_tool_called_or_chosen_stays() -> None:
    request = with_mcp_tools(body("claude-code-2.1.332-tool-reference"), 130, deferred=True)
    request["tool_choice"] = {"type": "tool", "name": "mcp__github__tool_7"}
    out = sent("messages", request, OPENAI)
    assert isinstance(out, dict)
    assert "mcp__github__tool_7" in [t["function"]["name"] for t in out["tools"]]


def test_under_the_cap_every_tool_goes_up_front_as_before() -> None:
    request = with_mcp_tools(body("claude-code-2.1.332-tool-reference"), 100, deferred=True)
    out = sent("messages", request, OPENAI)
    assert isinstance(out, dict) and len(out["tools"]) == 113


def test_still_over_the_cap_on_openai_is_refused_naming_the_count_and_the_way_out() -> None:
    """Claude Code with tool search off (ENABLE_TOOL_SEARCH=false): every MCP tool, none deferred."""
    request = with_mcp_tools(body("claude-code-2.1.332-first"), 122, deferred=False)
    out = sent("messages", request, OPENAI)
    assert isinstance(out, Refusal) and out.code == "untranslatable_request"
    assert "133 tools" in out.message and "at most 128" in out.message  # 134, less its placeholder
    assert "ENABLE_TOOL_SEARCH=true" in out.message and "Messages or Responses" in out.message
    assert "mcp__github" not in out.message  # no tool of the client's is quoted


def test_a_server_whose_host_caps_nothing_gets_them_all() -> None:
    request = with_mcp_tools(body("claude-code-2.1.332-first"), 122, deferred=False)
    out = sent("messages", request, LOCAL)
    assert isinstance(out, dict) and len(out["tools"]) == 133  # all but the deferred placeholder


def test_on_to_another_api_through_chat_nothing_is_left_out() -> None:
    """Messages → chat → Responses: the chat request is no chat server's to refuse."""
    request = with_mcp_tools(body("claude-code-2.1.332-tool-reference"), 130, deferred=True)
    out = TABLE["messages", "responses"].request(request, Target("gpt-4.1", tools_max=None))
    assert isinstance(out, dict) and len(out["tools"]) == 143


def test_codex_and_gemini_cli_over_the_cap_are_refused_on_openai() -> None:
    codex = body("codex-0.169-first")
    function = next(t for t in codex["tools"] if t.get("type") == "function")
    codex = {**codex, "tools": [*codex["tools"], *({**function, "name": f"mcp__github__tool_{n}"} for n in range(130))]}
    out = sent("responses", codex, OPENAI)
    assert isinstance(out, Refusal) and "at most 128" in out.message and "Responses" in out.message
    assert fake_takes(sent("responses", codex, LOCAL)) is False  # the fake, as OpenAI, refuses it

    gemini = body("gemini-cli-0.61-first")
    [decl] = gemini["tools"][0]["functionDeclarations"][:1]
    many = [{"functionDeclarations": [{**decl, "name": f"github__tool_{n}"} for n in range(CHAT_MAX + 1)]}]
    out = sent("gemini", {**gemini, "tools": many}, OPENAI)
    assert isinstance(out, Refusal) and f"{CHAT_MAX + 1} tools" in out.message and "includeTools" in out.message
    out = sent("gemini", {**gemini, "tools": many}, LOCAL)
    assert isinstance(out, dict) and len(out["tools"]) == CHAT_MAX + 1


def test_the_cap_is_known_by_host() -> None:
    assert host_max("https://api.openai.com/v1") == 128
    assert host_max("https://my-resource.openai.azure.com/openai/v1") == 128
    assert host_max("http://127.0.0.1:8000/v1") is None
    assert host_max("https://openrouter.ai/api/v1") is None
    config = parse_config("upstreams:\n  - {name: openai, base_url: 'https://api.openai.com/v1', apis: [chat]}\n", env={})
    leg = default_translations().leg_for(DIALECT_FOR_API["messages"], config.upstreams[0], "gpt-4.1")
    assert isinstance(leg, Leg) and leg.target is not None and leg.target.tools_max == 128
