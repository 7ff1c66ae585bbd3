"""``llm-gateway classify``: what the gateway would make of one upstream error, and why.

Operators point it at their own provider's error bodies before trusting the gateway with
them: the status, the headers that came with it and the body (a file, or stdin) go in; the
class, the evidence that decided it, whether it is retried and the wait come out. A stream
(``--stream``) is read by the wire API's own reader, as the gateway reads it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from typing import TextIO

from gateway.errors import Classification
from gateway.policy.classify import RequestFacts, classify, classify_stream_event
from gateway.stream_error import DIALECT_BY_API, first_error_event

_EXAMPLE = """example:
  llm-gateway classify --status 429 -H 'retry-after: 30' error.json
  curl -s ... | llm-gateway classify --status 413 --request-tokens 40000 --context-window 32768
  llm-gateway classify --stream --api messages stream.txt"""


def main(argv: list[str], *, stdin: TextIO | None = None, stdout: TextIO | None = None) -> int:
    out = stdout or sys.stdout
    parser = argparse.ArgumentParser(
        prog="llm-gateway classify",
        description="Classify one upstream error body the way the gateway does.",
        epilog=_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("body", nargs="?", default="-", help="a file with the body as received (- for stdin)")
    parser.add_argument("--status", type=int, help="the HTTP status it came with (not needed with --stream)")
    parser.add_argument("-H", "--header", action="append", default=[], metavar="'NAME: VALUE'",
                        help="a response header that came with it (repeatable)")  # fmt: skip
    parser.add_argument("--stream", action="store_true", help="the body is an SSE stream with an error event")
    parser.add_argument("--api", choices=sorted(DIALECT_BY_API), default="chat",
                        help="the wire API the body came on (default chat)")  # fmt: skip
    parser.add_argument("--request-tokens", type=int, help="the failed request's size in tokens, if known")
    parser.add_argument("--context-window", type=int, help="the upstream's context window, if known")
    parser.add_argument("--host", help="the upstream's host name (from base_url), as the gateway passes it")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)

    headers: dict[str, str] = {}
    for line in args.header:
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            parser.error(f"header {line!r} is not 'Name: value'")
        headers[name.strip().lower()] = value.strip()
    if args.status is None and not args.stream:
        parser.error("--status is required (or --stream for a stream body)")
    try:
        body = _read_body(args.body, stdin or sys.stdin)
    except OSError as e:
        parser.error(f"cannot read {args.body}: {e.strerror}")
    now = time.time()
    if args.stream:
        payload = first_error_event(args.api, body)
        if payload is None:
            print(f"no error event in this {args.api} stream", file=sys.stderr)
            return 1
        c = classify_stream_event(payload, now_s=now)
    else:
        assert args.status is not None
        facts = RequestFacts(args.request_tokens, args.context_window, args.host)
        c = classify(args.status, headers, body, now_s=now, request=facts)
    out.write(_render(c, as_json=args.json))
    return 0


def _read_body(name: str, stdin: TextIO) -> bytes:
    if name == "-":
        data = stdin.buffer.read() if hasattr(stdin, "buffer") else stdin.read().encode()
        return data
    with open(name, "rb") as f:
        return f.read()


def _render(c: Classification, *, as_json: bool) -> str:
    reset = (datetime.fromtimestamp(c.reset_at_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
             if c.reset_at_ms is not None else None)  # fmt: skip
    if as_json:
        doc = {"type": c.type.value, "evidence": c.evidence, "retryable": c.retryable,
               "retry_after_s": c.retry_after_s, "reset_at": reset,
               "provider_code": c.provider_code}  # fmt: skip
        return json.dumps(doc) + "\n"
    wait = f"{c.retry_after_s:g}s (until {reset})" if c.retry_after_s is not None else "none stated"
    lines = [
        f"class:     {c.type.value}",
        f"evidence:  {c.evidence}",
        f"retryable: {'yes' if c.retryable else 'no'}",
        f"wait:      {wait}",
    ]
    if c.provider_code:
        lines.append(f"code:      {c.provider_code}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # python -m gateway.classify_cli, as well as `llm-gateway classify`
    sys.exit(main(sys.argv[1:]))
