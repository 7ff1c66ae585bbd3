"""A local token estimate: no tokenizer can be downloaded at run time, so count bytes.

BPE tokenizers average about 4 characters per token on English prose and nearer 3 on
code, JSON and non-Latin scripts; dividing UTF-8 *bytes* by 3.5 errs on the high side for
prose and lands close for code, and a CJK character (3 bytes) counts as about one token,
as it does in practice. When the provider reports the real count, ``compress`` calibrates
against it, so this only has to be consistent, not exact.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import zlib
from typing import Any

BYTES_PER_TOKEN = 3.5
MESSAGE_OVERHEAD = 4  # role and separators, per message (OpenAI's chat format adds 3-4)
IMAGE_TOKENS = 800  # a high-detail image tile set; conservative for one image part
REQUEST_OVERHEAD = 8
# A PDF page as Claude and OpenAI's models read one: "The system converts each page of the
# document into an image. The text from each page is extracted and provided alongside the
# page's image." (https://docs.anthropic.com/en/docs/build-with-claude/pdf-support; OpenAI's
# file inputs do the same). An image is at most ~1,600 tokens ("If your image's long edge is
# more than 1568 pixels, or your image is more than ~1,600 tokens, it will first be scaled
# down", https://docs.anthropic.com/en/docs/vision), and a page of prose a few hundred more.
PDF_PAGE_TOKENS = 2000
# Where a PDF's page objects cannot be found: a guess of its pages by size (a page of text is a
# few KB of PDF, a scanned one hundreds).
PDF_BYTES_PER_PAGE = 50_000
_PAGE = re.compile(rb"/Type\s*/Page(?![A-Za-z])")
# A compressed object stream (PDF 1.5 on), where the page objects may sit: its dictionary, then
# the stream's bytes up to ``endstream``.
_OBJECT_STREAM = re.compile(rb"/Type\s*/ObjStm[^>]*>>\s*stream\r?\n")
_INFLATED_MAX = 1 << 24


def text_tokens(text: str) -> float:
    return len(text.encode("utf-8", "replace")) / BYTES_PER_TOKEN


def content_tokens(content: Any) -> float:
    if content is None:
        return 0.0
    if isinstance(content, str):
        return text_tokens(content)
    if isinstance(content, list):
        total = 0.0
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                total += text_tokens(part["text"])
            elif isinstance(part, dict) and part.get("type") in ("image_url", "image", "input_image"):
                total += IMAGE_TOKENS
            elif isinstance(part, dict) and (pages := pdf_pages(part)) is not None:
                total += pages * PDF_PAGE_TOKENS
            else:
                total += text_tokens(json.dumps(part, default=str))
        return total
    return text_tokens(json.dumps(content, default=str))


def message_tokens(message: dict[str, Any]) -> float:
    total = MESSAGE_OVERHEAD + content_tokens(message.get("content"))
    calls = message.get("tool_calls")
    if calls:
        total += text_tokens(json.dumps(calls, default=str))
    fc = message.get("function_call")
    if fc:
        total += text_tokens(json.dumps(fc, default=str))
    name = message.get("name")
    if isinstance(name, str):
        total += text_tokens(name)
    return total


def request_tokens(payload: dict[str, Any]) -> float:
    """The prompt side of a chat request: messages plus tool definitions."""
    messages = payload.get("messages")
    total = float(REQUEST_OVERHEAD)
    if isinstance(messages, list):
        total += sum(message_tokens(m) for m in messages if isinstance(m, dict))
    for key in ("tools", "functions", "response_format"):
        if payload.get(key):
            total += text_tokens(json.dumps(payload[key], default=str))
    return total


def pdf_pages(part: dict[str, Any]) -> float | None:
    """The pages of a PDF a content part carries inline (chat's ``file``, Responses'
    ``input_file``, a Messages ``document``), by its page objects, else by its size; None for
    any other part, or data that is not base64."""
    kind = part.get("type")
    if kind == "file":
        file = part.get("file")
        data = _pdf_data_url(file.get("file_data")) if isinstance(file, dict) else None
    elif kind == "input_file":
        data = _pdf_data_url(part.get("file_data"))
    elif kind == "document":
        source = part.get("source")
        source = source if isinstance(source, dict) else {}
        pdf = source.get("type") == "base64" and source.get("media_type") == "application/pdf"
        data = source.get("data") if pdf and isinstance(source.get("data"), str) else None
    else:
        return None
    if data is None:
        return None
    try:
        raw = base64.b64decode("".join(data.split()), validate=True)
    except (binascii.Error, ValueError):
        return None
    if not raw:
        return None
    counted = _page_objects(raw)
    return float(counted) if counted else max(1.0, len(raw) / PDF_BYTES_PER_PAGE)


def _pdf_data_url(url: Any) -> str | None:
    prefix = "data:application/pdf;base64,"
    return url[len(prefix):] if isinstance(url, str) and url.startswith(prefix) else None


def _page_objects(raw: bytes) -> int:
    found = len(_PAGE.findall(raw))
    if found:
        return found
    for packed in _OBJECT_STREAM.finditer(raw):
        start = packed.end()
        end = raw.find(b"endstream", start)
        try:
            inflated = zlib.decompressobj().decompress(raw[start : end if end >= 0 else None], _INFLATED_MAX)
        except zlib.error:
            continue
        found += len(_PAGE.findall(inflated))
    return found
