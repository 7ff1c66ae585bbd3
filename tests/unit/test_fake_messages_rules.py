"""The fake's Messages endpoint refuses what Anthropic refuses, in Anthropic's words
(gateway/fake/messages_rules.py), and takes what Anthropic takes."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.fake.messages import sign
from gateway.fake.messages_rules import (
    ADAPTIVE,
    BOTH,
    ENABLED,
    bound_thinking,
    prefix,
    preserves_thinking,
    refusal,
    thinking_types,
    thought_calls,
    unthought_calls,
)
from gateway.fake.steps import Reply, Stream
from gateway.fake.upstream import FakeUpstream
from tests import images

PATH = "/v1/messages"
CORPUS = Path(__file__).parents[1] / "corpus" / "requests"
BETA = {"anthropic-beta": "claude-code-20250219,mid-conversation-system-2026-04-07"}


def user(*blocks: Any) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def assistant(*blocks: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": list(blocks)}


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def call(i: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": i, "name": "Bash", "input": {"command": "ls"}}


def result(i: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": i, "content": "ok"}


BASH = [{"name": "Bash", "input_schema": {"type": "object"}}]  # the tool ``call`` calls


def refused(messages: list[dict[str, Any]], headers: dict[str, str] | None = None, **payload: Any) -> str | None:
    reply = refusal(PATH, {"model": "claude-x", "max_tokens": 4096, "messages": messages, **payload}, headers or {})
    if reply is None:
        return None
    assert reply.status == 400 and reply.body["error"]["type"] == "invalid_request_error"
    return str(reply.body["error"]["message"])


@pytest.mark.parametrize(("messages", "words"), [
    ([], "messages: at least one message is required"),
    ([user(text("hi")), {"role": "tool", "content": "x"}], "messages.1.role: Input should be 'user' or 'assistant'"),
    ([user(text(""))], "messages: text content blocks must be non-empty"),
    ([{"role": "user", "content": ""}], "messages: text content blocks must be non-empty"),
    ([user(text("hi")), assistant(call("toolu_1")), user(text("go on"))],
     "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_1"),
    ([user(text("hi")), assistant(call("toolu_1"), call("toolu_2")), user(result("toolu_1"))],
     "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_2"),
    ([user(text("hi")), assistant(text("ok")), user(result("toolu_9"))],
     "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_9. Each `tool_result` "
     "block must have a corresponding `tool_use` block in the previous message."),
])  # fmt: skip
def test_what_anthropic_refuses(messages: list[dict[str, Any]], words: str) -> None:
    assert refused(messages) == words


def image(media_type: str) -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": "AAAA"}}


IMAGE_TYPES = "Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'"


@pytest.mark.parametrize(("messages", "words"), [
    ([user(text("look"), image("image/heic"))], f"messages.0.content.1.image.source.base64.media_type: {IMAGE_TYPES}"),
    ([user(text("hi")), assistant(call("toolu_1")),
      user({"type": "tool_result", "tool_use_id": "toolu_1", "content": [text("shot"), image("image/jpg")]})],
     f"messages.2.content.0.tool_result.content.1.image.source.base64.media_type: {IMAGE_TYPES}"),
    ([user(image("image/jpeg"), image("image/png"), image("image/gif"), image("image/webp"))], None),
    ([user(text("see"), {"type": "image", "source": {"type": "url", "url": "https://x/y.heic"}})], None),
])  # fmt: skip
def test_image_types_anthropic_reads(messages: list[dict[str, Any]], words: str | None) -> None:
    assert refused(messages) == words


def sent(media_type: str, raw: bytes, pad: int = 0) -> dict[str, Any]:
    data = base64.b64encode(raw).decode() + "A" * pad
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}


JPEG_BYTES = bytes.fromhex("ffd8ffe000104a46494600010100000100010000ffd9")
PNG_BYTES = bytes.fromhex("89504e470d0a1a0a0000000d49484452")
GIF_BYTES = b"GIF89a\x01\x00\x01\x00\x00\x00\x00"
WEBP_BYTES = b"RIFF\x24\x00\x00\x00WEBPVP8 \x18\x00"
BYTES = {"jpeg": JPEG_BYTES, "png": PNG_BYTES, "gif": GIF_BYTES, "webp": WEBP_BYTES, "none": b"\x00\x00\x00"}
MISMATCH = "image.source.base64.data: Image does not match the provided media type"


@pytest.mark.parametrize(("media_type", "kind"), [
    ("image/png", "jpeg"), ("image/jpeg", "png"), ("image/png", "gif"), ("image/png", "webp"), ("image/webp", "jpeg"),
])  # fmt: skip
def test_an_image_whose_bytes_are_another_type_than_it_says_claude_code_15746(media_type: str, kind: str) -> None:
    """"messages.6.content.5.image.source.base64.data: Image does not match the provided media
    type image/png" (claude-code #15746, request id req_011CWbuFhX2ANTVJZ26ipGzh; #13131 and #11918
    for image/jpeg), in a tool result too; and the session stays stuck, the image in its history."""
    raw = BYTES[kind]
    assert refused([user(text("look"), sent(media_type, raw))]) == f"messages.0.content.1.{MISMATCH} {media_type}"
    in_result = [user(text("hi")), assistant(call("toolu_1")),
                 user({"type": "tool_result", "tool_use_id": "toolu_1", "content": [sent(media_type, raw)]})]
    assert refused(in_result, tools=BASH) == f"messages.2.content.0.tool_result.content.0.{MISMATCH} {media_type}"


@pytest.mark.parametrize(("media_type", "kind"), [
    ("image/jpeg", "jpeg"), ("image/png", "png"), ("image/gif", "gif"), ("image/webp", "webp"),
    ("image/png", "none"),  # bytes of no type the fake knows: not judged
])  # fmt: skip
def test_an_image_whose_bytes_are_what_it_says_is_taken(media_type: str, kind: str) -> None:
    assert refused([user(text("look"), sent(media_type, BYTES[kind]))]) is None


def test_an_image_over_5_mb_of_base64_lobehub_14711() -> None:
    """"messages.1.content.2.image.source.base64: image exceeds 5 MB maximum: 6275800 bytes >
    5242880 bytes" (lobehub #14711: the limit is on the base64 text, 4/3 of the file; "messages.8.
    content.0.tool_result.content.0.image.source.base64: image exceeds 5 MB maximum: 17699328 bytes
    > 5242880 bytes", claude-code #8227, with its request id)."""
    limit = 5 * 1024 * 1024
    at_limit = sent("image/png", PNG_BYTES, pad=limit - len(base64.b64encode(PNG_BYTES)))
    assert len(at_limit["source"]["data"]) == limit and refused([user(at_limit)]) is None
    over = sent("image/png", PNG_BYTES, pad=limit + 4 - len(base64.b64encode(PNG_BYTES)))
    words = f"image.source.base64: image exceeds 5 MB maximum: {limit + 4} bytes > {limit} bytes"
    assert refused([user(text("look"), over)]) == f"messages.0.content.1.{words}"
    in_result = [user(text("hi")), assistant(call("toolu_1")),
                 user({"type": "tool_result", "tool_use_id": "toolu_1", "content": [over]})]
    assert refused(in_result, tools=BASH) == f"messages.2.content.0.tool_result.content.0.{words}"


def png_block(width: int, height: int = 2) -> dict[str, Any]:
    return sent("image/png", images.png(width, height))


SIDES = "image.source.base64.data: At least one of the image dimensions exceed max allowed size"


def test_an_image_over_8000_pixels_a_side_claude_code_5147() -> None:
    """"messages.7.content.2.image.source.base64.data: At least one of the image dimensions exceed
    max allowed size: 8000 pixels" (claude-code #5147, #4778), in a tool result too."""
    assert refused([user(text("look"), png_block(8000))]) is None
    assert refused([user(text("look"), png_block(8001))]) == f"messages.0.content.1.{SIDES}: 8000 pixels"
    tall = sent("image/jpeg", images.jpeg(width=100, height=8001))
    in_result = [user(text("hi")), assistant(call("toolu_1")),
                 user({"type": "tool_result", "tool_use_id": "toolu_1", "content": [tall]})]
    assert refused(in_result, tools=BASH) == f"messages.2.content.0.tool_result.content.0.{SIDES}: 8000 pixels"


