"""The seam of a Messages prefill continuation: the whitespace the prefill left out is
written again by the model, in deltas of any size, and must reach the client once."""

import json

import pytest

from gateway.apis.messages.resume import Seam, continuation, splicer
from tests.fakeupstream import anthropic_head, anthropic_tail, text_delta

CODE = "class Shape:\n    def area(self):\n        "  # cut right after the indent
REST = "\n        return 0\n\n    def perimeter(self):\n        return 0\n"


def spliced_text(partial: str, deltas: list[str]) -> str:
    splice = splicer(open_block=0, next_index=1, output_tokens=5, partial=partial)
    out = b"".join(splice(e) for e in [*anthropic_head(), *(text_delta(d) for d in deltas), *anthropic_tail()])
    text = ""
    for block in out.decode().split("\n\n"):
        if block.startswith("event: content_block_delta"):
            text += json.loads(block.split("data: ", 1)[1])["delta"]["text"]
    return text


def splits(text: str) -> list[list[str]]:
    """The continuation cut into deltas in every way a server might around the seam: whole,
    per character, and every split into two or three pieces within its leading whitespace."""
    lead = len(text) - len(text.lstrip()) + 2
    out = [[text], list(text)]
    out += [[text[:i], text[i:]] for i in range(1, lead)]
    out += [[text[:i], text[i:j], text[j:]] for i in range(1, lead) for j in range(i + 1, lead)]
    return out


@pytest.mark.parametrize("deltas", splits(REST))
def test_an_indent_cut_mid_line_is_never_doubled(deltas: list[str]) -> None:
    assert CODE + spliced_text(CODE, deltas) == CODE.rstrip() + REST


@pytest.mark.parametrize("deltas", splits("\n\n    def perimeter(self):\n"))
def test_a_blank_line_and_indent_are_never_doubled(deltas: list[str]) -> None:
    shown = "        return 0\n\n    "
    assert shown + spliced_text(shown, deltas) == "        return 0\n\n    def perimeter(self):\n"


def test_whitespace_beyond_what_was_shown_is_kept() -> None:
    # Cut after the newline; the model writes the newline and the indent: the indent is new.
    assert spliced_text("def f():\n", ["\n", "    ", "    pass"]) == "        pass"


def test_whitespace_that_contradicts_what_was_shown_is_dropped() -> None:
    assert spliced_text("a,\n\n", [" ", "b"]) == "b"


def test_a_block_that_ends_in_whitespace_keeps_what_is_new() -> None:
    seam = Seam("\n")
    assert seam.text("\n") == "" and seam.text("  ") == "" and seam.flush() == "  "
    assert seam.text(" x") == " x"  # decided: everything after passes untouched


def test_without_trailing_whitespace_nothing_is_touched() -> None:
    assert spliced_text("Once upon a", [" ", "time"]) == " time"


@pytest.mark.parametrize(("model", "asked"), [
    ("claude-sonnet-4-5-20250929", True), ("claude-3-7-sonnet-latest", True), ("qwen3-coder", True),
    # "This model does not support assistant message prefill. The conversation must end with a
    # user message." (Claude 4.6 and later): a continuation would be a call spent on a sure 400.
    ("claude-opus-4-8", False), ("claude-sonnet-4-6", False), ("us.anthropic.claude-opus-4-7-v1:0", False),
])  # fmt: skip
def test_a_prefill_continuation_is_asked_only_of_models_that_take_prefill(model: str, asked: bool) -> None:
    payload = {"model": model, "max_tokens": 100, "messages": [{"role": "user", "content": "what is the answer?"}]}
    body = continuation(payload, "The answer is ", "prefill")
    if asked:
        assert body is not None and body["messages"][-1] == {"role": "assistant", "content": "The answer is"}
    else:
        assert body is None
