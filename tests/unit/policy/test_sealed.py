"""policy/sealed: a remembered answer as the state store keeps it, readable with its request's key alone."""

from __future__ import annotations

import pytest

from gateway.policy.sealed import NONCE_BYTES, seal, unseal

KEY, OTHER = bytes(range(32)), bytes(range(1, 33))
NONCE = b"\x07" * NONCE_BYTES
PLAIN = b'{"detail": [{"msg": "Input should be a valid string", "input": "the prompt"}]}'


def test_a_sealed_answer_opens_with_its_key_and_shows_nothing_of_itself() -> None:
    blob = seal(KEY, PLAIN, NONCE)
    assert unseal(KEY, blob) == PLAIN and len(blob) == len(PLAIN) + 29
    assert b"prompt" not in blob and b"Input" not in blob
    assert unseal(KEY, seal(KEY, b"", NONCE)) == b""
    # Each remembering draws its nonce: the same answer twice is two unrelated blobs.
    again = seal(KEY, PLAIN, b"\x08" * NONCE_BYTES)
    assert again[13:] != blob[13:] and unseal(KEY, again) == PLAIN


@pytest.mark.parametrize("blob", [
    seal(OTHER, PLAIN, NONCE),                                    # another request's
    b"\x00\x00\x01P{}" + PLAIN,                                   # what a version that did not seal wrote
    (lambda b: b"\x01" + b[1:])(seal(KEY, PLAIN, NONCE)),         # under another version byte
    b"", b"\x02" + NONCE,                                         # cut short
    (lambda b: b[:40] + bytes([b[40] ^ 1]) + b[41:])(seal(KEY, PLAIN, NONCE)),  # one bit changed in the store
    (lambda b: b[:1] + b"\x08" + b[2:])(seal(KEY, PLAIN, NONCE)),                # its nonce changed
])  # fmt: skip
def test_a_blob_not_sealed_with_this_key_as_it_was_is_none(blob: bytes) -> None:
    assert unseal(KEY, blob) is None
