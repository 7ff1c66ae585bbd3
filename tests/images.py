"""Image files for the tests of Anthropic's pixel limits, from the real ones in
``tests/corpus/images/`` (see its README)."""

from __future__ import annotations

import base64
import struct
import zlib
from pathlib import Path

IMAGES = Path(__file__).parent / "corpus" / "images"


def real(name: str) -> bytes:
    return (IMAGES / name).read_bytes()


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def png(width: int, height: int) -> bytes:
    """A whole PNG of that size, gray, every pixel black: small however wide (zlib)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def jpeg(width: int = 16, height: int = 16, padding: int = 0) -> bytes:
    """``python.jpg`` with its frame's size set, and ``padding`` bytes of APP15 segments put in
    before its first segment (a camera's EXIF block is where the size is looked for past)."""
    raw = bytearray(real("python.jpg"))
    sof = raw.index(b"\xff\xc0")
    raw[sof + 5 : sof + 9] = struct.pack(">HH", height, width)
    segments = b""
    while padding > 0:
        size = min(padding, 65533)
        segments += b"\xff\xef" + struct.pack(">H", size + 2) + b"\x00" * size
        padding -= size
    return bytes(raw[:2]) + segments + bytes(raw[2:])


def data_url(media_type: str, raw: bytes) -> str:
    return f"data:{media_type};base64,{b64(raw)}"