def test_more_than_20_images_hold_each_to_2000_pixels_claude_code_49537() -> None:
    """"messages.108.content.3.image.source.base64.data: At least one of the image dimensions exceed
    max allowed size for many-image requests: 2000 pixels" (claude-code #49537, #52220): the vision
    guide's "If you submit more than 20 images in one API request, this limit is reduced to
    2000x2000 px.", every image block counted, a tool result's included."""
    twenty = [png_block(2001)] + [png_block(10) for _ in range(19)]
    assert refused([user(*twenty)]) is None
    many = f"messages.0.content.0.{SIDES} for many-image requests: 2000 pixels"
    assert refused([user(*twenty, png_block(10))]) == many
    in_result = [user(*twenty), assistant(call("toolu_1")),
                 user({"type": "tool_result", "tool_use_id": "toolu_1", "content": [png_block(10)]})]
    assert refused(in_result, tools=BASH) == many


@pytest.mark.parametrize(("model", "most"), [
    ("claude-sonnet-4-5-20250929", 100), ("claude-opus-4-5", 100), ("claude-haiku-4-5", 100),
    ("claude-3-7-sonnet-latest", 100), ("claude-opus-4-6", 600), ("claude-sonnet-4-6", 600),
    ("claude-opus-5", 600), ("claude-haiku-5-5", 600), ("claude-fable-5", 600),
    ("us.anthropic.claude-opus-4-7-v1:0", 600), ("claude-mythos-preview", None), ("claude-x", None),
])  # fmt: skip
def test_more_images_than_the_models_window_takes_claude_code_3397(model: str, most: int | None) -> None:
    """"Too much media: 0 document pages + 103 images > 100" (claude-code #3397, #19822): the vision
    guide's "up to 600 for API requests (100 for models with a 200k-token context window)", judged
    where the fake knows the window, a tool result's images counted too."""
    for count in (100, 101, 600, 601):
        convo = [user(*[png_block(10)] * (count - 1)), assistant(call("toolu_1")),
                 user({"type": "tool_result", "tool_use_id": "toolu_1", "content": [png_block(10)]})]  # fmt: skip
        over = most is not None and count > most
        words = f"Too much media: 0 document pages + {count} images > {most}" if over else None
        assert refused(convo, tools=BASH, model=model) == words


def test_max_tokens_is_required() -> None:
    reply = refusal(PATH, {"model": "claude-x", "messages": [user(text("hi"))]}, {})
    assert reply is not None and reply.body["error"]["message"] == "max_tokens: Field required"


@pytest.mark.parametrize("messages", [
    [user(text("hi"))],
    [user(text("hi")), assistant(call("toolu_1")), user(result("toolu_1"), text("and then"))],
    [user(text("hi")), assistant(text("a")), assistant(text("b"))],  # two assistant turns: accepted (measured)
    # Opening on the assistant: taken since late 2024 (anthropic-sdk-typescript #622, measured)
    [assistant(text("Ahoy! How may I help ye?")), user(text("hi"))],
    [user(text("hi")), assistant(call("toolu_1")), user(result("toolu_1")),
     assistant(call("toolu_1")), user(result("toolu_1"))],  # an id used twice: accepted (measured)
])  # fmt: skip
def test_what_anthropic_takes(messages: list[dict[str, Any]]) -> None:
    assert refused(messages, tools=BASH) is None


UNDECLARED = "Requests which include `tool_use` or `tool_result` blocks must define tools."


@pytest.mark.parametrize("tools", [None, []])
def test_a_conversation_with_tool_blocks_must_declare_tools(tools: list[Any] | None) -> None:
    """An agent's summary request (Codex's compaction, ``tools: []``) replays its tool rounds."""
    rounds = [user(text("hi")), assistant(call("toolu_1")), user(result("toolu_1")), assistant(text("done")),
              user(text("summarize"))]  # fmt: skip
    assert refused(rounds, **({} if tools is None else {"tools": tools})) == UNDECLARED
    assert refused(rounds, tools=BASH, tool_choice={"type": "none"}) is None
    # A server tool declares tools as well as a client one does.
    assert refused(rounds, tools=[{"type": "web_search_20250305", "name": "web_search"}]) is None
    # A call left without its result is answered for that first.
    assert refused(rounds[:2] + rounds[3:]).startswith("messages.1: `tool_use` ids were found")


def system(content: Any = "<reminder>", **fields: Any) -> dict[str, Any]:
    return {"role": "system", "content": content, **fields}


def test_claude_codes_system_turns_with_or_without_a_beta() -> None:
    # Claude Code sends a system turn after the user's first prompt (tests/corpus/requests/).
    # 2.1.197 named the beta mid-conversation-system-2026-04-07; 2.1.332 names none, and
    # Anthropic asks for none ("No beta header is required").
    convo = [user(text("hi")), system(), assistant(call("toolu_1")), user(result("toolu_1"))]
    assert refused(convo, BETA, tools=BASH) is None
    assert refused(convo, tools=BASH) is None


ANY_POSITION = "; the directive-only form (content: [] with output_config) is accepted at any position"
DIRECTIVE = {"content": [], "output_config": {"effort": "low"}}


@pytest.mark.parametrize(("messages", "words"), [
    # First: what a compression that dropped the turn before it made of Claude Code's request.
    ([system(), user(text("note")), assistant(text("a")), user(text("b"))],
     f"messages.0: use the top-level 'system' parameter for the initial system prompt{ANY_POSITION}"),
    ([user(text("hi")), assistant(call("toolu_1")), system(), user(result("toolu_1"))],
     "messages.2: role 'system' must follow a 'user' message or an 'assistant' message ending in a server tool "
     f"result{ANY_POSITION}"),
    ([user(text("hi")), system(), user(text("more"))],
     f"messages.1: role 'system' must precede an 'assistant' message or end the array{ANY_POSITION}"),
    ([user(text("hi")), system(), system(), assistant(text("a")), user(text("b"))],
     f"messages.1: role 'system' must precede an 'assistant' message or end the array{ANY_POSITION}"),
    # Where Anthropic takes one: after a user turn, before an assistant turn or last; after a
    # server tool's result; and the directive-only form anywhere.
    ([user(text("hi")), system()], None),
    ([user(text("hi")), system([text("two"), text("blocks")]), assistant(text("a")), user(text("b"))], None),
    ([user(text("hi")), assistant({"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
                                   "input": {}},
                                  {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}),
      system(), assistant(text("a")), user(text("b"))], None),
    ([system(**DIRECTIVE), user(text("hi")), system(**DIRECTIVE), user(text("b"))], None),
])  # fmt: skip
def test_where_a_system_turn_may_stand(messages: list[dict[str, Any]], words: str | None) -> None:
    assert refused(messages, tools=BASH) == words


@pytest.mark.parametrize("name", ["claude-code-2.1.332-first.json", "claude-code-2.1.332-tool-reference.json"])
def test_claude_code_2_1_332s_requests_are_taken_without_the_beta(name: str) -> None:
    doc = json.loads((CORPUS / name).read_text())
    assert "mid-conversation-system" not in doc["headers"]["anthropic-beta"]
    assert any(m["role"] == "system" for m in doc["body"]["messages"])
    assert refusal(PATH, doc["body"], doc["headers"]) is None


def test_other_paths_are_not_judged_here() -> None:
    assert refusal("/v1/messages/count_tokens", {"messages": []}, {}) is None
    assert refusal("/v1/chat/completions", {"messages": []}, {}) is None


