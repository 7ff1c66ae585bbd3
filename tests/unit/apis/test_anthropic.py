"""The Anthropic Messages dialect: stream grammar, usage, error envelope, compression."""

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from gateway.apis import ANTHROPIC_MESSAGES
from gateway.apis.base import Ending, EventKind, ForeignError, Inbound, Rejection
from gateway.apis.messages.claude_models import binds_thinking
from gateway.errors import Classification, ErrorType
from gateway.fake.messages_rules import preserves_thinking, refusal
from gateway.policy.compress import CompressionResult
from gateway.policy.tokens import request_tokens
from tests.anthropic_convo import SYSTEM, TOOLS, assert_valid_messages, messages_conversation, size
from tests.fakeupstream import anthropic_head, anthropic_tail, sse, text_delta

D = ANTHROPIC_MESSAGES


@pytest.mark.parametrize(("raw", "kind"), [
    (anthropic_head()[0], EventKind.CONTENTLESS),  # message_start
    (sse("ping", {"type": "ping"}), EventKind.CONTENTLESS),
    (anthropic_head()[2], EventKind.CONTENTLESS),  # an empty text block opening
    (sse("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "thinking", "thinking": ""}}), EventKind.CONTENTLESS),
    (sse("content_block_start", {"type": "content_block_start", "index": 1, "content_block": {
        "type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}}), EventKind.VISIBLE),
    (text_delta("Hi"), EventKind.VISIBLE),
    (anthropic_tail()[1], EventKind.FINAL),  # message_delta with its stop_reason: the answer is whole
    (sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": None},
                           "usage": {"output_tokens": 3}}), EventKind.VISIBLE),  # counts only
    (anthropic_tail()[2], EventKind.FINAL),  # message_stop
    (b": comment\n\n", EventKind.CONTENTLESS),
    (sse("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}), EventKind.ERROR),
    (sse("some_future_event", {"type": "some_future_event"}), EventKind.VISIBLE),
])  # fmt: skip
def test_event_kinds_before_commit(raw: bytes, kind: EventKind) -> None:
    assert D.reader(False).kind(raw, committed=False) is kind


def test_after_commit_only_the_end_and_errors_matter() -> None:
    r = D.reader(False)
    assert r.kind(sse("ping", {"type": "ping"}), committed=True) is EventKind.VISIBLE
    assert r.kind(text_delta("the word message_stop in text"), committed=True) is EventKind.VISIBLE
    assert r.kind(anthropic_tail()[2], committed=True) is EventKind.FINAL
    assert r.kind(anthropic_tail()[1], committed=True) is EventKind.FINAL  # message_delta's stop_reason
    assert r.kind(text_delta("the word message_delta in text"), committed=True) is EventKind.VISIBLE
    assert r.kind(text_delta("an error in prose"), committed=True) is EventKind.VISIBLE


def test_a_delta_after_commit_still_gives_its_signature_and_its_text_and_nothing_else() -> None:
    """A ``content_block_delta`` is read on its name alone after commit (``_DELTA_EVENT``): what a
    delta can carry (a thinking block's signature, the text a continuation needs) is still read."""
    marks: list[str] = []
    r = D.reader(False)
    r.signed = marks.append
    r.track()
    assert [r.kind(raw, committed=False) for raw in anthropic_head()] == [EventKind.CONTENTLESS] * 3
    usage = dict(r.usage)
    assert r.kind(text_delta('usage: "message_delta" message_stop'), committed=True) is EventKind.VISIBLE
    signature = sse("content_block_delta", {"type": "content_block_delta", "index": 1,
                                            "delta": {"type": "signature_delta", "signature": "EqQBsig"}})  # fmt: skip
    assert r.kind(signature, committed=True) is EventKind.VISIBLE
    assert marks == ["EqQBsig"]
    assert r.partial() == 'usage: "message_delta" message_stop'
    assert r.usage == usage


@pytest.mark.parametrize("committed", [False, True])
def test_message_stop_is_owed_from_the_stop_reason_until_it_comes(committed: bool) -> None:
    """A stream that ends after the stop_reason's message_delta is whole, but the TypeScript
    SDK's MessageStream makes its final message at message_stop alone: the reader says it is owed."""
    r = D.reader(False)
    for raw in [*anthropic_head(), text_delta("Hi"), anthropic_tail()[0]]:
        r.kind(raw, committed=committed)
        assert r.owed_end() == b""  # not whole yet: a broken stream owes its error, not this
    r.kind(sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": None},
                                 "usage": {"output_tokens": 3}}), committed=committed)  # fmt: skip
    assert r.owed_end() == b""
    r.kind(anthropic_tail()[1], committed=committed)
    assert r.owed_end() == b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    r.kind(anthropic_tail()[2], committed=committed)
    assert r.owed_end() == b""


def test_usage_counts_cache_tokens_as_prompt_and_takes_the_last_cumulative_output() -> None:
    r = D.reader(False)
    for raw in [*anthropic_head(input_tokens=10, cache_read=1000), text_delta("x"), *anthropic_tail(output_tokens=42)]:
        r.kind(raw, committed=False)
    assert r.usage == {"prompt": 1010, "completion": 42, "cache_read": 1000}  # of the prompt, priced apart
    body = {"usage": {"input_tokens": 5, "cache_creation_input_tokens": 7, "cache_read_input_tokens": 0,
                      "output_tokens": 3}}
    assert D.body_usage(body) == {"prompt": 12, "completion": 3, "cache_write": 7}


def test_broken_stream_event_is_one_anthropic_error_with_our_fields() -> None:
    c = Classification.of(ErrorType.PROVIDER_UNAVAILABLE)
    raw = D.reader(False).broken(Ending(c, "the upstream connection was reset mid-stream", "stream_broken"), "rid", None)
    assert raw.startswith(b"event: error\ndata: ") and raw.endswith(b"\n\n")
    doc = json.loads(raw.split(b"data: ", 1)[1])
    assert doc["type"] == "error" and doc["request_id"] == "rid"
    assert doc["error"]["type"] == "api_error"
    assert doc["error"]["x_llm_error_type"] == "provider_unavailable" and doc["error"]["retryable"] is True
    overloaded = D.reader(False).broken(Ending(c, "Overloaded", "overloaded_error"), "rid", None)
    assert json.loads(overloaded.split(b"data: ", 1)[1])["error"]["type"] == "overloaded_error"


@pytest.mark.parametrize(("kind", "code", "status", "type_"), [
    # An Anthropic upstream's own type is kept.
    (ErrorType.PROVIDER_UNAVAILABLE, "overloaded_error", 529, "overloaded_error"),
    (ErrorType.UNKNOWN, "invalid_request_error", 400, "invalid_request_error"),
    # Another API's error event, in Anthropic's terms: by class, else by the status it stands for.
    (ErrorType.PROVIDER_UNAVAILABLE, "server_error", 503, "overloaded_error"),  # chat: no status, its class's
    (ErrorType.PROVIDER_UNAVAILABLE, "503", 503, "overloaded_error"),  # Gemini UNAVAILABLE
    (ErrorType.PROVIDER_UNAVAILABLE, "server_error", 500, "api_error"),  # Responses response.failed
    (ErrorType.PROVIDER_UNAVAILABLE, "malformed_event", 502, "api_error"),
    (ErrorType.PROVIDER_UNAVAILABLE, "DEADLINE_EXCEEDED", 504, "timeout_error"),
    (ErrorType.RATE_LIMIT, "rate_limit_exceeded", 429, "rate_limit_error"),
    (ErrorType.RATE_LIMIT, "429", 429, "rate_limit_error"),
    (ErrorType.BUDGET, "insufficient_quota", 402, "billing_error"),
    (ErrorType.AUTH, "invalid_api_key", 401, "authentication_error"),
    (ErrorType.AUTH, "403", 403, "permission_error"),
    (ErrorType.CONTEXT_OVERFLOW, "context_length_exceeded", 400, "invalid_request_error"),
    (ErrorType.UNKNOWN, "400", 400, "invalid_request_error"),
    (ErrorType.UNKNOWN, "404", 404, "not_found_error"),
    (ErrorType.UNKNOWN, "server_error", 500, "api_error"),
    # The gateway cut the stream itself: no status to go by.
    (ErrorType.PROVIDER_UNAVAILABLE, "stream_broken", None, "api_error"),
    (ErrorType.PROVIDER_UNAVAILABLE, "idle_timeout", None, "api_error"),
])  # fmt: skip
def test_an_error_event_ending_a_stream_is_typed_as_anthropic_types_it(
    kind: ErrorType, code: str, status: int | None, type_: str
) -> None:
    raw = D.reader(False).broken(Ending(Classification.of(kind), "why", code, status), "rid", None)
    doc = json.loads(raw.split(b"data: ", 1)[1])
    assert doc["error"]["type"] == type_ and doc["error"]["code"] == code


@pytest.mark.parametrize(("status", "code", "answer", "type_"), [
    (400, "invalid_json", 400, "invalid_request_error"),
    (401, "invalid_client_key", 401, "authentication_error"),
    (404, "model_not_found", 404, "not_found_error"),
    (413, "request_too_large", 413, "request_too_large"),
    (502, "upstream_unreachable", 502, "api_error"),
    (504, "upstream_timeout", 504, "timeout_error"),
    (503, "circuit_open", 529, "overloaded_error"),
    (503, "accounting_unavailable", 529, "overloaded_error"),  # Anthropic has no 503
    (503, "503", 529, "overloaded_error"),  # a Gemini UNAVAILABLE event before anything was shown
])  # fmt: skip
def test_gateway_errors_use_anthropics_envelope(status: int, code: str, answer: int, type_: str) -> None:
    c = Classification.of(ErrorType.UNKNOWN)
    assert D.error_status(status, code) == answer
    doc = json.loads(D.error_body(answer, "why", code, c, "req-1"))
    assert doc == {"type": "error", "error": {"type": type_, "message": "why", "code": code,
                                              "x_llm_error_type": "unknown", "retryable": False},
                   "request_id": "req-1"}


@pytest.mark.parametrize(("upstream", "answer", "type_"), [
    # https://docs.claude.com/en/api/errors: "500 - api_error: An unexpected error has occurred
    # internal to Anthropic's systems"; "529 - overloaded_error: The API is temporarily overloaded".
    (500, 500, "api_error"),
    (501, 500, "api_error"),
    (520, 500, "api_error"),
    (502, 529, "overloaded_error"),
    (503, 529, "overloaded_error"),
    (529, 529, "overloaded_error"),
    (429, 529, "overloaded_error"),  # capacity said on a 429 ("Service tier capacity exceeded")
    (504, 504, "timeout_error"),
    (408, 504, "timeout_error"),
])  # fmt: skip
def test_a_translated_outage_takes_the_status_anthropic_gives_what_the_upstream_said(
    upstream: int, answer: int, type_: str
) -> None:
    """Not every outage is "overloaded": a chat upstream's 500 is Anthropic's 500 api_error (found
    by audit E: it was 529 overloaded_error, which Claude Code retries differently)."""
    c = Classification.of(ErrorType.PROVIDER_UNAVAILABLE, message="boom")
    status, body = D.foreign_error(ForeignError(upstream, c, "chat", upstream, b"{}", None, None), "req-1")
    err = json.loads(body)["error"]
    assert (status, err["type"], err["message"]) == (answer, type_, "boom")
    assert err["x_llm_upstream"]["status"] == upstream


@pytest.mark.parametrize(("status", "code", "error_code"), [
    (415, "unsupported_content_encoding", "request_body_encoding_unsupported"),
    (400, "invalid_content_encoding", "request_body_encoding_invalid"),
    (408, "request_timeout", "request_body_timeout"),
])  # fmt: skip
def test_a_body_the_gateway_cannot_read_is_anthropics_400_with_its_error_code(
    status: int, code: str, error_code: str
) -> None:
    """Anthropic's own answers, as the anthropic SDK maps them (``(400, error_code)`` in its
    ``_error_classes.ERROR_CLASSES``): read from ``error.details.error_code``."""
    answer = D.error_status(status, code)
    doc = json.loads(D.error_body(answer, "why", code, Classification.of(ErrorType.UNKNOWN), "req-1"))
    assert answer == 400 and doc["error"]["type"] == "invalid_request_error"
    assert doc["error"]["details"] == {"error_code": error_code} and doc["error"]["code"] == code


def test_admission() -> None:
    ok = D.admit(b"{}", {"model": "claude-x", "messages": [], "stream": True})
    assert isinstance(ok, Inbound) and ok.stream and ok.model == "claude-x"
    assert isinstance(D.admit(b"{}", {"messages": "hi"}), Rejection)
    assert isinstance(D.admit(b"{}", {"messages": [], "stream": "yes"}), Rejection)


OVERFLOW = "prompt is too long: {used} tokens > 40000 maximum"


def _rescue(payload: dict, used: int | None = None) -> dict:
    used = used if used is not None else size(payload["messages"]) // 3
    result = D.compress(payload, error_message=OVERFLOW.format(used=used), context_window=None)
    assert result.payload is not None, result.report
    return result.payload


def test_compressed_conversation_stays_valid_and_keeps_what_must_not_change() -> None:
    msgs = messages_conversation(rounds=40, output_bytes=4000)
    payload = {"model": "claude-x", "max_tokens": 4096, "system": SYSTEM, "messages": msgs,
               "tools": [{"name": "Bash", "input_schema": {"type": "object"}}]}
    original = copy.deepcopy(payload)
    out = _rescue(payload)
    assert payload == original, "the input must not be mutated"
    assert out["system"] is payload["system"] and out["tools"] is payload["tools"]
    new = out["messages"]
    assert_valid_messages(new)
    # The provider counted size // 3 tokens against a 40000 limit: the retry aims under it.
    assert size(new) < size(msgs) * 40000 / (size(msgs) // 3)
    assert size(new) > size(msgs) * 0.8 * 40000 / (size(msgs) // 3), "keeps as much as fits"
    # The newest user turn and everything after it (the current step) are untouched,
    # and so is every mid-conversation system entry.
    assert new[-5:] == msgs[-5:]
    assert [m for m in new if m["role"] == "system"] == [m for m in msgs if m["role"] == "system"]
    # The latest assistant turn's thinking block is byte-identical.
    assert json.dumps(new[-2]["content"][0]) == json.dumps(msgs[-2]["content"][0])
    # It says what it removed.
    assert "by llm-gateway" in json.dumps(new)


def test_cache_control_and_unknown_fields_on_kept_blocks_survive() -> None:
    msgs = messages_conversation(rounds=20, output_bytes=6000)
    msgs[-1]["content"][0]["cache_control"] = {"type": "ephemeral"}
    for m in msgs:
        if m["role"] == "user" and isinstance(m["content"], list):
            m["content"][0]["cache_control"] = {"type": "ephemeral"}
    out = _rescue({"model": "m", "max_tokens": 1000, "messages": msgs})
    kept_results = [b for m in out["messages"] if m["role"] == "user" for b in m["content"]
                    if b.get("type") == "tool_result"]
    assert kept_results and all(b.get("cache_control") == {"type": "ephemeral"} for b in kept_results)


def test_oversized_tool_results_are_cut_head_and_tail_in_both_content_forms() -> None:
    msgs = [{"role": "user", "content": "start"}]
    for i in range(2):
        tid = f"toolu_{i}"
        content = "A" * 60000 + "TAIL" if i == 0 else [{"type": "text", "text": "B" * 60000 + "TAIL"}]
        msgs += [{"role": "assistant", "content": [{"type": "tool_use", "id": tid, "name": "Read", "input": {}}]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tid, "content": content}]}]
    msgs += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "next"}]
    out = _rescue({"model": "m", "max_tokens": 1000, "messages": msgs}, used=45000)["messages"]
    assert_valid_messages(out)
    first = next(b for m in out for b in (m["content"] if isinstance(m["content"], list) else [])
                 if b.get("type") == "tool_result")
    text = first["content"] if isinstance(first["content"], str) else first["content"][0]["text"]
    assert "truncated by llm-gateway" in text and text.endswith("TAIL") and len(text) < 60000


def test_max_tokens_alone_is_lowered_when_that_fits() -> None:
    payload = {"model": "m", "max_tokens": 64000, "messages": [{"role": "user", "content": "x" * 7000}]}
    msg = "input length and `max_tokens` exceed context limit: 2010 + 64000 > 40000, decrease input length or `max_tokens` and try again"
    result = D.compress(payload, error_message=msg, context_window=None)
    assert result.payload is not None and result.payload["messages"] == payload["messages"]
    assert result.payload["max_tokens"] < 38000


def _turn(role: str, *blocks: Any) -> dict[str, Any]:
    return {"role": role, "content": list(blocks)}


def _text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def _think(t: str) -> dict[str, Any]:
    return {"type": "thinking", "thinking": t, "signature": f"sig-{t}"}


def _call(i: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": f"toolu_{i}", "name": "Bash", "input": {"command": "ls"}}


def _result(i: str, size: int = 2000) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": f"{i}: " + "r" * size}


def _system(t: str, **fields: Any) -> dict[str, Any]:
    return {"role": "system", "content": t, **fields}


# Claude Code's first prompt carries the project's context: the first thing to go. A document,
# which is never cut, makes it go whole.
FIRST = {"role": "user", "content": [_text("fix the build"), {
    "type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "A" * 46000}}]}
# An older round too large to keep: its call's input is never cut.
LARGE = [{"role": "assistant", "content": [{**_call("big"), "input": {"command": "y" * 30000}}]},
         {"role": "user", "content": [_result("big", 100)]}]
CLAUDE_CODE_SYSTEM = _system("# Environment\nAvailable agent types: general.", output_config={"effort": "medium"})


def _squeezed(payload: dict[str, Any], share: float = 0.5) -> CompressionResult:
    """The rescue of a request the provider counted as we do and allowed ``share`` of."""
    used = round(request_tokens(payload))
    return D.compress(payload, error_message=f"prompt is too long: {used} tokens > {int(used * share)} maximum",
                      context_window=None)


def _rounds(n: int, tag: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for k in range(n):
        out += [_turn("assistant", _think(f"{tag}{k}"), _call(f"{tag}{k}")), _turn("user", _result(f"{tag}{k}"))]
    return out


# Each: messages (in Claude Code's shapes), and what the retry's system entries become.
PLACEMENT = {
    # Claude Code's interactive session: its system entry after the first prompt, which goes.
    "after the first prompt": (
        [FIRST, CLAUDE_CODE_SYSTEM, *_rounds(6, "a"), _turn("assistant", _text("done")),
         _turn("user", _text("now fix it")), *_rounds(1, "b")],
        [CLAUDE_CODE_SYSTEM]),
    # Two entries in what is dropped: one entry, each one's blocks in turn, the later directive's.
    "two in the dropped turns": (
        [FIRST, CLAUDE_CODE_SYSTEM, *LARGE, _system("Tool Foo is available.", output_config={"effort": "low"}),
         *_rounds(6, "a"), _turn("assistant", _text("done")), _turn("user", _text("now fix it")), *_rounds(1, "b")],
        [{"role": "system", "output_config": {"effort": "low"},
          "content": [_text(CLAUDE_CODE_SYSTEM["content"]), _text("Tool Foo is available.")]}]),
    # Nothing older fits: the entry goes after the newest prompt, one with the one kept there.
    "before a kept system entry": (
        [FIRST, CLAUDE_CODE_SYSTEM, *LARGE,
         _turn("user", _text("now fix it")), _system("<reminder>plan mode</reminder>"), *_rounds(2, "b")],
        [{**CLAUDE_CODE_SYSTEM, "content": [_text(CLAUDE_CODE_SYSTEM["content"]), _text("<reminder>plan mode</reminder>")]}]),
    # The newest prompt ends the conversation: the entry ends it.
    "the prompt is last": (
        [FIRST, CLAUDE_CODE_SYSTEM, *LARGE,
         _turn("user", _text("now fix it"))],
        [CLAUDE_CODE_SYSTEM]),
    # Kept where the client put it when the prompt before it is kept.
    "after a kept prompt": (
        [FIRST, _turn("assistant", _text("ok")), _turn("user", _text("next")), CLAUDE_CODE_SYSTEM,
         *_rounds(6, "a"), _turn("assistant", _text("done")), _turn("user", _text("now fix it")), *_rounds(1, "b")],
        [CLAUDE_CODE_SYSTEM]),
}  # fmt: skip


@pytest.mark.parametrize("name", list(PLACEMENT))
def test_the_retry_puts_system_entries_where_anthropic_takes_them(name: str) -> None:
    msgs, systems = PLACEMENT[name]
    payload = {"model": "claude-opus-5-5", "max_tokens": 4096, "messages": msgs, "tools": TOOLS}
    assert refusal("/v1/messages", payload, {}) is None  # what the client sent Anthropic takes
    result = _squeezed(payload)
    assert result.payload is not None, result.report
    out = result.payload
    assert refusal("/v1/messages", out, dict(result.headers)) is None, [m["role"] for m in out["messages"]]
    assert [m for m in out["messages"] if m["role"] == "system"] == systems
    assert out["messages"][0]["role"] == "user"


DROPPING = {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "drop_block"}}


def test_a_binding_model_is_asked_to_drop_the_thinking_whose_prefix_changed() -> None:
    """Only a cut (nothing dropped): the blocks after the cut output no longer stand behind the
    conversation Claude wrote them in; the retry keeps every block as it was (signed) and asks
    Anthropic to drop those that fail the prefix check, with the beta that field needs."""
    msgs = [_turn("user", _text("fix it")), _turn("assistant", _think("t0"), _call("0")),
            _turn("user", _result("0", 200)), _turn("assistant", _think("t1"), _call("1")),
            _turn("user", _result("1", 150000)), _turn("assistant", _think("t2"), _text("read it")),
            _turn("user", _text("now fix it"))]  # fmt: skip
    payload = {"model": "claude-opus-5-5", "max_tokens": 4096, "messages": msgs, "tools": TOOLS,
               "thinking": {"type": "adaptive", "display": "summarized"}}
    result = _squeezed(payload, 0.7)
    assert result.payload is not None and result.report["messages_removed"] == 0, result.report
    new = result.payload["messages"]
    assert new[:4] == msgs[:4] and new[5] == msgs[5]  # blocks as sent, the cut output aside
    assert result.payload["thinking"] == {**DROPPING, "display": "summarized"}
    assert result.report["thinking_binding"] == "drop_block"
    assert result.headers == (("anthropic-beta", "thinking-binding-controls-2026-08-01"),)


def test_a_binding_models_tool_loop_keeps_its_thinking_and_thinks_on() -> None:
    """The documented remedy leaves the tool loop in progress its own block (the API drops it if
    it fails the check) and thinking on: no context edit is lost either. A request that named
    no thinking gets the field ("models with preserved thinking think adaptively by default")."""
    msgs = [FIRST, CLAUDE_CODE_SYSTEM, *_rounds(4, "a"), _turn("assistant", _text("done")),
            _turn("user", _text("now fix it")), *_rounds(2, "b")]  # fmt: skip
    edits = {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}
    for thinking in ({"type": "adaptive"}, None):
        payload = {"model": "claude-fable-5-1", "max_tokens": 4096, "messages": msgs, "tools": TOOLS,
                   "context_management": edits, **({"thinking": thinking} if thinking else {})}
        result = _squeezed(payload)
        assert result.payload is not None and result.report["messages_removed"] > 0, result.report
        out = result.payload
        assert out["thinking"] == DROPPING and out["context_management"] == edits
        assert out["messages"][-2:] == msgs[-2:]


def test_a_binding_model_with_thinking_off_has_the_blocks_left_out_by_hand() -> None:
    """The same page: "If ... your request turned thinking off, remove the thinking by hand"."""
    msgs = [FIRST, CLAUDE_CODE_SYSTEM, *_rounds(4, "a"), _turn("assistant", _text("done")),
            _turn("user", _text("now fix it")), *_rounds(2, "b")]  # fmt: skip
    payload = {"model": "claude-fable-5-1", "max_tokens": 4096, "messages": msgs, "tools": TOOLS,
               "thinking": {"type": "disabled"}}
    result = _squeezed(payload)
    assert result.payload is not None and result.report["thinking_removed"] > 0, result.report
    assert result.payload["thinking"] == {"type": "disabled"} and result.headers == ()
    assert not [b for m in result.payload["messages"] if isinstance(m["content"], list) for b in m["content"]
                if b["type"] in ("thinking", "redacted_thinking")]


@pytest.mark.parametrize(("model", "binds"), [
    ("claude-fable-5-1", True), ("claude-fable-5-2", True), ("claude-opus-5-5", True), ("claude-sonnet-5-5", True),
    ("claude-haiku-5-5", True), ("us.anthropic.claude-opus-5-5-v1:0", True), ("claude-fable-5", False),
    ("claude-mythos-5-1", False), ("claude-opus-5", False), ("claude-opus-4-8", False), ("claude-sonnet-4-5", False),
    ("claude-mythos-preview", False), ("qwen3-coder", False),
])  # fmt: skip
def test_the_models_that_bind_thinking_are_the_fakes(model: str, binds: bool) -> None:
    """The gateway's list and the fake's (which refuses a moved block) are read from the same
    pages; they must agree, or the fake would not catch a retry the real API refuses."""
    assert binds_thinking(model) is binds
    assert preserves_thinking(model) is binds


@pytest.mark.parametrize("model", ["claude-opus-4-8", "claude-sonnet-4-5", "m"])
def test_a_model_that_does_not_bind_thinking_keeps_it_and_thinks_on(model: str) -> None:
    """The same tool loop as above on a model that takes thinking after dropped turns: the kept
    turns' thinking goes as it was and the rescued turn thinks as the client asked."""
    msgs = [FIRST, CLAUDE_CODE_SYSTEM, *_rounds(4, "a"), _turn("assistant", _text("done")),
            _turn("user", _text("now fix it")), *_rounds(2, "b")]  # fmt: skip
    payload = {"model": model, "max_tokens": 4096, "messages": msgs, "tools": TOOLS, "thinking": {"type": "adaptive"}}
    result = _squeezed(payload)
    assert result.payload is not None and result.report["messages_removed"] > 0, result.report
    out = result.payload
    assert out["thinking"] == {"type": "adaptive"} and "thinking_off" not in result.report
    assert "thinking_removed" not in result.report
    assert out["messages"][-2:] == msgs[-2:]  # the tool loop in progress, its thinking included


@pytest.mark.parametrize(("cache_creation", "written"), [
    # The audit's answer: every written token written for an hour.
    ({"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 300_000}, {"cache_write_1h": 300_000}),
    ({"ephemeral_5m_input_tokens": 100, "ephemeral_1h_input_tokens": 200}, {"cache_write_1h": 200}),
    ({"ephemeral_5m_input_tokens": 300_000, "ephemeral_1h_input_tokens": 0}, {}),  # all five-minute
    (None, {}),  # an answer without the split: the five-minute price, as before
    ({"ephemeral_1h_input_tokens": "many"}, {}),
])  # fmt: skip
def test_usage_tells_one_hour_cache_writes_apart(cache_creation: Any, written: dict[str, int]) -> None:
    usage: dict[str, Any] = {"input_tokens": 5, "cache_creation_input_tokens": 300_000, "cache_read_input_tokens": 0,
                             "output_tokens": 3}  # fmt: skip
    if cache_creation is not None:
        usage["cache_creation"] = cache_creation
    assert D.body_usage({"usage": usage}) == {"prompt": 300_005, "completion": 3, "cache_write": 300_000, **written}


def test_parallel_tool_results_in_one_message_keep_the_small_ones_whole() -> None:
    """Claude Code's captured tool round (tests/corpus/requests/claude-code-2.1.332-bash-result.json)
    made three parallel calls, answered in one user message as Claude Code answers them: its own
    ``hi``, a config file and a 200 KB log. Shared in proportion, the config lost 60 % of itself."""
    body = json.loads((Path(__file__).resolve().parents[2] / "corpus" / "requests" /
                       "claude-code-2.1.332-bash-result.json").read_text())["body"]  # fmt: skip
    *history, call_turn, result_turn = body["messages"]
    [call] = call_turn["content"]
    [result] = result_turn["content"]
    log = "2026-11-30 log line with details\n" * 6000
    config = "".join(f"setting_{i} = value_{i}\n" for i in range(200))
    calls, results = [call], [result]
    for i, output in enumerate((log, config)):
        calls.append({**call, "id": f"toolu_read{i}", "name": "Read", "input": {"file_path": f"/f{i}"}})
        results.append({"tool_use_id": f"toolu_read{i}", "type": "tool_result", "content": output})
    messages = [*history, {**call_turn, "content": calls}, {**result_turn, "content": results}]
    payload = {**body, "messages": messages, "max_tokens": 4096}
    used = round(request_tokens(payload))
    result = D.compress(payload, error_message=f"prompt is too long: {used} tokens > {used // 2} maximum",
                        context_window=None)  # fmt: skip
    assert result.payload is not None, result.report
    out = result.payload["messages"]
    assert_valid_messages(out)
    hi, big, small = out[-1]["content"]
    assert hi == result_turn["content"][0] and small["content"] == config
    assert "truncated by llm-gateway" in big["content"] and len(big["content"]) < len(log) // 2
