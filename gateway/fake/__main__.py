"""``python -m gateway.fake``: a fake upstream to try the gateway against, no provider needed.

    python -m gateway.fake --port 9000               # every request: a normal answer
    python -m gateway.fake --port 9000 --scenario 429

Point an upstream's base_url at ``http://127.0.0.1:9000/v1`` (config/examples/fake.yaml does)
and pick a scenario per request by the model name (``gpt-4o-mini-429``); the scenarios are
listed in :mod:`gateway.fake.scenarios` and by ``--help``. One line per request on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys

from gateway.fake import scenarios
from gateway.fake.scenarios import SCENARIOS, ScenarioUpstream


def _say(line: str) -> None:
    print(f"fake: {line}", flush=True)


async def _serve(args: argparse.Namespace) -> None:
    fake = ScenarioUpstream(args.scenario, wait_s=args.wait_s, context_window=args.context_window, log=_say)
    await fake.start(args.host, args.port)
    _say(f"listening on {fake.url} (chat completions, Messages, Responses); default scenario "
         f"{args.scenario}; pick one per request with the model name, e.g. gpt-4o-mini-429")  # fmt: skip
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await fake.close()


def main(argv: list[str] | None = None) -> int:
    doc = scenarios.__doc__ or ""
    parser = argparse.ArgumentParser(
        prog="python -m gateway.fake",
        description="A fake LLM upstream speaking OpenAI chat completions, Anthropic Messages and "
        "OpenAI Responses, with named failures to watch the gateway handle.",
        epilog="scenarios:\n" + doc[doc.index("    ok") : doc.index('"Then')].rstrip() + "\n\n" + doc[doc.index('"Then') :],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--scenario", default="ok", choices=SCENARIOS,
                        help="for requests whose model names none (default: ok)")  # fmt: skip
    parser.add_argument("--wait-s", type=float, default=2.0, help="the wait a 429 asks for (default: 2)")
    parser.add_argument("--context-window", type=int, default=2000,
                        help="overflow: the limit in estimated tokens (default: 2000)")  # fmt: skip
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
