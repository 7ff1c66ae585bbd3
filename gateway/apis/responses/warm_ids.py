"""The ids of the responses the gateway answers a WebSocket ``generate: false`` turn with
(``websocket.warm_response``), minted so that the gateway knows them again.

No upstream holds such a response. The connection that made it expands a turn chained to it
(``websocket.expanded``); chained from anywhere else (another connection, ``POST
/v1/responses`` with ``previous_response_id``), it is answered at once with the 400 OpenAI gives
for a previous response it does not hold. A random id looked like any other unknown response:
a pool asked each of its keys for it and waited out one sitting out a rate limit (3 calls and a
28.2 s wait, then that 400; audit).

An id looks as OpenAI's do, ``resp_`` and 48 lower-case hex digits
(``resp_67cb71b351908190a308f3859487620d06981a8637e6bc44`` in the API reference,
https://developers.openai.com/api/reference/typescript/resources/beta/subresources/responses/methods/retrieve),
so clients that check an id's shape take it: 24 random digits, then 24 of an HMAC-SHA256 tag of
them. Its key comes from ``loop_breaker.secret``, which a gateway's workers share and replicas
given the same file do; unset, a process's own random key, kept across reloads (``app.py``). A
replica without the key takes another's warm id for an unknown response, as before. Telling one
apart takes the key: a provider's id passes for the gateway's with a chance of 2^-96.

Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Callable

import orjson

_PREFIX = "resp_"
_NONCE_HEX = _TAG_HEX = 24
_LENGTH = len(_PREFIX) + _NONCE_HEX + _TAG_HEX
# Keeps this key apart from the loop breaker's, which the same secret keys.
_LABEL = b"llm-gateway warm response ids\x00"


class WarmIds:
    """Mints the ids of ``generate: false`` responses, and knows them again."""

    def __init__(self, key: bytes, random_bytes: Callable[[int], bytes] = os.urandom) -> None:
        self._key = key
        self._random_bytes = random_bytes

    @classmethod
    def keyed(cls, secret: str | None, random_bytes: Callable[[int], bytes] = os.urandom) -> WarmIds:
        """Keyed by ``secret`` (``loop_breaker.secret``), else by a key of this process's own."""
        material = secret.encode("utf-8", "surrogatepass") if secret else random_bytes(32)
        return cls(hashlib.sha256(_LABEL + material).digest(), random_bytes)

    def mint(self) -> str:
        nonce = self._random_bytes(_NONCE_HEX // 2).hex()
        return _PREFIX + nonce + self._tag(nonce)

    def made(self, response_id: str) -> bool:
        """Whether ``response_id`` is one this gateway minted (with this key)."""
        if len(response_id) != _LENGTH or not response_id.startswith(_PREFIX) or not response_id.isascii():
            return False  # (compare_digest takes ASCII strings only)
        nonce, tag = response_id[len(_PREFIX) : -_TAG_HEX], response_id[-_TAG_HEX:]
        return hmac.compare_digest(self._tag(nonce), tag)

    def _tag(self, nonce: str) -> str:
        return hmac.new(self._key, nonce.encode("ascii"), hashlib.sha256).hexdigest()[:_TAG_HEX]


def not_found_body(response_id: str) -> bytes:
    """OpenAI's 400 for a ``previous_response_id`` it holds no response of, as it writes it
    ("Previous response with id '<id>' not found.", code ``previous_response_not_found``, param
    ``previous_response_id``: relayed whole in https://github.com/maximhq/bifrost/issues/2441;
    routing/stored.py)."""
    return orjson.dumps({"error": {"message": f"Previous response with id '{response_id}' not found.",
                                   "type": "invalid_request_error", "param": "previous_response_id",
                                   "code": "previous_response_not_found"}})  # fmt: skip
