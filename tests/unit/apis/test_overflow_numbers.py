"""The numbers a translated overflow states (``apis/common.py`` ``overflow_numbers``), in each
client API's own sentence: agents read them (Claude Code's compaction takes N - M)."""

from __future__ import annotations

import json

import pytest

from gateway.apis import ANTHROPIC_MESSAGES, GEMINI, OPENAI_CHAT
from gateway.apis.base import ForeignError
from gateway.errors import Classification, ErrorType


@pytest.mark.parametrize(("prompt", "limit", "said"), [
    (5000, 2000, (5000, 2000)),  # the provider's own numbers
    (2500, 2000, (2500, 2000)),  # an estimate over the upstream's context_window
    # Audit E: a Responses upstream states no numbers, the estimate (42) is under the configured
    # window (2000). Not "42 > 41": the window is the limit, and the size the least that is true.
    (42, 2000, (2001, 2000)),
    (2000, 2000, (2001, 2000)),
    (7000, 8192, (8193, 8192)),  # "7000 in the messages, 2000 in the completion": over all the same
    (42, None, (42, 41)),  # no window known anywhere: one under the request
    (None, None, (1, 0)),
])  # fmt: skip
def test_a_translated_overflow_states_the_window_and_a_size_over_it(
    prompt: int | None, limit: int | None, said: tuple[int, int]
) -> None:
    c = Classification.of(ErrorType.CONTEXT_OVERFLOW)
    e = ForeignError(400, c, "responses", 400, b"{}", prompt, limit)
    n, m = said
    _, body = ANTHROPIC_MESSAGES.foreign_error(e, "r")
    assert json.loads(body)["error"]["message"] == f"prompt is too long: {n} tokens > {m} maximum"
    _, body = OPENAI_CHAT.foreign_error(e, "r")
    assert json.loads(body)["error"]["message"] == (
        f"This model's maximum context length is {m} tokens. However, your messages resulted in {n} tokens.")
    _, body = GEMINI.foreign_error(e, "r")
    assert json.loads(body)["error"]["message"] == (
        f"The input token count ({n}) exceeds the maximum number of tokens allowed ({m}).")