@pytest.mark.parametrize(("messages", "words"), [
    ([user(text(" \n\t"))], "messages: text content blocks must contain non-whitespace text"),
    ([{"role": "user", "content": "\n\n"}], "messages: text content blocks must contain non-whitespace text"),
    ([user(text("hi")), assistant(text("\n\n"), call("toolu_1")), user(result("toolu_1"))],
     "messages: text content blocks must contain non-whitespace text"),
    # A tool result's text too (NousResearch/hermes-agent#97641, zed-industries/zed#27130).
    ([user(text("hi")), assistant(call("toolu_1")), user({**result("toolu_1"), "content": "\n"})],
     "messages: text content blocks must contain non-whitespace text"),
    ([user(text("hi")), assistant(call("toolu_1")), user({**result("toolu_1"), "content": ""})],
     "messages: text content blocks must be non-empty"),
    ([user(text("hi")), assistant(call("toolu_1")), user({**result("toolu_1"), "content": [text(" ")]})],
     "messages: text content blocks must contain non-whitespace text"),
    ([user(text("hi")), assistant(text("The answer is "))],
     "messages: final assistant content cannot end with trailing whitespace"),
    ([user(text("hi")), {"role": "assistant", "content": "Sure:\n"}],
     "messages: final assistant content cannot end with trailing whitespace"),
])  # fmt: skip
def test_blank_text_and_a_prefill_ending_in_whitespace(messages: list[dict[str, Any]], words: str) -> None:
    assert refused(messages) == words


@pytest.mark.parametrize("messages", [
    [user(text(" hi "))],  # whitespace around text is text
    [user(text("hi")), assistant(text("The answer is"))],  # a prefill ending in a word
    [user(text("hi")), assistant(text("Done.\n")), user(text("thanks"))],  # only the last turn's end counts
    [user(text("hi")), assistant(text("a "), text("b"))],  # the last block is the content's end
])  # fmt: skip
def test_text_anthropic_takes(messages: list[dict[str, Any]]) -> None:
    assert refused(messages) is None


def tool(name: str, **more: Any) -> dict[str, Any]:
    return {"name": name, "input_schema": {"type": "object"}, **more}


HI = [user(text("hi"))]
NAME = "tools.1.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'"
EMAIL = "metadata.user_id: user_id appears to contain an email address."
STOP = "stop_sequences: each stop sequence must contain non-whitespace"


@pytest.mark.parametrize(("payload", "words"), [
    ({"tools": [tool("Bash"), tool("todoist/find-tasks")]}, NAME),
    ({"tools": [tool("Bash"), tool("a" * 129)]}, NAME),
    ({"tools": [tool("Bash"), tool("mcp.search", type="custom")]}, NAME),
    ({"stop_sequences": ["END", "\n"]}, STOP),
    ({"stop_sequences": [""]}, STOP),
    ({"metadata": {"user_id": "jane.doe@example.com"}}, EMAIL),
    ({"metadata": {"user_id": '{"email": "jane@example.com"}'}}, EMAIL),
    ({"metadata": {"user_id": "u" * 257}}, "metadata.user_id: String should have at most 256 characters"),
])  # fmt: skip
def test_fields_anthropic_refuses(payload: dict[str, Any], words: str) -> None:
    assert refused(HI, **payload) == words


