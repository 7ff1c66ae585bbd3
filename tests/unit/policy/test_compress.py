"""Compression over a table of conversations × limits: validity, what is kept verbatim,
how much of the budget is used, and the notes that say what was cut."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.policy.compress import compress
from gateway.policy.cut import cut_text, truncate
from gateway.policy.tokens import request_tokens
from tests.convo import agent_conversation, assert_valid_conversation


def openai_overflow(limit: int, payload: dict[str, Any], ratio: float = 1.1) -> str:
    used = int(request_tokens(payload) * ratio)  # the "provider" counts 10 % more than we do
    return (f"This model's maximum context length is {limit} tokens. However, your messages "
            f"resulted in {used} tokens. Please reduce the length of the messages.")


def plain_chat(turns: int = 60) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."}]
    for i in range(turns):
        msgs += [{"role": "user", "content": f"Question {i}: " + "why " * 200},
                 {"role": "assistant", "content": f"Answer {i}: " + "because " * 200}]
    msgs.append({"role": "user", "content": "Final question?"})
    return msgs


def giant_output() -> list[dict[str, Any]]:
    msgs = agent_conversation(3)
    msgs.insert(-1, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "big", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\": \"log.txt\"}"}}]})
    msgs.insert(-1, {"role": "tool", "tool_call_id": "big", "content": "HEAD-MARK " + "log line\n" * 60_000 + " TAIL-MARK"})
    return msgs


def multimodal() -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "Describe images."}]
    for i in range(20):
        msgs.append({"role": "user", "content": [{"type": "text", "text": f"Image {i}: " + "detail " * 400},
                                                 {"type": "image_url", "image_url": {"url": f"https://x/{i}.png"}}]})
        msgs.append({"role": "assistant", "content": "It shows " + "things " * 300})
    msgs.append({"role": "user", "content": [{"type": "text", "text": "And the last one?"}]})
    return msgs


def parallel_tools() -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "developer", "content": "Use tools."}, {"role": "user", "content": "Go."}]
    for i in range(25):
        ids = [f"c{i}_{j}" for j in range(3)]
        msgs.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": c, "type": "function", "function": {"name": "grep", "arguments": "{}"}} for c in ids]})
        msgs += [{"role": "tool", "tool_call_id": c, "content": "match " * 300} for c in ids]
    msgs.append({"role": "user", "content": "Summarise."})
    return msgs


def current_step() -> list[dict[str, Any]]:
    """The newest user message is followed by the step the agent is on."""
    msgs = agent_conversation(20)
    msgs += [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "now", "type": "function", "function": {"name": "run_tests", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "now", "content": "FAILED test_x " * 400}]
    return msgs


CONVERSATIONS = {
    "plain-chat": plain_chat, "agent-40-rounds": lambda: agent_conversation(40), "giant-tool-output": giant_output,
    "multimodal": multimodal, "parallel-tools": parallel_tools, "current-step": current_step,
}


def newest_user(msgs: list[dict[str, Any]]) -> dict[str, Any]:
    return next(m for m in reversed(msgs) if m["role"] == "user")


@pytest.mark.parametrize("limit_ratio", [0.8, 0.5, 0.25])
@pytest.mark.parametrize("name", list(CONVERSATIONS))
def test_table(name: str, limit_ratio: float) -> None:
    msgs = CONVERSATIONS[name]()
    payload = {"model": "m", "messages": msgs}
    frozen = json.dumps(payload)
    limit = int(request_tokens(payload) * 1.1 * limit_ratio)
    r = compress(payload, error_message=openai_overflow(limit, payload), context_window=None)
    assert json.dumps(payload) == frozen  # the input is never mutated
    assert r.outcome == "applied" and r.payload is not None
    out = r.payload["messages"]
    assert_valid_conversation(out)
    for m in msgs:
        if m["role"] in ("system", "developer"):
            assert m in out
    assert newest_user(msgs) in out
    first = next(m for m in out if m["role"] not in ("system", "developer"))
    assert first["role"] == "user"
    assert r.estimated_after <= r.target_tokens
    assert r.estimated_after >= 0.85 * r.target_tokens, (r.estimated_after, r.target_tokens)
    text = json.dumps(out)
    if r.report["messages_removed"]:
        assert "earlier messages" in text and "were removed by llm-gateway to fit" in text
    if r.report["outputs_truncated"]:
        assert "truncated by llm-gateway" in text and "more bytes" in text
    assert not any(k in json.dumps(r.report) for k in ("why why", "because", "log line"))  # sizes, not content


def test_giant_output_keeps_head_and_tail() -> None:
    payload = {"model": "m", "messages": giant_output()}
    r = compress(payload, error_message=openai_overflow(8000, payload), context_window=None)
    assert r.payload is not None
    big = next(m for m in r.payload["messages"] if m.get("tool_call_id") == "big")
    assert big["content"].startswith("HEAD-MARK") and big["content"].endswith("TAIL-MARK")


def test_current_step_is_kept_when_older_turns_suffice() -> None:
    msgs = current_step()
    payload = {"model": "m", "messages": msgs}
    r = compress(payload, error_message=openai_overflow(9000, payload), context_window=None)
    assert r.payload is not None
    assert msgs[-2] in r.payload["messages"] and msgs[-1] in r.payload["messages"]


def test_single_user_message_alone_over_the_limit_is_not_applicable() -> None:
    payload = {"model": "m", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "x" * 100_000}]}
    r = compress(payload, error_message=openai_overflow(2000, payload), context_window=None)
    assert r.outcome == "not_applicable" and r.payload is None


def test_only_the_completion_budget_is_lowered_when_the_messages_fit() -> None:
    payload = {"model": "m", "messages": plain_chat(5), "max_tokens": 8000}
    prompt = int(request_tokens(payload))
    msg = (f"This model's maximum context length is {prompt + 2000} tokens. However, you requested "
           f"{prompt + 8000} tokens ({prompt} in the messages, 8000 in the completion). Please reduce the length of the messages or completion.")
    r = compress(payload, error_message=msg, context_window=None)
    assert r.payload is not None and r.payload["messages"] == payload["messages"]
    assert 256 <= r.payload["max_tokens"] < 2000 and r.report["max_tokens_lowered_to"] == r.payload["max_tokens"]


def test_context_window_is_used_without_numbers_and_estimate_without_either() -> None:
    payload = {"model": "m", "messages": agent_conversation(40)}
    size = request_tokens(payload)
    by_window = compress(payload, error_message="Input is too long for requested model.", context_window=int(size / 2))
    assert by_window.payload is not None and request_tokens(by_window.payload) <= size / 2
    blind = compress(payload, error_message="prompt too long", context_window=None)
    assert blind.payload is not None and request_tokens(blind.payload) <= size * 0.6


@pytest.mark.parametrize("messages", [None, "x", [], [1, 2], [{"role": "user"}]])
def test_odd_input_never_raises(messages: Any) -> None:
    r = compress({"model": "m", "messages": messages}, error_message="prompt is too long: 10 tokens > 5 maximum",
                 context_window=None)
    assert r.outcome == "not_applicable"


def test_one_megabyte_is_fast() -> None:
    msgs = agent_conversation(400, output_bytes=2500)
    payload = {"model": "m", "messages": msgs}
    assert len(json.dumps(payload)) > 1_000_000
    t0 = time.perf_counter()
    r = compress(payload, error_message=openai_overflow(50_000, payload), context_window=None)
    assert r.outcome == "applied"
    assert time.perf_counter() - t0 < 0.5  # the bench measures it properly; this only catches blow-ups


def test_a_provider_count_far_above_ours_is_trusted_not_capped() -> None:
    """Images, tool schemas or a tokenizer unlike ours can make the provider count many times
    our estimate; the retry must still aim under the provider's own number."""
    payload = {"model": "m", "messages": agent_conversation(20)}
    ours = request_tokens(payload)
    provider, limit = int(ours * 6), int(ours * 5)
    r = compress(payload, error_message=openai_overflow(limit, payload, ratio=6), context_window=None)
    assert r.outcome == "applied" and r.payload is not None, r.report
    assert r.estimated_before == pytest.approx(provider, rel=0.01)
    assert r.estimated_after <= r.target_tokens <= limit
    # After the cut, the provider (counting 6x ours) would see no more than the target.
    assert request_tokens(r.payload) * 6 <= limit
    assert r.report["calibration"] == pytest.approx(6, rel=0.01)


