"""Requests that are not valid HTTP, answered without quoting them.

aiohttp answers a request its parser refuses (a header line over 8,190 bytes, a malformed
request line or header, broken body framing) from its protocol, before any route, with the
parser's message as a text/plain body. Those messages quote the bytes they refused: "Got more
than 8190 bytes when reading: b'Bearer sk-…'", "Bad status line 'POST
/v1beta/models/…?key=…'", "Invalid HTTP header: …". So a credential or a prompt the client
sent came back in an error body, where proxies and client-side logs keep it. Here the same
status goes out with a JSON error that names what was wrong and quotes nothing. The log line
aiohttp writes is unchanged (the gateway's log format records an exception's type, never its
text). An internal error (500) keeps aiohttp's own body, which quotes nothing either.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import (
    BadHttpMethod,
    BadStatusLine,
    HttpProcessingError,
    InvalidHeader,
    InvalidURLError,
    LineTooLong,
    PayloadEncodingError,
)
from aiohttp.web_protocol import RequestHandler

from gateway.errors import ErrorType

CODE = "bad_http_request"
# One of each kind of refusal, as the error reference (gateway/docs_gen) lists their messages.
EXAMPLES: tuple[HttpProcessingError, ...] = (
    LineTooLong("", "8190"), BadStatusLine(""), BadHttpMethod(""), InvalidURLError(""), InvalidHeader(""),
    PayloadEncodingError(""), HttpProcessingError(),
)  # fmt: skip


def described(exc: HttpProcessingError) -> str:
    """What was wrong with the request, in words that quote none of it."""
    kind = _kind(exc)
    reason = _reason(exc)
    return f"{kind} ({reason})" if reason and reason.lower() not in kind.lower() else kind


def _kind(exc: HttpProcessingError) -> str:
    if isinstance(exc, LineTooLong):
        limit = str(exc.args[1]) if len(exc.args) > 1 else ""
        if limit.isdigit():  # a number only: never a piece of the line
            return f"a request line or header is longer than {limit} bytes"
        return "a request line or header is too long"
    if isinstance(exc, BadHttpMethod):
        return "the request method is not an HTTP method"
    if isinstance(exc, InvalidURLError):
        return "the request target is not a valid URL"
    if isinstance(exc, BadStatusLine):
        return "the request line is malformed"
    if isinstance(exc, InvalidHeader):
        return "a request header is malformed"
    if isinstance(exc, PayloadEncodingError):
        return "the request body's framing (Content-Length, Transfer-Encoding) is malformed"
    return "the request is not valid HTTP/1.1"


# llhttp's reasons ("Invalid header token", "Invalid character in Content-Length") are fixed
# words; aiohttp puts the refused bytes after them. Only such words are kept.
_WORDS = re.compile(r"[A-Za-z][A-Za-z ,-]{2,60}")


def _reason(exc: HttpProcessingError) -> str | None:
    first = str(exc.message).split(":", 1)[0].strip()
    return first if _WORDS.fullmatch(first) else None


def quiet_body(exc: HttpProcessingError) -> bytes:
    # No client API is known before the request parses: the shape the OpenAI and Gemini
    # clients read (a top-level "error" object with a message).
    # Like every gateway-made error (SPEC "Error taxonomy"): its class and retryability in the body.
    doc: dict[str, Any] = {
        "error": {"message": described(exc), "type": "invalid_request_error", "param": None, "code": CODE,
                  "x_llm_error_type": ErrorType.UNKNOWN.value, "retryable": False}
    }  # fmt: skip
    return json.dumps(doc).encode()


class QuietRequestHandler(RequestHandler):
    """aiohttp's connection handler, with its answers to unparseable requests made quiet."""

    def handle_error(
        self, request: web.BaseRequest, status: int = 500, exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:  # fmt: skip
        if status == 500 or not isinstance(exc, HttpProcessingError):
            return super().handle_error(request, status, exc, message)
        # aiohttp's own handling first: its log line, its refusal when bytes already left,
        # the connection marked to close; then a body that quotes nothing.
        response = super().handle_error(request, status, exc, "")
        if isinstance(response, web.Response):  # what aiohttp makes: anything else goes as it came
            response.body = quiet_body(exc)
            response.content_type = "application/json"
            # The header contract holds for these too (docs/errors/index.md: every error
            # response is classified, every response has an id); no request was read, so the
            # id is a fresh one and nothing was sent upstream. A client's request fault: the
            # same request fails the same way, so never retryable.
            h = response.headers
            h["x-request-id"] = f"{random.getrandbits(128):032x}"
            h["x-llm-attempts"] = "0"
            h["x-llm-error-type"] = ErrorType.UNKNOWN.value
            h["x-llm-error-retryable"] = "false"
            h["x-should-retry"] = "false"  # the SDKs' own retries would send the same bytes again
        return response


class QuietServer(web.Server):
    """A ``web.Server`` whose connections are :class:`QuietRequestHandler`."""

    def __call__(self) -> RequestHandler:
        return QuietRequestHandler(self, loop=self._loop, **self._kwargs)

    @classmethod
    def like(cls, server: web.Server) -> QuietServer:
        """The same server (handler, request factory, options), made quiet. ``_loop`` and
        ``_kwargs`` are aiohttp's private names for what ``Server.__call__`` passes on;
        tests/integration/test_bad_http.py fails if they stop being read."""
        return cls(
            server.request_handler, request_factory=server.request_factory,
            handler_cancellation=server.handler_cancellation, loop=server._loop, **server._kwargs,
        )  # fmt: skip
