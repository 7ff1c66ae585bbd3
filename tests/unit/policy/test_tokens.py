import pytest

from gateway.policy.tokens import IMAGE_TOKENS, content_tokens, message_tokens, request_tokens, text_tokens


def test_bytes_based_estimate() -> None:
    assert text_tokens("a" * 350) == pytest.approx(100)
    assert text_tokens("日本語") == pytest.approx(9 / 3.5)  # 3 bytes a character


def test_parts_and_images() -> None:
    parts = [{"type": "text", "text": "x" * 35}, {"type": "image_url", "image_url": {"url": "data:..."}},
             {"type": "input_audio", "input_audio": {"data": "QUJD", "format": "wav"}}]
    assert content_tokens(parts) > 10 + IMAGE_TOKENS
    assert content_tokens(None) == 0


def test_tool_calls_and_tools_count() -> None:
    call = {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}" * 100}}]}
    assert message_tokens(call) > 50
    plain = {"messages": [{"role": "user", "content": "hi"}]}
    with_tools = {**plain, "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]}
    assert request_tokens(with_tools) > request_tokens(plain)
