import base64
import zlib
from typing import Any

import pytest

from gateway.policy.tokens import (
    IMAGE_TOKENS,
    PDF_BYTES_PER_PAGE,
    PDF_PAGE_TOKENS,
    content_tokens,
    message_tokens,
    request_tokens,
    text_tokens,
)


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


def pdf(pages: int, padding: int = 0, packed: bool = False) -> bytes:
    """A PDF whose pages are objects of their own, or packed into a compressed object stream
    (PDF 1.5), with ``padding`` bytes of image data besides."""
    page_objects = b"".join(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>\n" for _ in range(pages))
    body = b"%PDF-1.7\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n"
    if packed:
        packed_stream = zlib.compress(b"3 0 4 60\n" + page_objects)
        body += (b"5 0 obj << /Type /ObjStm /N 2 /First 9 /Filter /FlateDecode /Length "
                 + str(len(packed_stream)).encode() + b" >>\nstream\n" + packed_stream + b"\nendstream endobj\n")
    else:
        body += page_objects
    body += b"6 0 obj << /Type /XObject /Subtype /Image /Length 9 >>\nstream\n" + b"\xff" * padding + b"\nendstream\n"
    return body + b"%%EOF\n"


def data_url(raw: bytes) -> str:
    return "data:application/pdf;base64," + base64.b64encode(raw).decode()


@pytest.mark.parametrize("part", [
    lambda d: {"type": "file", "file": {"file_data": data_url(d), "filename": "a.pdf"}},  # chat
    lambda d: {"type": "input_file", "file_data": data_url(d), "filename": "a.pdf"},  # Responses
    lambda d: {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",  # Messages
                                              "data": base64.b64encode(d).decode()}},
])  # fmt: skip
def test_a_pdf_counts_by_its_pages_not_its_bytes(part: Any) -> None:
    """A PDF is read as an image and the text of each page (Anthropic's and OpenAI's PDF
    support): its size says little, a scanned page weighs megabytes. Its base64 counted as text
    made a 2 MB three-page scan ~760,000 tokens, and the note a chat upstream gets instead 31."""
    assert content_tokens([part(pdf(3))]) == 3 * PDF_PAGE_TOKENS
    assert content_tokens([part(pdf(3, padding=2_000_000))]) == 3 * PDF_PAGE_TOKENS
    assert content_tokens([part(pdf(7, packed=True))]) == 7 * PDF_PAGE_TOKENS


def test_a_pdf_whose_pages_cannot_be_found_counts_by_its_size() -> None:
    hidden = b"%PDF-1.7\n" + b"\x00" * 1_000_000
    counted = content_tokens([{"type": "file", "file": {"file_data": data_url(hidden)}}])
    assert counted == pytest.approx(1_000_000 / PDF_BYTES_PER_PAGE * PDF_PAGE_TOKENS, rel=0.01)
    broken = content_tokens([{"type": "file", "file": {"file_data": "data:application/pdf;base64,@@@"}}])
    assert 0 < broken < 100  # not base64: its text, as before
