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

AES-256-GCM from ``cryptography`` (pyca's, an audited AEAD) rather than a construction of our
own: the version byte is authenticated with the answer, so an entry altered in the store, written
under another key, or written by a version that did not seal, reads as none.
"""

from __future__ import annotations

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEY_BYTES = 32
NONCE_BYTES = 12  # GCM's own nonce size; each remembering draws a fresh one
_TAG_BYTES = 16
_VERSION = b"\x02"
_HEAD = len(_VERSION) + NONCE_BYTES


def seal(key: bytes, plain: bytes, nonce: bytes) -> bytes:
    """``plain`` as the store keeps it: version, nonce, then ciphertext and tag (29 bytes more)."""
    return _VERSION + nonce + AESGCM(key).encrypt(nonce, plain, _VERSION)


def unseal(key: bytes, blob: bytes) -> bytes | None:
    """What ``seal`` sealed with ``key``; None for any blob it did not (another request's,
    another version's, one altered)."""
    if len(blob) < _HEAD + _TAG_BYTES or blob[:1] != _VERSION:
        return None
    try:
        return AESGCM(key).decrypt(blob[1:_HEAD], blob[_HEAD:], _VERSION)
    except InvalidTag:
        return None