def test_not_applicable_says_the_true_reason() -> None:
    huge_user = {"model": "m", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "x" * 100_000}]}
    r = compress(huge_user, error_message=openai_overflow(2000, huge_user), context_window=None)
    assert r.payload is None and r.report["reason"].startswith("protected messages alone exceed")
    assert r.report["protected_tokens"] > r.report["target_tokens"]
    # The provider's own count is under the limit once a default completion budget is set aside:
    # there is nothing in the conversation to remove, and the report must not blame protected messages.
    small = {"model": "m", "messages": plain_chat(3)}
    msg = "input length and `max_tokens` exceed context limit: 2000 + 8192 > 10000, decrease input length"
    r = compress(small, error_message=msg, context_window=None)
    assert r.payload is None and "protected" not in r.report["reason"]
    assert r.report["reason"].startswith("the messages already fit")


@pytest.mark.parametrize("name", ["agent-40-rounds", "current-step"])
def test_the_report_says_what_was_tried_in_counts_and_sizes(name: str) -> None:
    payload = {"model": "m", "messages": CONVERSATIONS[name]()}
    r = compress(payload, error_message=openai_overflow(int(request_tokens(payload) * 0.5), payload),
                 context_window=None)
    assert r.payload is not None
    for key in ("messages_removed", "turns_removed", "outputs_truncated", "bytes_removed"):
        assert isinstance(r.report[key], int)
    assert r.report["target_tokens"] == r.target_tokens
    assert r.report["estimated_before"] == r.estimated_before and r.report["estimated_after"] == r.estimated_after
    assert r.report["limit_source"] == "provider"
    json.dumps(r.report)  # it goes into the JSON log line as it is


