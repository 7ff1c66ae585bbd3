"""An image's sides read from its header (``gateway/translate/image_size.py``), on real files."""

from __future__ import annotations

import struct

import pytest

from gateway.translate.image_size import dimensions
from tests.images import b64, jpeg, png, real


@pytest.mark.parametrize("name", ["python.png", "python.jpg", "python.gif", "python.webp"])
def test_the_sides_of_real_files_of_each_type(name: str) -> None:
    assert dimensions(b64(real(name))) == (16, 16)


def test_a_png_and_a_jpeg_of_other_sizes() -> None:
    assert dimensions(b64(png(8001, 2))) == (8001, 2)
    assert dimensions(b64(jpeg(width=9000, height=12))) == (9000, 12)


def test_a_jpeg_whose_frame_comes_after_a_large_block_is_still_read() -> None:
    """A camera's EXIF block can be tens of kilobytes: the walk reads past the first 64 KiB of
    base64 it decodes."""
    raw = jpeg(width=4032, height=3024, padding=200_000)
    assert len(b64(raw)) > 64 * 1024 and dimensions(b64(raw)) == (4032, 3024)


def _riff(chunk: bytes) -> bytes:
    return b"RIFF" + struct.pack("<I", 4 + len(chunk)) + b"WEBP" + chunk


def test_the_two_other_webp_bitstreams() -> None:
    """No real lossy or lossless WebP is at hand: their headers are written as RFC 9649 lays
    them out (the VP8 frame header after its start code; VP8L's 14-bit sides less one)."""
    lossy = _riff(b"VP8 " + struct.pack("<I", 10) + b"\x00\x00\x00\x9d\x01\x2a" + struct.pack("<HH", 8192, 600))
    assert dimensions(b64(lossy)) == (8192, 600)
    bits = (2100 - 1) | ((30 - 1) << 14)
    lossless = _riff(b"VP8L" + struct.pack("<I", 5) + b"\x2f" + struct.pack("<I", bits))
    assert dimensions(b64(lossless)) == (2100, 30)


@pytest.mark.parametrize("data", [
    "", "not base64 at all!", b64(b"\x00\x01\x02" * 20), b64(real("python.png")[:20]), b64(real("python.jpg")[:100]),
    b64(b"RIFF\x00\x00\x00\x00WEBPVP8 "),
])  # fmt: skip
def test_bytes_of_no_type_or_cut_short_are_not_judged(data: str) -> None:
    assert dimensions(data) is None
