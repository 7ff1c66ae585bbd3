"""Hostile input never breaks the pure policies: they classify, compress or split anything."""

from __future__ import annotations

import itertools
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import ErrorType
from gateway.policy.classify import classify
from gateway.policy.compress import compress
from gateway.sse import EventSplitter
from tests.convo import assert_valid_conversation

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)


def test_a_5xx_is_never_auth_whatever_it_says() -> None:
    body = b'{"error": {"message": "Incorrect API key provided", "code": "invalid_api_key"}}'
    assert classify(502, {}, body, now_s=0.0).type is ErrorType.PROVIDER_UNAVAILABLE


@settings(max_examples=300, deadline=None)
@given(status=st.integers(100, 599), body=st.binary(max_size=300) | json_values.map(lambda v: json.dumps(v).encode()),
       headers=st.dictionaries(st.sampled_from(["retry-after", "retry-after-ms", "x-ratelimit-reset-tokens",
                                                "anthropic-ratelimit-tokens-reset", "x-amzn-errortype"]),
                               st.text(max_size=30), max_size=3))
def test_classify_never_raises(status: int, body: bytes, headers: dict[str, str]) -> None:
    c = classify(status, headers, body, now_s=1_795_000_000.0)
    assert c.retryable is c.type.retryable
    assert c.retry_after_s is None or c.retry_after_s >= 0
    if status >= 500:
        # A 5xx is an outage unless its body says the request (unknown, context_overflow) or the
        # account (budget) is at fault; it is never an auth error (docs/classification.md).
        assert c.type is not ErrorType.AUTH


roles = st.sampled_from(["system", "developer", "user", "assistant", "tool", "function", "weird"])
message = st.fixed_dictionaries(
    {"role": roles},
    optional={"content": st.none() | st.text(max_size=3000) | st.lists(
                  st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=500)}), max_size=3),
              "tool_call_id": st.sampled_from(["a", "b", "c"]),
              "tool_calls": st.lists(st.fixed_dictionaries({"id": st.sampled_from(["a", "b", "c"]),
                                                            "type": st.just("function")}), max_size=2)},
)


@settings(max_examples=200, deadline=None)
@given(messages=st.lists(message, max_size=30), limit=st.integers(1, 5000))
def test_compress_never_raises_and_keeps_valid_input_valid(messages: list[dict[str, Any]], limit: int) -> None:
    payload = {"model": "m", "messages": messages}
    r = compress(payload, error_message=f"prompt is too long: {limit * 2} tokens > {limit} maximum",
                 context_window=None)
    if r.payload is None:
        return
    try:
        assert_valid_conversation(messages)
    except AssertionError:
        return  # the input was not a valid conversation; only its own validity is promised
    assert_valid_conversation(r.payload["messages"])


@settings(max_examples=200, deadline=None)
@given(events=st.lists(st.binary(max_size=50).map(lambda b: b.replace(b"\n", b"") + b"\n\n"), max_size=10),
       cuts=st.lists(st.integers(0, 500), max_size=10))
def test_splitter_reassembles_any_chunking(events: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(events)
    points = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    s = EventSplitter()
    out: list[bytes] = []
    for a, b in itertools.pairwise(points):
        out += s.feed(stream[a:b])
    assert b"".join(out) + s.pending == stream
