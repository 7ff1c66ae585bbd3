"""The opt-in proactive cap: any single tool output above N tokens is cut to head + tail
before the first send; nothing else is touched, the input never changes."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.policy.compress import cap_tool_outputs
from gateway.policy.cut import text_tokens
from tests.convo import agent_conversation, assert_valid_conversation


def with_big_output(text: str) -> list[dict[str, Any]]:
    msgs = agent_conversation(3)
    msgs.insert(-1, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "big", "type": "function", "function": {"name": "read", "arguments": "{\"path\": \"" + "a" * 9000 + "\"}"}}]})
    msgs.insert(-1, {"role": "tool", "tool_call_id": "big", "content": text})
    return msgs


def test_only_a_tool_output_over_the_cap_is_cut_to_head_and_tail() -> None:
    msgs = with_big_output("HEAD " + "log line\n" * 20_000 + "TAIL")
    msgs[1] = {"role": "user", "content": "u" * 50_000}  # long, but not a tool output
    payload = {"model": "m", "messages": msgs, "tools": [{"type": "function"}], "max_tokens": 10}
    frozen = json.dumps(payload)
    out, report = cap_tool_outputs(payload, 1000)
    assert json.dumps(payload) == frozen  # the input is never mutated
    assert out is not None and report == {"outputs_capped": 1, "bytes_removed": report["bytes_removed"]}
    assert report["bytes_removed"] > 170_000
    big = out["messages"][-2]
    assert big["content"].startswith("HEAD ") and big["content"].endswith("TAIL")
    assert "…truncated by llm-gateway, " in big["content"] and text_tokens(big) <= 1000
    assert big["tool_call_id"] == "big"
    # Everything else is the very same object: messages, the call's long arguments, other keys.
    changed = [i for i, (a, b) in enumerate(zip(msgs, out["messages"], strict=True)) if a is not b]
    assert changed == [len(msgs) - 2]
    assert all(out[k] is payload[k] for k in ("model", "tools", "max_tokens"))
    assert_valid_conversation(out["messages"])


def test_list_of_parts_text_is_cut_and_every_other_part_and_key_kept() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 40_000}}
    parts = [{"type": "text", "text": "first " * 3000, "_adapter_key": 1}, image,
             {"type": "text", "text": "second " * 3000, "_adapter_key": 2}]
    payload = {"messages": [{"role": "user", "content": "go"},
                            {"role": "assistant", "tool_calls": [{"id": "c", "type": "function"}]},
                            {"role": "tool", "tool_call_id": "c", "content": parts}]}
    original = copy.deepcopy(payload)
    out, report = cap_tool_outputs(payload, 500)
    assert payload == original and out is not None and report["outputs_capped"] == 1
    new = out["messages"][2]["content"]
    assert new[1] is image
    assert [p["_adapter_key"] for p in (new[0], new[2])] == [1, 2]
    assert all("truncated by llm-gateway" in p["text"] for p in (new[0], new[2]))
    assert text_tokens(out["messages"][2]) <= 500 + 40  # each part keeps a glimpse and a marker


def test_legacy_function_results_are_tool_outputs_too() -> None:
    payload = {"messages": [{"role": "function", "name": "f", "content": "x" * 20_000}]}
    out, report = cap_tool_outputs(payload, 200)
    assert out is not None and report["outputs_capped"] == 1 and text_tokens(out["messages"][0]) <= 200


@pytest.mark.parametrize("payload", [
    {"messages": [{"role": "user", "content": "x" * 100_000}, {"role": "assistant", "content": "y" * 100_000}]},
    {"messages": [{"role": "tool", "tool_call_id": "c", "content": "short"}]},
    {"messages": [{"role": "tool", "tool_call_id": "c", "content": None}]},
    {"messages": "not a list"}, {"messages": [1, "x", None]}, {},
])
def test_nothing_to_cap_returns_none(payload: dict[str, Any]) -> None:
    assert cap_tool_outputs(payload, 100) == (None, {"outputs_capped": 0, "bytes_removed": 0})


def test_capping_twice_changes_nothing_the_second_time() -> None:
    out, _ = cap_tool_outputs({"messages": with_big_output("z" * 100_000)}, 800)
    assert out is not None
    assert cap_tool_outputs(out, 800)[0] is None


@pytest.mark.parametrize("cap", [-1, 0, 63])
def test_a_cap_too_small_for_head_tail_and_note_is_a_configuration_error(cap: int) -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        cap_tool_outputs({"messages": []}, cap)


@settings(max_examples=200, deadline=None)
@given(text=st.text(min_size=0, max_size=6000), cap=st.integers(64, 1500))
def test_any_text_ends_at_or_under_the_cap(text: str, cap: int) -> None:
    payload = {"messages": [{"role": "tool", "tool_call_id": "c", "content": text}]}
    out, report = cap_tool_outputs(payload, cap)
    if text_tokens(payload["messages"][0]) <= cap:
        assert out is None
        return
    assert out is not None and report["outputs_capped"] == 1
    assert text_tokens(out["messages"][0]) <= cap