def history(msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages a rescue may drop or cut: neither system nor the newest user message."""
    last = newest_user(msgs)
    return [m for m in msgs if m["role"] not in ("system", "developer") and m is not last]


def test_the_oldest_turns_are_dropped_whole_before_anything_is_cut() -> None:
    """The reported case: 24 messages came back with every older message truncated (the last
    assistant reply too) and nothing dropped."""
    msgs = [*agent_conversation(10)[:24], {"role": "user", "content": "go on"}]
    payload = {"model": "m", "messages": msgs}
    r = compress(payload, error_message=openai_overflow(int(request_tokens(payload) * 0.8), payload),
                 context_window=None)
    assert r.payload is not None
    assert r.report["turns_removed"] > 0
    # At most the oldest turn kept is cut, to fill the room left; the rest is the newest part, verbatim.
    assert r.report["outputs_truncated"] <= 1
    out = history(r.payload["messages"])
    after_cut = out[max((i for i, m in enumerate(out) if "truncated by" in json.dumps(m)), default=0) + 1:]
    assert after_cut == history(msgs)[-len(after_cut):] and len(after_cut) >= 12
    assert msgs[-2] in r.payload["messages"]  # the last assistant reply
    assert r.estimated_after >= 0.9 * r.target_tokens


@pytest.mark.parametrize("limit_ratio", [0.8, 0.5, 0.25])
@pytest.mark.parametrize("name", ["plain-chat", "agent-40-rounds", "parallel-tools", "multimodal"])
def test_only_the_oldest_kept_turn_may_be_cut(name: str, limit_ratio: float) -> None:
    msgs = CONVERSATIONS[name]()
    payload = {"model": "m", "messages": msgs}
    r = compress(payload, error_message=openai_overflow(int(request_tokens(payload) * 1.1 * limit_ratio), payload),
                 context_window=None)
    assert r.payload is not None
    # (the note about what was removed may be merged into the first message kept)
    out = [m for m in history(r.payload["messages"]) if "removed by llm-gateway" not in json.dumps(m)]
    cut = [m for m in out if "truncated by llm-gateway" in json.dumps(m)]
    assert len(cut) <= 4  # one unit: a message, or a call with its (here at most 3) results
    # Everything newer than the cut turn is verbatim, and together with it a suffix of the history.
    newest_cut = max((out.index(m) for m in cut), default=-1)
    assert all(m in msgs for m in out[newest_cut + 1:])
    assert out[newest_cut + 1:] == history(msgs)[len(history(msgs)) - len(out[newest_cut + 1:]):]


def test_a_large_output_that_fits_whole_is_not_cut() -> None:
    """Older turns go before a large output that fits is touched."""
    msgs = agent_conversation(30)
    msgs.insert(-1, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "big", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]})
    msgs.insert(-1, {"role": "tool", "tool_call_id": "big", "content": "L" * 20_000})  # ~5.7k tokens
    payload = {"model": "m", "messages": msgs}
    r = compress(payload, error_message=openai_overflow(12_000, payload), context_window=None)
    assert r.payload is not None and msgs[-2] in r.payload["messages"]
    assert r.report["turns_removed"] > 0


def test_a_giant_output_is_cut_so_that_older_turns_keep_room() -> None:
    """Dropping alone would spend the whole budget on one log and leave too little else."""
    msgs = giant_output()
    msgs[2:2] = agent_conversation(30)[2:-1]  # thirty turns older than the giant output
    payload = {"model": "m", "messages": msgs}
    r = compress(payload, error_message=openai_overflow(30_000, payload), context_window=None)
    assert r.payload is not None
    out = r.payload["messages"]
    big = next(m for m in out if m.get("tool_call_id") == "big")
    assert big["content"].startswith("HEAD-MARK") and big["content"].endswith("TAIL-MARK")
    kept_older = [m for m in out if m.get("role") == "tool" and m.get("tool_call_id") != "big" and m in msgs]
    assert len(kept_older) >= 10, "the turns before the giant output are kept whole, not dropped for it"
    assert r.estimated_after >= 0.9 * r.target_tokens


def test_the_note_takes_the_content_form_of_the_newest_user_message() -> None:
    msgs = agent_conversation(40)
    msgs[1] = {"role": "assistant", "content": "hello"}  # so the note cannot merge into a user message
    msgs[-1] = {"role": "user", "content": [{"type": "text", "text": "Now write the fix."}]}
    payload = {"model": "m", "messages": msgs}
    r = compress(payload, error_message=openai_overflow(int(request_tokens(payload) * 0.5), payload),
                 context_window=None)
    assert r.payload is not None
    note = r.payload["messages"][1]
    assert note["role"] == "user" and isinstance(note["content"], list)
    assert "removed by llm-gateway" in note["content"][0]["text"]


def test_room_a_dropped_turn_leaves_goes_back_to_the_outputs_already_cut() -> None:
    """Cut to a quarter to leave room for older turns, a giant output gets that room back when
    the older turn cannot fit even cut (ten results of which each would keep a head and tail)."""
    ids = [f"p{j}" for j in range(10)]
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "s"}, {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": c, "type": "function"} for c in ids]},
        *({"role": "tool", "tool_call_id": c, "content": "r" * 3500} for c in ids),
        {"role": "assistant", "content": None, "tool_calls": [{"id": "big", "type": "function"}]},
        {"role": "tool", "tool_call_id": "big", "content": "HEAD " + "x" * 40_000 + " TAIL"},
        {"role": "user", "content": "next"},
    ]
    payload = {"model": "m", "messages": msgs}
    r = compress(payload, error_message=openai_overflow(4000, payload, ratio=1.0), context_window=None)
    assert r.payload is not None and r.report["messages_removed"] == 12  # "go" and the ten-result turn
    assert r.estimated_after >= 0.9 * r.target_tokens, (r.estimated_after, r.target_tokens)


def test_a_cut_that_leaves_the_older_turns_room_keeps_every_one_of_them() -> None:
    """The cut spends what the older turns leave, to the token; the oldest of them then fits the
    room left exactly, and must not be dropped for a rounding error."""
    for pad in range(40):
        msgs: list[dict[str, Any]] = [
            {"role": "user", "content": "fix it" + "!" * pad},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "a", "type": "function"}]},
            {"role": "tool", "tool_call_id": "a", "content": "r" * 200},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "big", "type": "function"}]},
            {"role": "tool", "tool_call_id": "big", "content": "x" * 150_000},
            {"role": "assistant", "content": "read it"}, {"role": "user", "content": "now fix it"}]
        payload = {"model": "m", "messages": msgs}
        r = compress(payload, error_message=openai_overflow(int(request_tokens(payload) * 0.5), payload, 1.0),
                     context_window=None)
        assert r.payload is not None and r.report["outputs_truncated"] == 1
        assert r.report["messages_removed"] == 0, pad


def _corpus_message(name: str) -> str:
    entries = json.loads((Path(__file__).resolve().parents[2] / "corpus" / "openai.json").read_text())
    message: str = next(e for e in entries["cases"] if e["name"] == name)["body"]["error"]["message"]
    return message


# OpenAI's Responses overflow states no limit and no count (tests/corpus/openai.json).
NO_NUMBERS = _corpus_message("openai-overflow-responses-wording")


def resumed_session() -> dict[str, Any]:
    """Gemini CLI's shape after ``-r latest``: a 30 KB system prompt, an old 50 KB turn and a new
    25 KB prompt. Half the request (the only target an overflow without numbers gives) is less
    than the protected messages, though dropping the old turn alone halves it."""
    return {"model": "m", "messages": [
        {"role": "system", "content": "You are an interactive CLI agent. " * 900},
        {"role": "user", "content": "old " * 12_500}, {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "new " * 6_250}]}  # fmt: skip


@pytest.mark.parametrize(
    ("case", "error", "window", "outcome"),
    [
        # The target is a guess: everything that may go goes, and the one retry is sent.
        ("estimate", NO_NUMBERS, None, "applied"),
        # A stated limit the protected messages exceed: no retry can fit it.
        ("provider", "provider", None, "not_applicable"),
        ("context_window", NO_NUMBERS, "window", "not_applicable"),
    ],
)
def test_protected_messages_over_the_target(case: str, error: str, window: str | None, outcome: str) -> None:
    payload = resumed_session()
    protected = request_tokens({"messages": [payload["messages"][0], payload["messages"][-1]]})
    limit = int(protected * 0.9)
    message = openai_overflow(limit, payload) if error == "provider" else error
    r = compress(payload, error_message=message, context_window=limit if window else None)
    assert (r.outcome, r.report["limit_source"]) == (outcome, case)
    if outcome == "not_applicable":
        assert r.payload is None and r.report["reason"].startswith("protected messages alone exceed")
        return
    assert r.payload is not None and r.report["short_of_target"] is True
    kept = r.payload["messages"]
    assert kept[0] == payload["messages"][0] and kept[-1] == payload["messages"][-1]  # protected, as they were
    assert r.report["turns_removed"] == 2 and "old old" not in json.dumps(kept)
    assert r.estimated_after < r.estimated_before * 0.6


def test_a_guessed_target_with_nothing_to_remove_is_still_not_applicable() -> None:
    payload = {"model": "m", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "x" * 100_000}]}
    r = compress(payload, error_message=NO_NUMBERS, context_window=None)
    assert r.payload is None and r.report["reason"].startswith("protected messages alone exceed")
    assert r.report["limit_source"] == "estimate"


def test_a_text_a_cut_would_not_shorten_is_left_whole() -> None:
    """Gemini CLI's captured directory listing (72 bytes, tests/corpus/requests/
    gemini-cli-0.61-tool-result.json) beside a large output, on the tightest room: cut to a
    64-byte glimpse, it came back at 106 bytes, its middle the marker."""
    body = json.loads((Path(__file__).resolve().parents[2] / "corpus" / "requests" /
                       "gemini-cli-0.61-tool-result.json").read_text())["body"]  # fmt: skip
    listing = body["contents"][2]["parts"][0]["functionResponse"]["response"]["output"]
    assert cut_text(listing, 64) == (listing, 0)
    parts = [{"type": "text", "text": listing}, {"type": "text", "text": "log line\n" * 2000}]
    cut, removed = truncate({"role": "tool", "content": parts}, 0)
    assert cut["content"][0] is parts[0] and removed > 17000
    assert "truncated by llm-gateway" in cut["content"][1]["text"]


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=400), keep=st.integers(0, 400))
def test_a_cut_text_is_always_shorter_than_it_was(text: str, keep: int) -> None:
    new, removed = cut_text(text, keep)
    assert (new, removed) == (text, 0) or len(new.encode()) < len(text.encode())


def test_a_per_minute_refusal_calibrates_by_the_prompt_alone() -> None:
    """OpenAI's TPM refusal ("Limit 30000, Requested 36278", tests/corpus/openai.json) counts
    the max_tokens sent too: scaled by the whole count, our estimate of each message came out
    a fifth too high, and the one compression dropped two turns more than the limit needed
    (13 of 25 messages kept against 15: review). The pipeline hands the prompt alone."""
    from tests.corpus_cases import IN_SAMPLE, classify_case

    case = next(c for c in IN_SAMPLE if c["name"] == "openai-429-request-bigger-than-tpm-is-overflow")
    message = classify_case(case).message
    said: list[dict[str, Any]] = []
    for i in range(12):
        said += [{"role": "user", "content": f"fact {i}: " + "word " * 600}, {"role": "assistant", "content": "noted"}]
    payload = {"model": "gpt-4o", "max_tokens": 6000, "messages": [*said, {"role": "user", "content": "fact 11?"}]}
    whole = compress(payload, error_message=message, context_window=128000)
    alone = compress(payload, error_message=message, context_window=128000, prompt_tokens=36278 - 6000)
    assert alone.report["calibration"] == round(max(0.5, (36278 - 6000) / request_tokens(payload)), 3)
    assert alone.payload is not None and whole.payload is not None
    assert len(alone.payload["messages"]) > len(whole.payload["messages"])
