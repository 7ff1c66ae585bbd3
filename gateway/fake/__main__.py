"""``python -m gateway.fake``: a fake upstream to try the gateway against, no provider needed.

    python -m gateway.fake --port 9000               # every request: a normal answer
    python -m gateway.fake --port 9000 --scenario 429
    python -m gateway.fake --limits k1=3 --limits k2=60,40000 --limited k3 --revoked k4   # a pool

Point an upstream's base_url at ``http://127.0.0.1:9000/v1`` (config/examples/fake.yaml does)
and pick a scenario per request by the model name (``gpt-4o-mini-429``); the scenarios are
listed in :mod:`gateway.fake.scenarios` and by ``--help``. One line per request on stdout.
It answers the Gemini API too (``/v1beta/models/{model}:generateContent`` and
``:streamGenerateContent``, ``:countTokens``), with a key in ``x-goog-api-key`` or ``?key=``.

A pool's deployments are told apart by their key (``Authorization: Bearer``, ``x-api-key``,
``api-key``, ``x-goog-api-key``): ``--limits`` gives a key requests/tokens per minute (its answers then carry the
API's real rate-limit headers; past a limit, the API's real 429), ``--limited`` keeps a key
rate-limited for an hour, ``--revoked`` makes it a wrong key (401), ``--exhausted`` out of credit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import time

from gateway.fake import output, scenarios
from gateway.fake.scenarios import SCENARIOS, ScenarioUpstream


def _say(line: str) -> None:
    print(f"fake: {line}", flush=True)


async def _serve(args: argparse.Namespace) -> None:
    fake = ScenarioUpstream(args.scenario, wait_s=args.wait_s, context_window=args.context_window, log=_say)
    fake.output_limit = args.output_limit
    fake.refused_params = frozenset(args.refuse_param)
    fake.refusal_style = args.refusal_style
    _keys(fake, args)
    await fake.start(args.host, args.port)
    _say(f"listening on {fake.url} (chat completions, Messages, Responses, Gemini); default scenario "
         f"{args.scenario}; pick one per request with the model name, e.g. gpt-4o-mini-429")  # fmt: skip
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await fake.close()


def _limits(text: str) -> tuple[str, int | None, int | None]:
    """``KEY=RPM[,TPM]`` (either number may be left empty: that one is unlimited)."""
    key, eq, spec = text.partition("=")
    rpm, _, tpm = spec.partition(",")
    try:
        numbers = [int(n) if n.strip() else None for n in (rpm, tpm)]
    except ValueError:
        numbers = []
    if not key or not eq or len(numbers) != 2 or not any(numbers) or any(n is not None and n < 1 for n in numbers):
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=RPM[,TPM], e.g. k1=3 or k2=60,40000")
    return key, numbers[0], numbers[1]


def _org(text: str) -> tuple[str, str]:
    key, eq, org = text.partition("=")
    if not key or not eq or not org:
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=NAME, e.g. k1=org-a")
    return key, org


def _keys(fake: ScenarioUpstream, args: argparse.Namespace) -> None:
    for key, rpm, tpm in args.limits:
        fake.keys.limit(key, rpm, tpm)
        _say(f"key {key}: {rpm or 'unlimited'} requests/min, {tpm or 'unlimited'} tokens/min")
    for key in args.limited:
        fake.keys.limited_until(key, time.time() + 3600)
        _say(f"key {key}: rate-limited for an hour (429)")
    for key in args.revoked:
        fake.keys.revoke(key)
        _say(f"key {key}: revoked (401)")
    for key in args.exhausted:
        fake.keys.exhaust(key)
        _say(f"key {key}: out of credit")
    for key, org in args.org:
        fake.orgs[key] = org
        _say(f"key {key}: organization {org} (reasoning signed for another is refused)")
    for key, project in args.project:
        fake.projects[key] = project
        _say(f"key {key}: project {project} (reads the responses its project's keys stored)")
    fake.require_key, fake.strict_headers = args.require_key, not args.lax_headers
    fake.keys.retry_after = not args.no_retry_after


def main(argv: list[str] | None = None) -> int:
    doc = scenarios.__doc__ or ""
    # Plain text at 80 columns: the raw formatter keeps the docstring's own line breaks, and
    # colour (argparse's default on a terminal from Python 3.14) is off, so --help reads the
    # same piped, in a log or on a dumb terminal.
    plain = {"color": False} if sys.version_info >= (3, 14) else {}
    parser = argparse.ArgumentParser(
        prog="python -m gateway.fake",
        description="A fake LLM upstream speaking OpenAI chat completions, Anthropic Messages,\n"
        "OpenAI Responses and the Gemini API, with named failures to watch the gateway\nhandle.",
        epilog="scenarios, picked per request by the model name (gpt-4o-mini-429, claude-tool):\n"
        + doc[doc.index("    ok") : doc.index('"Then')].rstrip() + "\n\n" + doc[doc.index('"Then') :],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        **plain,  # type: ignore[arg-type]
    )  # fmt: skip
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--scenario", default="ok", choices=SCENARIOS, metavar="NAME",
                        help="the scenario (below) of requests whose model names none (default: ok)")  # fmt: skip
    parser.add_argument("--wait-s", type=float, default=2.0, help="the wait a 429 asks for (default: 2)")
    parser.add_argument("--context-window", type=int, default=2000,
                        help="overflow: the limit in estimated tokens (default: 2000)")  # fmt: skip
    parser.add_argument("--output-limit", type=int, default=None, metavar="TOKENS",
                        help="refuse a chat or Messages request asking for more output tokens, as "
                             "OpenAI and Anthropic refuse it (default: no limit)")  # fmt: skip
    parser.add_argument("--refuse-param", action="append", default=[], metavar="NAME",
                        help="refuse a chat or Messages request carrying this top-level parameter, as "
                             "gpt-4o refuses reasoning_effort (repeatable)")  # fmt: skip
    parser.add_argument("--refusal-style", default="openai", choices=output.STYLES,
                        help="whose words refuse a chat request's parameter: OpenAI's 400, Groq's 400 or "
                             "Mistral's 422 (default: openai)")  # fmt: skip
    pool = parser.add_argument_group("a pool of keys (deployments told apart by their credential)")
    pool.add_argument("--limits", type=_limits, action="append", default=[], metavar="KEY=RPM[,TPM]",
                      help="limit KEY to RPM requests and TPM tokens a minute (repeatable)")  # fmt: skip
    for flag, what in (("limited", "rate-limited (429) for an hour"), ("revoked", "a revoked key (401)"),
                       ("exhausted", "out of credit (OpenAI 429 insufficient_quota, Anthropic 400)")):
        pool.add_argument(f"--{flag}", action="append", default=[], metavar="KEY", help=f"KEY is {what}")
    pool.add_argument("--org", type=_org, action="append", default=[], metavar="KEY=ORG",
                      help="KEY belongs to organization ORG: thinking signatures and encrypted reasoning "
                           "given to another organization's key are refused, as the providers refuse "
                           "them (repeatable)")  # fmt: skip
    pool.add_argument("--project", type=_org, action="append", default=[], metavar="KEY=PROJECT",
                      help="KEY belongs to project PROJECT: a previous_response_id stored by a key of "
                           "another project is refused, as OpenAI refuses it (default: each key is a "
                           "project of its own; repeatable)")  # fmt: skip
    pool.add_argument("--require-key", action="store_true", help="refuse a request with no key (401)")
    pool.add_argument("--no-retry-after", action="store_true",
                      help="an OpenAI-style 429 without retry-after: its wait in the body and the x-ratelimit-* "
                      "headers only, as openai-node#1477 quotes one (Anthropic's keep it)")  # fmt: skip
    pool.add_argument("--lax-headers", action="store_true",
                      help="accept a Messages request without anthropic-version (Anthropic answers 400) "
                           "or with an Anthropic key as a bearer token or an OAuth token in x-api-key "
                           "(401), and a Gemini request without a key (Google answers 403)")  # fmt: skip
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        try:
            asyncio.run(_serve(args))
        except OSError as e:
            print(f"python -m gateway.fake: cannot listen on {args.host}:{args.port}: {e.strerror}",
                  file=sys.stderr)  # fmt: skip
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
