"""An image's width and height, read from the header of its base64 text; no image library.

Anthropic refuses an image by its pixels as well as by its bytes (``image_limits.py`` has the
limits and their sources), so a translation must know them before it sends one. Each
of the four types it reads states them near the start of the file:

* PNG: the IHDR chunk, first after the signature, holds width and height as big-endian 32-bit
  integers at bytes 16 to 24 (the PNG specification, "11.2.2 IHDR Image header");
* GIF: the logical screen descriptor, right after "GIF87a"/"GIF89a", holds them as
  little-endian 16-bit integers at bytes 6 to 10 (GIF89a specification, section 18);
* WebP: the RIFF container's first chunk says which bitstream follows (RFC 9649, "WebP Image
  Format"): ``VP8 `` (lossy) has 14-bit width and height after its start code 9d 01 2a;
  ``VP8L`` (lossless) packs width - 1 and height - 1 in 14 bits each after its signature byte
  0x2f; ``VP8X`` (extended) has the canvas width - 1 and height - 1 as 24-bit integers;
* JPEG: no fixed place: the segments after the SOI marker are walked, each stating its own
  length, to the first start-of-frame marker (SOF0 to SOF15 but DHT, JPG and DAC: ITU T.81,
  table B.1), whose height and width follow the sample precision. EXIF data before it can be
  tens of kilobytes, so the walk decodes more of the base64 text only when it needs it.

Bytes that are none of these, or cut short, give None: the image is not judged here, and
the provider answers it as it would.
"""

from __future__ import annotations

import base64
import binascii
from typing import Literal

# Base64 characters decoded first: every header but a JPEG's after a large EXIF block.
_HEAD = 64 * 1024
# The JPEG markers that start a frame (SOFn), of 0xc0 to 0xcf: not DHT (c4), JPG (c8), DAC (cc).
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# Markers without a length: TEM and RST0 to RST7.
_BARE = frozenset({0x01, *range(0xD0, 0xD8)})


def dimensions(data: str) -> tuple[int, int] | None:
    """(width, height) of the image whose base64 text is ``data``, or None when its header
    cannot be read."""
    head = _decoded(data, _HEAD)
    if head is None:
        return None
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return _png(head)
    if head.startswith((b"GIF87a", b"GIF89a")):
        return _pair(head, 6, 8, "little", 2)
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return _webp(head)
    if head.startswith(b"\xff\xd8"):
        found = _jpeg(head)
        if found is None and len(data) > _HEAD:
            whole = _decoded(data, len(data))
            return _jpeg(whole) if whole is not None else None
        return found
    return None


def _decoded(data: str, chars: int) -> bytes | None:
    text = "".join(data[:chars].split())
    text = text[: len(text) - len(text) % 4]
    try:
        return base64.b64decode(text)
    except (binascii.Error, ValueError):
        return None


def _png(raw: bytes) -> tuple[int, int] | None:
    return _pair(raw, 16, 20, "big", 4) if raw[12:16] == b"IHDR" else None


def _webp(raw: bytes) -> tuple[int, int] | None:
    kind = raw[12:16]
    if kind == b"VP8 " and raw[23:26] == b"\x9d\x01\x2a" and len(raw) >= 30:
        return (int.from_bytes(raw[26:28], "little") & 0x3FFF, int.from_bytes(raw[28:30], "little") & 0x3FFF)
    if kind == b"VP8L" and raw[20:21] == b"\x2f" and len(raw) >= 25:
        bits = int.from_bytes(raw[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if kind == b"VP8X" and len(raw) >= 30:
        return int.from_bytes(raw[24:27], "little") + 1, int.from_bytes(raw[27:30], "little") + 1
    return None


def _jpeg(raw: bytes) -> tuple[int, int] | None:
    at = 2
    while at + 4 <= len(raw):
        if raw[at] != 0xFF:
            return None  # not a marker where one must be: not a JPEG this walk can read
        marker = raw[at + 1]
        if marker == 0xFF:
            at += 1  # a fill byte before the marker
            continue
        if marker in _BARE:
            at += 2
            continue
        if marker in (0xD9, 0xDA):
            return None  # the end, or the scan, before any frame
        if marker in _SOF:
            # length (2), precision (1), height (2), width (2)
            found = _pair(raw, at + 7, at + 5, "big", 2)
            return found if found is not None and found[1] else None  # height 0: set later (DNL)
        at += 2 + int.from_bytes(raw[at + 2 : at + 4], "big")
    return None


def _pair(
    raw: bytes, width_at: int, height_at: int, order: Literal["little", "big"], size: int
) -> tuple[int, int] | None:
    if len(raw) < max(width_at, height_at) + size:
        return None
    width = int.from_bytes(raw[width_at : width_at + size], order)
    height = int.from_bytes(raw[height_at : height_at + size], order)
    return width, height
