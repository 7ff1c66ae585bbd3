"""A remembered answer sealed with a key that only the identical request yields.

The loop breaker keeps a request's final failure in the state store (Redis, shared by the
replicas), so that an identical repeat on any replica gets it back byte for byte. A provider's
error can quote the request: a pydantic server's 422 quotes the ``input`` that failed
validation (a role, a ``max_tokens`` in tests/corpus's fastapi-proxy-422-role-literal and
mistral-422-negative-max-tokens; a message's content when that is what failed). Whoever can
read Redis must not read prompts there, and nobody but a replica holding that same request
needs the answer: the key is the second half of the request's fingerprint MAC (path, body,
credential), whose first half names the entry (``loop_breaker.Fingerprint``). The store holds a
name and an opaque blob.

Built from hashlib's primitives (the gateway's dependencies carry no AEAD): the answer XORed
with a SHAKE256 keystream (FIPS 202's extendable-output function) of a domain tag, the key and
a random nonce, then a keyed BLAKE2b tag (RFC 7693) over the version, nonce and ciphertext,
checked before anything is decrypted (encrypt-then-MAC): an entry altered in the store, or
written by a version that did not seal, reads as none.
"""

from __future__ import annotations

import hashlib
import hmac

KEY_BYTES = 32
NONCE_BYTES = 16
_TAG_BYTES = 16
_VERSION = b"\x01"
_HEAD = len(_VERSION) + NONCE_BYTES + _TAG_BYTES
_STREAM = b"llm-gateway loop-breaker answer\x00"  # the keystream's domain: nothing else uses it


def seal(key: bytes, plain: bytes, nonce: bytes) -> bytes:
    """``plain`` as the store keeps it: version, nonce, tag, ciphertext (33 bytes more)."""
    body = _xor(plain, _keystream(key, nonce, len(plain)))
    return _VERSION + nonce + _tag(key, _VERSION + nonce + body) + body


def unseal(key: bytes, blob: bytes) -> bytes | None:
    """What ``seal`` sealed with ``key``; None for any blob it did not (another request's,
    another version's, one altered)."""
    if len(blob) < _HEAD or blob[:1] != _VERSION:
        return None
    nonce, tag, body = blob[1 : 1 + NONCE_BYTES], blob[1 + NONCE_BYTES : _HEAD], blob[_HEAD:]
    if not hmac.compare_digest(tag, _tag(key, _VERSION + nonce + body)):
        return None
    return _xor(body, _keystream(key, nonce, len(body)))


def _keystream(key: bytes, nonce: bytes, n: int) -> bytes:
    # The key and nonce have fixed lengths, so their concatenation is unambiguous.
    return hashlib.shake_256(_STREAM + key + nonce).digest(n)


def _tag(key: bytes, data: bytes) -> bytes:
    return hashlib.blake2b(data, key=key, digest_size=_TAG_BYTES, person=b"answer-tag").digest()


def _xor(a: bytes, b: bytes) -> bytes:
    # As integers: C loops over the bytes, ~0.1 ms for the largest answer kept (64 KiB,
    # loop_breaker.max_body_bytes), where a generator over byte pairs takes ~6 ms.
    return (int.from_bytes(a, "little") ^ int.from_bytes(b, "little")).to_bytes(len(a), "little")
