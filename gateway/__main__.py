"""``python -m gateway --config PATH`` (also the ``llm-gateway`` console script), and
``llm-gateway classify ...``, which classifies one upstream error body (see classify_cli.py)."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Callable

if __name__ == "__main__":  # ``python -m gateway``: held before the imports below (gateway/cli.py says why)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})

from gateway import __version__
from gateway.auth import startup_check
from gateway.config import ConfigError, GatewayConfig, config_warnings, parse_config, read_config_text
from gateway.workers.seat import WorkerSeat, worker_config

DESCRIPTION = """\
An LLM gateway: point an agent's base URL at it. It serves four wire APIs
and sends each request to the upstream its model routes to:

  POST /v1/chat/completions   OpenAI chat completions (SDKs, opencode, the AI SDK)
  POST /v1/messages           Anthropic Messages (Claude Code, the anthropic SDK)
  POST /v1/responses          OpenAI Responses (Codex, the openai SDK)
  POST /v1beta/models/{model}:generateContent, :streamGenerateContent
                              the Gemini API (Gemini CLI, the google-genai SDK)

It classifies upstream errors (x-llm-error-type), retries per class within one
deadline, fails over along upstreams[].fallbacks, compresses an overflowing
conversation once, continues broken streams, and stamps x-llm-* headers.
GET /metrics (Prometheus), /healthz and /readyz are for operators."""

EPILOG = """\
examples:
  llm-gateway --config config/gateway.yaml
  python -m gateway.fake --port 9000     # a fake upstream to try failures without a provider
  llm-gateway classify --help            # classify one upstream error body the way the gateway does"""


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop when asked for and installed; None: asyncio's own."""
    if name != "uvloop":
        return None
    try:
        import uvloop
    except ImportError:
        print("llm-gateway: warning: server.event_loop is uvloop but uvloop is not installed: "
              "running on asyncio's loop", file=sys.stderr)  # fmt: skip
        return None
    return uvloop.new_event_loop


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["classify"]:
        from gateway.classify_cli import main as classify_main

        return classify_main(args_in[1:])
    parser = argparse.ArgumentParser(
        prog="llm-gateway", description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    parser.add_argument(
        "--config", required=True, metavar="PATH",
        help="the gateway YAML file (config/gateway.yaml; more in config/examples/)",
    )  # fmt: skip
    parser.add_argument("--version", action="version", version=f"llm-gateway {__version__}")
    args = parser.parse_args(args_in)
    # SIGHUP reloads the config once serving (server.py); until then its default action would
    # end the process, so it is held back (blocked, not lost) until the handler is in place.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
    seat = WorkerSeat.from_env(os.environ)
    try:
        text, cfg = _initial_config(args.config, seat)
    except ConfigError as e:
        # One line per problem, each complete on its own, so grep and log shippers keep
        # the field name with the message.
        for problem in e.problems:
            print(f"llm-gateway: invalid config: {problem}", file=sys.stderr)
        return 2
    if seat is None:  # a worker's supervisor has said all this already
        for warning in config_warnings(cfg):
            print(f"llm-gateway: warning: {warning}", file=sys.stderr)
        verdict = startup_check(cfg)
        if verdict.warning:
            print(f"llm-gateway: {verdict.warning}", file=sys.stderr)
        if verdict.refusal:
            print(f"llm-gateway: {verdict.refusal}", file=sys.stderr)
            return 2

    from gateway import logs
    from gateway.listening import raise_open_files_limit

    raise_open_files_limit()  # inherited by the workers; the started line says what it is
    # Workers share the supervisor's stdout: each write holds whole lines only.
    logs.configure(cfg.server.log_level, whole_lines=cfg.server.worker_count > 1)
    if seat is None and cfg.server.worker_count > 1:
        from gateway.workers.supervisor import supervise

        return supervise(cfg, args.config, text=text)

    from gateway.listening import ListenError
    from gateway.server import serve

    try:
        with asyncio.Runner(loop_factory=loop_factory(cfg.server.event_loop)) as runner:
            runner.run(serve(cfg if seat is None else worker_config(cfg, seat), seat, args.config))
    except KeyboardInterrupt:
        pass
    except ListenError as e:  # a port in use is the operator's to fix: one line, no traceback
        print(f"llm-gateway: {e}", file=sys.stderr)
        return 2
    return 0


def _initial_config(path: str, seat: WorkerSeat | None) -> tuple[str, GatewayConfig]:
    """The text and config this process starts on: the file's, or for a worker the text its
    supervisor says the workers run (gateway/workers/seat.py)."""
    if seat is None or seat.in_force is None or seat.start is None:
        text = read_config_text(path)
        return text, parse_config(text, source=path)
    from gateway.reload.restart_only import pin

    text = read_config_text(seat.in_force)
    cfg = parse_config(text, source=path)
    start = read_config_text(seat.start)
    if start != text:
        cfg = pin(parse_config(start, source=path), cfg)[0]
    return text, cfg


if __name__ == "__main__":
    sys.exit(main())