@pytest.mark.parametrize("payload", [
    {"tools": [tool("mcp__todoist__find-tasks"), tool("a" * 128)]},
    {"tools": [{"type": "web_search_20250305", "name": "web_search"},
               {"type": "bash_20250124", "name": "bash"}, {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"}]},
    {"stop_sequences": ["END", " \nObservation:"]},
    {"metadata": {"user_id": "user_3f1c_account_9e2d_session_77ab"}},
    {"metadata": {"user_id": "jane at example"}},
    {"metadata": {"user_id": "u" * 256}},
])  # fmt: skip
def test_fields_anthropic_takes(payload: dict[str, Any]) -> None:
    assert refused(HI, **payload) is None


@pytest.mark.parametrize(("model", "types"), [
    ("claude-3-7-sonnet-20250219", ENABLED),
    ("claude-3-5-haiku-20241022", frozenset()),
    ("claude-3-opus-20240229", frozenset()),
    ("anthropic.claude-3-5-sonnet-20241022-v2:0", frozenset()),
    ("claude-sonnet-4-20250514", ENABLED),
    ("claude-opus-4-1-20250805", ENABLED),
    ("claude-opus-4-1@20250805", ENABLED),
    ("claude-sonnet-4-5", ENABLED),
    ("us.anthropic.claude-haiku-4-5-20251001-v1:0", ENABLED),
    ("claude-opus-4-6", BOTH),
    ("claude-sonnet-4-6", BOTH),
    ("claude-opus-4-7", ADAPTIVE),
    ("claude-opus-4-8-20260501", ADAPTIVE),
    ("claude-opus-5", ADAPTIVE),
    ("claude-sonnet-5", ADAPTIVE),
    ("claude-fable-5", ADAPTIVE),
    ("claude-mythos-preview", ADAPTIVE),
    ("claude-mythos-5", ADAPTIVE),
    ("claude-x", None),
    ("gpt-4o", None),
    (None, None),
])  # fmt: skip
def test_which_thinking_each_model_takes(model: Any, types: frozenset[str] | None) -> None:
    assert thinking_types(model) == types


BUDGET = {"type": "enabled", "budget_tokens": 1024}
ONLY_ADAPTIVE = ('"thinking.type.enabled" is not supported for this model. Use "thinking.type.adaptive" and '
                 '"output_config.effort" to control thinking behavior.')  # fmt: skip
NOT_ADAPTIVE = "adaptive thinking is not supported on this model"


@pytest.mark.parametrize(("model", "thinking", "words"), [
    # claude-code #2245, the corpus's anthropic-400-model-does-not-support-thinking
    ("claude-3-5-sonnet-20241022", BUDGET, "'claude-3-5-sonnet-20241022' does not support thinking."),
    ("claude-3-opus-20240229", {"type": "adaptive"}, "'claude-3-opus-20240229' does not support thinking."),
    ("claude-3-7-sonnet-20250219", BUDGET, None),
    ("claude-opus-4-8", BUDGET, ONLY_ADAPTIVE),
    ("claude-sonnet-5", BUDGET, ONLY_ADAPTIVE),
    ("claude-sonnet-4-5", {"type": "adaptive"}, NOT_ADAPTIVE),
    ("claude-3-7-sonnet-20250219", {"type": "adaptive"}, NOT_ADAPTIVE),
    ("claude-opus-4-8", {"type": "adaptive"}, None),
    ("claude-opus-4-6", BUDGET, None),
    ("claude-opus-4-6", {"type": "adaptive"}, None),
    ("claude-sonnet-4-5", BUDGET, None),
    ("claude-sonnet-4-5", {"type": "disabled"}, None),
    ("claude-x", BUDGET, None),  # a model the fake does not know is not judged
])  # fmt: skip
def test_thinking_the_model_does_not_take(model: str, thinking: dict[str, Any], words: str | None) -> None:
    assert refused(HI, model=model, thinking=thinking) == words


DOCS = ("Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
        "#important-considerations-when-using-extended-thinking")  # fmt: skip
TEMPERATURE = ("`temperature` may only be set to 1 when thinking is enabled or in adaptive mode. Please consult our "
               "documentation at https://platform.claude.com/docs/en/build-with-claude/extended-thinking")  # fmt: skip
TOP_P = f"`top_p` must be greater than or equal to 0.95 or unset when thinking is enabled. {DOCS}"
TOP_K = f"`top_k` must be unset when thinking is enabled. {DOCS}"
FORCED = "Thinking may not be enabled when tool_choice forces tool use."


@pytest.mark.parametrize(("payload", "words"), [
    ({"thinking": BUDGET, "temperature": 0.2}, TEMPERATURE),
    ({"thinking": {"type": "adaptive"}, "temperature": 0}, TEMPERATURE),
    ({"thinking": BUDGET, "top_p": 0.9}, TOP_P),
    ({"thinking": {"type": "adaptive"}, "top_k": 40}, TOP_K),
    ({"thinking": BUDGET, "tools": [tool("Bash")], "tool_choice": {"type": "any"}}, FORCED),
    ({"thinking": BUDGET, "tools": [tool("Bash")], "tool_choice": {"type": "tool", "name": "Bash"}}, FORCED),
    ({"thinking": BUDGET, "temperature": 1, "top_p": 0.95},  None),
    ({"thinking": BUDGET, "tools": [tool("Bash")], "tool_choice": {"type": "auto"}}, None),
    ({"thinking": {"type": "disabled"}, "temperature": 0.2, "top_p": 0.5, "top_k": 5,
      "tools": [tool("Bash")], "tool_choice": {"type": "any"}}, None),
    ({"temperature": 0.2, "top_k": 5}, None),
])  # fmt: skip
def test_what_thinking_is_not_compatible_with(payload: dict[str, Any], words: str | None) -> None:
    assert refused(HI, **payload) == words


def cached(block: dict[str, Any]) -> dict[str, Any]:
    return {**block, "cache_control": {"type": "ephemeral"}}


def test_at_most_four_cache_breakpoints_over_tools_system_and_messages() -> None:
    system = [cached(text("You are terse.")), cached(text("Project notes."))]
    convo = [user(cached(text("hi"))), assistant(text("ok")), user(text("more"), cached(text("and more")))]
    assert refused(convo, system=system, tools=[tool("Bash")]) is None  # four
    assert refused(convo, system=system, tools=[cached(tool("Bash"))]) == (
        "A maximum of 4 blocks with cache_control may be provided. Found 5.")
    # The automatic breakpoint (a top-level cache_control) takes one of the four places.
    assert refused(convo, system=system, tools=[tool("Bash")], cache_control={"type": "ephemeral"}) == (
        "A maximum of 4 blocks with cache_control may be provided. Found 5.")
    assert refused(convo[:2], system=system, cache_control={"type": "ephemeral"}) is None


def json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    return {"output_config": {"format": {"type": "json_schema", "schema": schema}}}


def closed(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


MUST = "output_config.format.schema: For 'object' type, 'additionalProperties' must be explicitly set to false"
TRUE = ("output_config.format.schema: For 'object' type, 'additionalProperties: true' is not supported. "
        "Please set 'additionalProperties' to false")  # fmt: skip
OPEN = {"type": "object", "properties": {"x": {"type": "string"}}}


@pytest.mark.parametrize(("schema", "words"), [
    (OPEN, MUST),
    ({**OPEN, "additionalProperties": True}, TRUE),
    (closed(user=OPEN), MUST),
    (closed(users={"type": "array", "items": OPEN}), MUST),
    (closed(pick={"anyOf": [{"type": "string"}, OPEN]}), MUST),
    ({**closed(user={"$ref": "#/$defs/User"}), "$defs": {"User": OPEN}}, MUST),
    ({**closed(user={"$ref": "#/definitions/User"}), "definitions": {"User": {**OPEN, "type": ["object", "null"]}}},
     MUST),
    (closed(user=closed(name={"type": "string"}), tags={"type": "array", "items": {"type": "string"}}), None),
])  # fmt: skip
def test_structured_output_objects_must_be_closed(schema: dict[str, Any], words: str | None) -> None:
    assert refused(HI, **json_schema(schema)) == words


def test_a_structured_output_type_json_schema_does_not_have_is_refused() -> None:
    route = {"type": "OBJECT", "properties": {"score": {"type": "INTEGER"}}, "additionalProperties": False}
    assert refused(HI, **json_schema(route)) == (
        "output_config.format.schema: Invalid JSON Schema in output format: {'type': 'OBJECT', 'properties': "
        "{'score': {'type': 'INTEGER'}}, 'additionalProperties': False} is not valid under any of the given schemas")
    nested = closed(score={"type": "INTEGER"})
    assert refused(HI, **json_schema(nested)) == (
        "output_config.format.schema: Invalid JSON Schema in output format: {'type': 'INTEGER'} is not valid under "
        "any of the given schemas")
    assert refused(HI, **json_schema(closed(score={"type": ["integer", "null"]}))) is None


SCHEMA = "output_config.format.schema: "


@pytest.mark.parametrize(("prop", "words"), [
    ({"type": "integer", "minimum": 0}, "For 'integer' type, property 'minimum' is not supported"),
    ({"type": "number", "minimum": 0}, "For 'number' type, property 'minimum' is not supported"),
    ({"type": "integer", "minimum": 0, "maximum": 150}, "For 'integer' type, properties maximum, minimum are not supported"),
    ({"type": "number", "multipleOf": 0.5}, "For 'number' type, property 'multipleOf' is not supported"),
    ({"type": "integer", "exclusiveMinimum": 0}, "For 'integer' type, property 'exclusiveMinimum' is not supported"),
    ({"type": "string", "minLength": 1}, "For 'string' type, property 'minLength' is not supported"),
    ({"type": "string", "maxLength": 280}, "For 'string' type, property 'maxLength' is not supported"),
    ({"type": "array", "items": {"type": "string"}, "maxItems": 5}, "For 'array' type, property 'maxItems' is not supported"),
    ({"type": "array", "items": {"type": "string"}, "uniqueItems": True},
     "For 'array' type, property 'uniqueItems' is not supported"),
    ({"type": "array", "items": {"type": "string"}, "minItems": 2},
     "For 'array' type, 'minItems' values other than 0 or 1 are not supported"),
    ({"type": ["integer", "null"], "maximum": 9}, "For 'integer' type, property 'maximum' is not supported"),
    ({"type": "array", "items": {"type": "string", "maxLength": 9}}, "For 'string' type, property 'maxLength' is not supported"),
    ({"anyOf": [{"type": "null"}, {"type": "integer", "minimum": 1}]}, "For 'integer' type, property 'minimum' is not supported"),
    ({"type": "array", "items": {"type": "string"}, "minItems": 1}, None),
    ({"type": "array", "items": {"type": "string"}, "minItems": 0}, None),
    ({"type": "string", "format": "date-time", "pattern": "^[0-9]+$", "enum": ["1"]}, None),
    ({"type": "integer", "description": "minimum 0", "default": 3}, None),
])  # fmt: skip
def test_structured_output_refuses_the_constraints_anthropic_does_not_support(prop: Any, words: str | None) -> None:
    """job-ops #654 (maxItems), memorize-everything #93 (minItems), req_llm #302 (minimum),
    LiteLLM #21016 (several at once); the docs' "JSON Schema limitations" name the rest."""
    assert refused(HI, **json_schema(closed(x=prop))) == (words and SCHEMA + words)


def test_a_property_named_like_a_keyword_is_no_constraint() -> None:
    schema = closed(minimum={"type": "integer"}, maxItems={"type": "string"})
    assert refused(HI, **json_schema(schema)) is None
    beta = {"output_format": {"type": "json_schema", "schema": closed(n={"type": "integer", "maximum": 3})}}
    assert refused(HI, **beta) == "output_format.schema: For 'integer' type, property 'maximum' is not supported"


DRAFT = ("JSON schema is invalid. It must match JSON Schema draft 2020-12 (https://json-schema.org/draft/2020-12). "
         "Learn more about tool use at https://platform.claude.com/docs/en/agents-and-tools/tool-use/overview.")


@pytest.mark.parametrize(("schema", "words"), [
    ({"type": "OBJECT", "properties": {}}, "tools.1.custom.input_schema.type: Input should be 'object'"),
    ({"type": ["object", "null"], "properties": {}}, "tools.1.custom.input_schema.type: Input should be 'object'"),
    ({"type": "array", "items": {"type": "string"}}, "tools.1.custom.input_schema.type: Input should be 'object'"),
    ({"type": "object", "properties": {"n": {"type": "INTEGER"}}}, f"tools.1.custom.input_schema: {DRAFT}"),
    ({"type": "object", "properties": {"l": {"type": "array", "items": {"type": "STRING"}}}},
     f"tools.1.custom.input_schema: {DRAFT}"),
    ({"type": "object", "properties": {"l": {"type": "array", "minItems": "1"}}}, f"tools.1.custom.input_schema: {DRAFT}"),
    ({"type": "object", "properties": {"s": {"type": "string", "maxLength": -1}}}, f"tools.1.custom.input_schema: {DRAFT}"),
    ({"type": "object", "properties": {"n": {"type": ["integer", "null"]}}}, None),
    ({"type": "object", "minProperties": 1, "properties": {"l": {"type": "array", "maxItems": 3}}}, None),
])  # fmt: skip
def test_a_tools_input_schema(schema: dict[str, Any], words: str | None) -> None:
    assert refused(HI, tools=[tool("Bash"), {"name": "f", "input_schema": schema}]) == words


def test_the_betas_output_format_is_held_to_the_same() -> None:
    words = refused(HI, output_format={"type": "json_schema", "schema": OPEN})
    assert words == "output_format.schema: For 'object' type, 'additionalProperties' must be explicitly set to false"


@pytest.mark.parametrize(("model", "is_refused"), [
    ("claude-opus-4-8", True), ("claude-sonnet-4-6", True), ("claude-fable-5", True),
    ("claude-sonnet-4-5-20250929", False), ("claude-3-7-sonnet-latest", False), ("local-model", False),
])  # fmt: skip
def test_a_prefill_is_refused_from_the_4_6_generation_on(model: str, is_refused: bool) -> None:
    payload = {"model": model, "max_tokens": 64, "messages": [
        {"role": "user", "content": "JSON please"}, {"role": "assistant", "content": "{"}]}  # fmt: skip
    reply = refusal(PATH, payload, {})
    if is_refused:
        assert reply is not None and "does not support assistant message prefill" in str(reply.body)
    else:
        assert reply is None


def thought(t: str, signature: str | None = None) -> dict[str, Any]:
    block = {"type": "thinking", "thinking": t}
    return block if signature is None else {**block, "signature": signature}


def test_with_thinking_on_the_last_tool_calling_turn_starts_with_its_thinking() -> None:
    answered = {"content": [thought("ls", sign("ls")), text("Listing."), call("t1")]}
    issued = thought_calls(Reply(200, answered))
    assert issued == {"t1"}
    streamed = [f"event: content_block_start\ndata: {json.dumps({'type': 'content_block_start', 'index': i, 'content_block': b})}\n\n".encode()
                for i, b in enumerate(answered["content"])]  # fmt: skip
    assert thought_calls(Stream(streamed)) == {"t1"} and thought_calls(Reply(200, {"content": [call("t2")]})) == set()

    def judged(messages: list[dict[str, Any]], **payload: Any) -> str | None:
        reply = refusal(PATH, {"model": "claude-x", "max_tokens": 4096, "messages": messages, **payload}, {}, issued)
        return None if reply is None else reply.body["error"]["message"]

    loop = [user(text("ls?")), assistant(text("Listing."), call("t1")), user(result("t1"))]
    words = judged(loop, thinking=BUDGET, tools=BASH)
    assert words is not None and words.startswith(
        "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `text`.")
    signed = [loop[0], assistant(thought("ls", sign("ls")), text("Listing."), call("t1")), loop[2]]
    redacted = [loop[0], assistant({"type": "redacted_thinking", "data": "EmwK"}, call("t1")), loop[2]]
    assert judged(signed, thinking=BUDGET, tools=BASH) is None
    assert judged(redacted, thinking={"type": "adaptive"}, tools=BASH) is None
    assert judged(loop, tools=BASH) is None  # thinking off: no such rule
    assert refused(loop, thinking=BUDGET, tools=BASH) is None  # a call the fake answered without thinking
    done = [*loop, assistant(text("Done.")), user(text("thanks"))]  # the loop ended: nothing asked
    assert judged(done, thinking=BUDGET, tools=BASH) is None


def test_a_call_answered_with_thinking_off_cannot_go_on_with_it_on() -> None:
    """A loop's turn answered to a request that asked no thinking (a gateway's rescue on another
    key) has none to start with: its next step with thinking on is refused, as Anthropic does."""
    answered = Reply(200, {"content": [call("t1")]})
    assert unthought_calls(answered, {"thinking": BUDGET}) == set()  # asked: the fake's default, not judged
    issued = unthought_calls(answered, {"thinking": {"type": "disabled"}})
    assert issued == {"t1"} and unthought_calls(answered, {}) == {"t1"}
    loop = [user(text("ls?")), assistant(call("t1")), user(result("t1"))]
    payload = {"model": "claude-x", "max_tokens": 4096, "messages": loop, "tools": BASH}
    reply = refusal(PATH, {**payload, "thinking": {"type": "adaptive"}}, {}, issued)
    assert reply is not None and reply.body["error"]["message"].startswith(
        "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`.")
    assert refusal(PATH, payload, {}, issued) is None  # still off: taken


@pytest.mark.parametrize(("model", "thinks"), [
    ("claude-opus-5", True), ("claude-sonnet-5", True), ("claude-sonnet-5-5", True), ("claude-fable-5-1", True),
    ("claude-mythos-5", True), ("claude-opus-4-8", False), ("claude-haiku-5-5", False), ("claude-mythos-preview", False),
])  # fmt: skip
def test_a_model_that_thinks_unasked_holds_a_request_without_thinking_to_the_tool_loop_rule(
    model: str, thinks: bool
) -> None:
    """Opus and Sonnet 5 on, Fable and Mythos 5 on think adaptively when ``thinking`` is left out
    (the Opus 5 migration guide): the turn that called a tool with thinking comes back with it."""
    answered = Reply(200, {"content": [thought("ls", sign("ls")), call("t1")]})
    issued = thought_calls(answered)
    loop = [user(text("ls?")), assistant(call("t1")), user(result("t1"))]
    reply = refusal(PATH, {"model": model, "max_tokens": 4096, "messages": loop, "tools": BASH}, {}, issued)
    if thinks:
        assert reply is not None and reply.body["error"]["message"].startswith(
            "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`.")
    else:
        assert reply is None
    kept = [loop[0], assistant(thought("ls", sign("ls")), call("t1")), loop[2]]
    assert refusal(PATH, {"model": model, "max_tokens": 4096, "messages": kept, "tools": BASH}, {}, issued) is None
    # A forced tool choice is taken without thinking by those that take one at all.
    forced = refusal(PATH, {"model": model, "max_tokens": 4096, "messages": loop, "tools": BASH,
                            "tool_choice": {"type": "any"}}, {}, issued)  # fmt: skip
    assert forced is None or "Expected `thinking`" not in forced.body["error"]["message"]
    # Answered without thinking to such a request (it thought nothing): as asked, not judged.
    assert unthought_calls(Reply(200, {"content": [call("t1")]}), {"model": model}) == (set() if thinks else {"t1"})


def test_a_thinking_block_comes_back_with_the_signature_it_was_issued() -> None:
    def sent(block: dict[str, Any]) -> str | None:
        return refused([user(text("q")), assistant(block, text("a")), user(text("more"))])

    assert sent(thought("plan", sign("plan"))) is None
    assert sent(thought("plan", "EqQBCkYIBxgCKkA")) is None  # Anthropic's own: not checkable here
    assert sent(thought("plan")) == "messages.1.content.0.thinking.signature: Field required"
    for bad in ("", sign("the plan, altered")):
        assert sent(thought("plan", bad)) == "messages.1.content.0: Invalid `signature` in `thinking` block"


def test_a_signature_holds_only_for_the_organization_whose_key_got_it() -> None:
    """Signatures are bound to the account (happyclaw #474): a conversation moved to a key of
    another organization is refused, one of the same organization is not."""
    sent = [user(text("q")), assistant(thought("plan", sign("plan", "org-a")), text("a")), user(text("more"))]
    assert refusal(PATH, {"model": "claude-x", "max_tokens": 10, "messages": sent}, {}, org="org-a") is None
    for org in ("org-b", None):
        reply = refusal(PATH, {"model": "claude-x", "max_tokens": 10, "messages": sent}, {}, org=org)
        assert reply is not None
        assert reply.body["error"]["message"] == "messages.1.content.0: Invalid `signature` in `thinking` block"


BUDGET_DOCS = "https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size"
OVER_MAX = f"`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at {BUDGET_DOCS}"
UNDER_MIN = "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"


@pytest.mark.parametrize(("max_tokens", "budget", "headers", "words"), [
    (4096, 4096, {}, OVER_MAX),
    (2000, 3000, {}, OVER_MAX),
    (4096, 1000, {}, UNDER_MIN),
    (500, 1000, {}, UNDER_MIN),  # the field's own bound is judged first
    (4096, 4095, {}, None),
    (4096, 1024, {}, None),
    # With interleaved thinking the budget spans a whole tool loop and may exceed max_tokens.
    (4096, 8192, {"anthropic-beta": "interleaved-thinking-2025-05-14"}, None),
    (4096, 1000, {"anthropic-beta": "interleaved-thinking-2025-05-14"}, UNDER_MIN),
])  # fmt: skip
def test_a_thinking_budget_is_at_least_1024_and_below_max_tokens(
    max_tokens: int, budget: int, headers: dict[str, str], words: str | None
) -> None:
    payload = {"model": "claude-sonnet-4-5", "max_tokens": max_tokens, "messages": HI,
               "thinking": {"type": "enabled", "budget_tokens": budget}}  # fmt: skip
    reply = refusal(PATH, payload, headers)
    assert (None if reply is None else reply.body["error"]["message"]) == words


def test_adaptive_thinking_has_no_budget_to_judge() -> None:
    assert refused(HI, model="claude-opus-4-8", max_tokens=100, thinking={"type": "adaptive"}) is None


UNIQUE = "messages.1.content.1: `tool_use` ids must be unique"


def test_tool_use_ids_are_unique_within_a_turn() -> None:
    """trycua/cua #524 and claude-code #20901 (one tool round: the second call of turn 1 is the
    one named); the same id in two turns is accepted, as measured."""
    twice = [user(text("hi")), assistant(call("toolu_1"), call("toolu_1")), user(result("toolu_1"))]
    assert refused(twice, tools=BASH) == UNIQUE
    after_text = [user(text("hi")), assistant(text("a"), call("toolu_1"), call("toolu_2"), call("toolu_1")),
                  user(result("toolu_1"), result("toolu_2"))]  # fmt: skip
    assert refused(after_text, tools=BASH) == "messages.1.content.3: `tool_use` ids must be unique"
    apart = [user(text("hi")), assistant(call("toolu_1")), user(result("toolu_1")),
             assistant(call("toolu_1")), user(result("toolu_1"))]  # fmt: skip
    assert refused(apart, tools=BASH) is None


SINGLE = "each tool_use must have a single result. Found multiple `tool_result` blocks with id: {id}"


def test_a_call_answered_twice_in_one_turn_is_refused() -> None:
    """LiteLLM's regression test and JohnnyZ93/oai-compatible-copilot #270 ("messages.2.content.4"):
    the second result with the id is the block named. Codex's code mode sent this, a script's
    output and its notify() calls as outputs of one call (tests/corpus/requests/)."""
    twice = [user(text("hi")), assistant(call("toolu_1")), user(result("toolu_1"), result("toolu_1"))]
    assert refused(twice, tools=BASH) == "messages.2.content.1: " + SINGLE.format(id="toolu_1")
    among = [user(text("hi")), assistant(call("toolu_1"), call("toolu_2")),
             user(result("toolu_1"), result("toolu_2"), result("toolu_2"), result("toolu_1"))]  # fmt: skip
    assert refused(among, tools=BASH) == "messages.2.content.2: " + SINGLE.format(id="toolu_2")
    # One result per call in each of two rounds that reuse the id is taken, as a repeated call id is.
    rounds = [user(text("hi")), assistant(call("toolu_1")), user(result("toolu_1")),
              assistant(call("toolu_1")), user(result("toolu_1"))]  # fmt: skip
    assert refused(rounds, tools=BASH) is None


BEGIN = ("Did not find {n} `tool_result` block(s) at the beginning of this message. Messages following `tool_use` "
         "blocks must begin with a matching number of `tool_result` blocks.")  # fmt: skip


@pytest.mark.parametrize(("answer", "words"), [
    (user(text("here"), result("toolu_1"), result("toolu_2")), "messages.2: " + BEGIN.format(n=2)),
    (user(result("toolu_1"), text("and"), result("toolu_2")), "messages.2: " + BEGIN.format(n=2)),
    (user(result("toolu_1"), result("toolu_2"), text("then")), None),
    (user(result("toolu_2"), result("toolu_1")), None),  # results in any order, as long as they come first
])  # fmt: skip
def test_tool_results_begin_the_turn_after_the_calls(answer: dict[str, Any], words: str | None) -> None:
    convo = [user(text("hi")), assistant(call("toolu_1"), call("toolu_2")), answer]
    assert refused(convo, tools=BASH) == words


def ttl(block: dict[str, Any], when: str | None) -> dict[str, Any]:
    return {**block, "cache_control": {"type": "ephemeral", **({"ttl": when} if when else {})}}


TTL = ("cache_control.ttl: a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block. "
       "Note that blocks are processed in the following order: `tools`, `system`, `messages`.")  # fmt: skip


@pytest.mark.parametrize(("tools", "system", "messages", "words"), [
    ([tool("Bash")], [ttl(text("sys"), None)], [user(ttl(text("hi"), "1h"))], f"messages.0.content.0.{TTL}"),
    ([tool("Bash")], [ttl(text("sys"), "5m")], [user(text("a"), ttl(text("hi"), "1h"))], f"messages.0.content.1.{TTL}"),
    ([ttl(tool("Bash"), None)], [ttl(text("sys"), "1h")], HI, f"system.0.{TTL}"),
    ([tool("Bash")], [ttl(text("sys"), "1h")], [user(ttl(text("hi"), None))], None),  # 1h, then 5m: fine
    ([ttl(tool("Bash"), "1h")], [ttl(text("sys"), "1h")], [user(ttl(text("hi"), "1h"))], None),
    ([tool("Bash")], [text("sys")], [user(ttl(text("a"), None), ttl(text("hi"), "5m"))], None),
])  # fmt: skip
def test_a_one_hour_breakpoint_never_follows_a_five_minute_one(
    tools: list[Any], system: list[Any], messages: list[Any], words: str | None
) -> None:
    """cnighswonger/claude-code-cache-fix #44 (messages.0.content.4) and headroom #2939: the
    order is tools, system, messages, and a breakpoint without a ttl is a five-minute one."""
    assert refused(messages, tools=tools, system=system) == words


ID_PATTERN = "tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'"


@pytest.mark.parametrize(("bad", "at"), [
    ("functions.Bash:0", "messages.1.content.0"), ("call 1", "messages.1.content.0"), ("", "messages.1.content.0"),
    ("toolu_1\n", "messages.1.content.0"),
])  # fmt: skip
def test_a_tool_use_id_is_letters_digits_underscores_and_hyphens(bad: str, at: str) -> None:
    convo = [user(text("hi")), assistant(call(bad)), user(result(bad))]
    assert refused(convo, tools=BASH) == f"{at}.{ID_PATTERN}"
    fine = [user(text("hi")), assistant(call("call_AbC-09")), user(result("call_AbC-09"))]
    assert refused(fine, tools=BASH) is None


@pytest.mark.parametrize("bad_input", ['{"command": "ls"}', ["ls"], None, 3])
def test_a_tool_use_input_is_an_object(bad_input: Any) -> None:
    """claude-code #6696 / #6695 with request ids, anthropic-sdk-typescript #648."""
    block = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": bad_input}
    convo = [user(text("hi")), assistant(text("on it"), block), user(result("toolu_1"))]
    assert refused(convo, tools=BASH) == "messages.1.content.1.tool_use.input: Input should be a valid dictionary"


BOTH_SAMPLERS = "`temperature` and `top_p` cannot both be specified for this model. Please use only one."


@pytest.mark.parametrize(("model", "words"), [
    ("claude-opus-4-1-20250805", BOTH_SAMPLERS), ("claude-sonnet-4-5-20250929", BOTH_SAMPLERS),
    ("claude-haiku-4-5", BOTH_SAMPLERS), ("us.anthropic.claude-haiku-4-5-20251001-v1:0", BOTH_SAMPLERS),
    ("claude-sonnet-4-6", BOTH_SAMPLERS), ("claude-opus-4-6", BOTH_SAMPLERS),
    ("claude-opus-4-5-20251101", BOTH_SAMPLERS),  # MCP-Universe #49, OpenHands #11838
    # Models the answers quoted do not cover: not judged.
    ("claude-opus-4-20250514", None), ("claude-sonnet-4-20250514", None), ("claude-3-7-sonnet-20250219", None),
    ("claude-x", None),
])  # fmt: skip
def test_temperature_and_top_p_together_on_the_models_that_refuse_the_pair(model: str, words: str | None) -> None:
    assert refused(HI, model=model, temperature=0.5, top_p=0.9) == words
    assert refused(HI, model=model, temperature=0.5) is None
    assert refused(HI, model=model, top_p=0.9) is None


def test_a_tools_input_schema_names_its_type() -> None:
    """Kilo-Org/kilocode #12238, answered by api.anthropic.com."""
    assert refused(HI, tools=[tool("Bash"), {"name": "f", "input_schema": {"properties": {}}}]) == (
        "tools.1.custom.input_schema.type: Field required")
    assert refused(HI, tools=[{"type": "web_search_20250305", "name": "web_search"}]) is None


@pytest.mark.parametrize("name", [
    "claude-code-2.1.197-first", "claude-code-2.1.197-bash-result", "claude-code-2.1.197-image-result",
    "claude-code-2.1.197-thinking-off",
])  # fmt: skip
def test_claude_codes_own_requests_are_taken(name: str) -> None:
    captured = json.loads((CORPUS / f"{name}.json").read_text())
    assert refusal(PATH, captured["body"], captured["headers"]) is None


NONEMPTY = "all messages must have non-empty content except for the optional final assistant message"


@pytest.mark.parametrize(("messages", "words"), [
    ([user()], f"messages.0: {NONEMPTY}"),
    ([user(text("hi")), assistant(), user(text("go on"))], f"messages.1: {NONEMPTY}"),
    ([user(text("hi")), assistant(text("a")), user()], f"messages.2: {NONEMPTY}"),
])  # fmt: skip
def test_a_turn_with_no_content(messages: list[dict[str, Any]], words: str) -> None:
    assert refused(messages) == words


def test_the_final_assistant_turn_may_be_empty() -> None:
    assert refused([user(text("hi")), assistant()]) is None


@pytest.mark.parametrize("tools", [
    [*BASH, {"name": "Bash", "input_schema": {"type": "object", "properties": {}}}],
    [{"type": "web_search_20250305", "name": "web_search"}, {"name": "web_search", "input_schema": {"type": "object"}}],
])  # fmt: skip
def test_tool_names_must_be_unique(tools: list[dict[str, Any]]) -> None:
    assert refused([user(text("hi"))], tools=tools) == "tools: Tool names must be unique."


def test_distinct_tool_names_are_taken() -> None:
    tools = [*BASH, {"name": "Read", "input_schema": {"type": "object"}}]
    assert refused([user(text("hi"))], tools=tools) is None


BOUND = ("messages.{i}.content.0: Invalid `signature` in `thinking` block. The block is bound to a different "
         'conversation. Remove the block, or set `thinking.block_binding.prefix_mismatch_behavior` to "drop_block".')


def test_where_the_fake_answered_with_thinking_is_where_its_reply_stands() -> None:
    asked = {"messages": [user(text("hi")), assistant(text("a")), user(text("b"))]}
    answered = {"content": [thought("plan", sign("plan")), {"type": "redacted_thinking", "data": "EmwK"}, call("t1")]}
    assert bound_thinking(Reply(200, answered), asked) == {sign("plan"): prefix(asked, 3), "EmwK": prefix(asked, 3)}
    streamed = [
        b'event: content_block_start\ndata: {"type": "content_block_start", "index": 0, '
        b'"content_block": {"type": "thinking", "thinking": ""}}\n\n',
        b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, '
        b'"delta": {"type": "signature_delta", "signature": "' + sign("plan").encode() + b'"}}\n\n',
        b'event: content_block_start\ndata: {"type": "content_block_start", "index": 1, '
        b'"content_block": {"type": "redacted_thinking", "data": "EmwK"}}\n\n',
    ]  # fmt: skip
    assert bound_thinking(Stream(streamed), asked) == {sign("plan"): prefix(asked, 3), "EmwK": prefix(asked, 3)}
    assert bound_thinking(Reply(200, {"content": [text("no thinking")]}), asked) == {}


@pytest.mark.parametrize(("model", "checks"), [
    ("claude-fable-5-1", True), ("claude-fable-5-2", True), ("claude-opus-5-5", True), ("claude-sonnet-5-5", True),
    ("claude-haiku-5-5", True), ("claude-fable-5", False), ("claude-opus-5", False), ("claude-opus-4-8", False),
    ("claude-mythos-5-1", False), ("gpt-5", False),
])  # fmt: skip
def test_the_models_with_preserved_thinking(model: str, checks: bool) -> None:
    assert preserves_thinking(model) is checks


DROPPING = {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "drop_block"}}
BINDING_BETA = {"anthropic-beta": "interleaved-thinking-2025-05-14,thinking-binding-controls-2026-08-01"}


def test_thinking_replayed_after_a_changed_prefix_is_refused() -> None:
    """A block is bound to the system, tools and messages it was produced behind: a compression
    that dropped the two turns before it, a tool list widened, a system text added or a message
    before it edited is a 400; drop_block (with its beta) is taken. Cache breakpoints moved on
    are no change (Claude Code moves its own every turn)."""
    mark = sign("plan")
    history = [user(text("hi")), assistant(text("a")), user(text("b")),
               assistant(thought("plan", mark), call("t1")), user(result("t1"))]  # fmt: skip
    produced = {"model": "claude-fable-5-1", "system": "Be terse.", "messages": history[:3], "tools": BASH}
    bound = {mark: {prefix(produced, 3)}}

    def judged(messages: list[dict[str, Any]], model: str = "claude-fable-5-1", headers: dict[str, str] | None = None,
               **payload: Any) -> str | None:
        sent = {"model": model, "max_tokens": 4096, "system": "Be terse.", "messages": messages, "tools": BASH,
                **payload}  # fmt: skip
        reply = refusal(PATH, sent, headers or {}, bound=bound)
        return None if reply is None else reply.body["error"]["message"]

    assert judged(history) is None  # sent back behind what it was written behind
    assert judged(history, system=[{"type": "text", "text": "Be terse.", "cache_control": {"type": "ephemeral"}}]) is None
    moved = [user(text("[2 earlier messages were removed]")), *history[3:]]
    assert judged(moved) == BOUND.format(i=1)
    assert judged(history, tools=[*BASH, {"name": "Read", "input_schema": {"type": "object"}}]) == BOUND.format(i=3)
    assert judged(history, system="Be terse.\n\nAnswer in French.") == BOUND.format(i=3)
    assert judged([user(text("hello")), *history[1:]]) == BOUND.format(i=3)
    assert judged(moved, thinking=DROPPING, headers=BINDING_BETA) is None
    assert judged(moved, model="claude-opus-4-8") is None  # no prefix check on this model
    assert judged([moved[0], assistant(call("t1")), moved[2]]) is None  # left out: nothing to check


def test_block_binding_needs_its_beta() -> None:
    """Amazon Bedrock's "Preserved thinking" page: "Without the beta value, sending
    `block_binding` returns `400 thinking.adaptive.block_binding: Extra inputs are not
    permitted`"."""
    assert refused(HI, model="claude-sonnet-5-5", thinking=DROPPING) == (
        "thinking.adaptive.block_binding: Extra inputs are not permitted")
    assert refused(HI, BINDING_BETA, model="claude-sonnet-5-5", thinking=DROPPING) is None


NOT_FORCED = 'tool_choice: type "tool" and "any" are not supported for this model.'


@pytest.mark.parametrize(("model", "words"), [
    ("claude-fable-5-1", NOT_FORCED), ("claude-mythos-5-1", NOT_FORCED), ("claude-fable-5-2", NOT_FORCED),
    ("claude-opus-5-5", NOT_FORCED), ("claude-sonnet-5-5", NOT_FORCED),
    ("us.anthropic.claude-fable-5-1-v1:0", NOT_FORCED),
    ("claude-fable-5", None), ("claude-mythos-5", None), ("claude-opus-5", None), ("claude-sonnet-5", None),
    ("claude-sonnet-4-5", None), ("claude-mythos-preview", None), ("claude-x", None),
])  # fmt: skip
def test_a_forced_tool_choice_on_the_models_that_refuse_forcing(model: str, words: str | None) -> None:
    """The Fable 5.1 migration guide: "Forcing a tool call with {type: "any"} or {type: "tool",
    name: "..."} returns a 400 error"; Opus and Sonnet 5.5's "What's new" the same; in these words
    (inspect_ai #5176), with or without thinking."""
    for choice in ({"type": "any"}, {"type": "tool", "name": "Bash"}, {"type": "any", "disable_parallel_tool_use": True}):
        assert refused(HI, model=model, tools=BASH, tool_choice=choice) == words
    for choice in ({"type": "auto"}, {"type": "none"}):
        assert refused(HI, model=model, tools=BASH, tool_choice=choice) is None


OFF_REFUSED = ('"thinking.type.disabled" is not supported for this model. Use "thinking.type.adaptive" and '
               '"output_config.effort" to control thinking behavior.')


@pytest.mark.parametrize(("model", "words"), [
    ("claude-opus-5-5", OFF_REFUSED), ("claude-sonnet-5-5", OFF_REFUSED), ("claude-fable-5-1", OFF_REFUSED),
    ("claude-mythos-5-2", OFF_REFUSED), ("claude-opus-5", None), ("claude-sonnet-5", None),
    ("claude-opus-4-8", None), ("claude-fable-5", OFF_REFUSED), ("claude-mythos-5", OFF_REFUSED),
    ("claude-x", None),
])  # fmt: skip
def test_thinking_turned_off_on_the_models_that_always_think(model: str, words: str | None) -> None:
    """"Turning thinking off or setting a thinking budget is rejected" (the Opus 5.5 migration
    guide; Sonnet 5.5's lists `thinking: {"type": "disabled"}` among its 400s), in the words
    answered live on Opus 5.5; Fable and Mythos 5 refuse it too ("Both thinking: {type:
    "disabled"} and manual extended thinking [...] return a 400 error", the Fable 5 migration
    guide); Opus 5 takes it (its migration guide)."""
    assert refused(HI, model=model, thinking={"type": "disabled"}) == words


@pytest.mark.parametrize("model", [
    "claude-opus-4-7", "claude-opus-4-8-20260501", "claude-opus-5", "claude-sonnet-5", "claude-haiku-5-5",
    "claude-fable-5", "claude-fable-5-1", "claude-mythos-5", "us.anthropic.claude-opus-4-7-v1:0",
])  # fmt: skip
def test_sampling_parameters_on_the_models_that_removed_them(model: str) -> None:
    """Opus 4.7 on, the 5 generation, Fable and Mythos: "`temperature` is deprecated for this
    model." (RooCode #12162), and the same for `top_p` and `top_k` (claude-sonnet-5, with request
    ids), whatever the value, with or without thinking."""
    for field, value in (("temperature", 0.2), ("temperature", 1), ("top_p", 0.9), ("top_k", 5)):
        assert refused(HI, model=model, **{field: value}) == f"`{field}` is deprecated for this model."
    assert refused(HI, model=model, thinking={"type": "adaptive"}, temperature=0) == (
        "`temperature` is deprecated for this model.")


@pytest.mark.parametrize("model", ["claude-opus-4-6", "claude-sonnet-4-5", "claude-3-7-sonnet-latest", "claude-x"])
def test_sampling_parameters_on_the_models_that_take_them(model: str) -> None:
    for field, value in (("temperature", 0.2), ("top_p", 0.9), ("top_k", 5)):
        assert refused(HI, model=model, **{field: value}) is None


ONE_OF = "Schema type 'oneOf' is not supported"


@pytest.mark.parametrize("schema", [
    {"oneOf": [closed(a={"type": "string"}), closed(b={"type": "integer"})]},
    closed(pick={"oneOf": [{"type": "string"}, {"type": "null"}]}),
    closed(items={"type": "array", "items": {"oneOf": [closed(a={"type": "string"}), closed(b={"type": "string"})]}}),
    {**closed(user={"$ref": "#/$defs/U"}), "$defs": {"U": {"oneOf": [{"type": "string"}, {"type": "integer"}]}}},
])  # fmt: skip
def test_structured_output_refuses_one_of_anywhere_vercel_ai(schema: dict[str, Any]) -> None:
    """"output_format.schema: Schema type 'oneOf' is not supported" (vercel/ai's changeset
    "convert oneOf to anyOf in tool and output_format schemas"), "output_config.format.schema:
    Schema type 'oneOf' is not supported" in others' live runs; the guide supports only "`anyOf`
    and `allOf` (with limitations)"."""
    assert refused(HI, **json_schema(schema)) == f"output_config.format.schema: {ONE_OF}"
    assert refused(HI, output_format={"type": "json_schema", "schema": schema}) == f"output_format.schema: {ONE_OF}"
    any_of = json.loads(json.dumps(schema).replace('"oneOf"', '"anyOf"'))
    assert refused(HI, **json_schema(any_of)) is None
    assert refused(HI, tools=[{"name": "f", "input_schema": {"type": "object", "properties": {"p": schema}}}]) is None


PREFILLED = [user(text("JSON please")), assistant(text('{"name":'))]
WITH_PREFILL = "output_config.format: structured outputs cannot be used with a prefilled assistant message"


@pytest.mark.parametrize("model", ["claude-sonnet-4-5-20250929", "claude-haiku-4-5", "claude-opus-4-1", "claude-x"])
def test_a_prefill_with_structured_outputs_on_the_models_that_take_a_prefill(model: str) -> None:
    """The structured-outputs guide's "Feature compatibility": "Incompatible with: [...] Message
    Prefilling: Incompatible with JSON outputs" (the fake's words: no answer is quoted)."""
    schema = closed(name={"type": "string"})
    assert refused(PREFILLED, model=model, **json_schema(schema)) == WITH_PREFILL
    assert refused(PREFILLED, model=model, output_format={"type": "json_schema", "schema": schema}) == (
        "output_format: structured outputs cannot be used with a prefilled assistant message")
    assert refused(PREFILLED, model=model) is None
    assert refused([*PREFILLED, user(text("go on"))], model=model, **json_schema(schema)) is None


async def test_a_messages_body_over_32_mb_gets_anthropics_413_before_anything_else() -> None:
    """"Request exceeds the maximum size", request_too_large (claude-code #10314; the API overview's
    "Request size limits": 32 MB for the Messages and Token Counting APIs, answered by Cloudflare
    before the API, so before the key is looked at). Other paths keep their own limits."""
    limit = 32 * 1024 * 1024
    async with FakeUpstream() as fake, aiohttp.ClientSession() as http:

        async def post(path: str, size: int, key: str = "sk-ant-x") -> tuple[int, Any]:
            body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 10,
                               "messages": [{"role": "user", "content": "hi"}], "metadata": {}})  # fmt: skip
            padded = body[:-1] + ', "pad": "' + "x" * (size - len(body) - 11) + '"}'
            assert len(padded) == size
            async with http.post(fake.url + path, data=io.BytesIO(padded.encode()), headers={"x-api-key": key,
                                 "content-type": "application/json", "anthropic-version": "2023-06-01"}) as r:
                return r.status, await r.json(content_type=None)

        status, body = await post("/messages", limit + 1, key="")
        assert status == 413 and body["error"] == {"type": "request_too_large",
                                                   "message": "Request exceeds the maximum size"}
        assert (await post("/messages/count_tokens", limit + 1))[0] == 413
        assert (await post("/messages", limit))[0] == 200
        assert (await post("/chat/completions", limit + 1))[0] != 413
