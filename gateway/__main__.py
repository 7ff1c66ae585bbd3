"""``python -m gateway --config PATH`` (also the ``llm-gateway`` console script), and
``llm-gateway classify ...``, which classifies one upstream error body (see classify_cli.py)."""

from __future__ import annotations

import argparse
import asyncio
import sys

from gateway import __version__
from gateway.auth import startup_check
from gateway.config import ConfigError, config_warnings, load_config


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["classify"]:
        from gateway.classify_cli import main as classify_main

        return classify_main(args_in[1:])
    parser = argparse.ArgumentParser(
        prog="llm-gateway",
        description="An LLM gateway for OpenAI-compatible chat completions.",
        epilog="llm-gateway classify --help: classify one upstream error body the way the gateway does",
    )
    parser.add_argument("--config", required=True, metavar="PATH", help="the gateway YAML file")
    parser.add_argument("--version", action="version", version=f"llm-gateway {__version__}")
    args = parser.parse_args(args_in)
    try:
        cfg = load_config(args.config)
    except ConfigError as e:
        # One line per problem, each complete on its own, so grep and log shippers keep
        # the field name with the message.
        for problem in e.problems:
            print(f"llm-gateway: invalid config: {problem}", file=sys.stderr)
        return 2
    for warning in config_warnings(cfg):
        print(f"llm-gateway: warning: {warning}", file=sys.stderr)
    verdict = startup_check(cfg)
    if verdict.warning:
        print(f"llm-gateway: {verdict.warning}", file=sys.stderr)
    if verdict.refusal:
        print(f"llm-gateway: {verdict.refusal}", file=sys.stderr)
        return 2

    from gateway import logs
    from gateway.server import serve

    logs.configure(cfg.server.log_level)
    try:
        asyncio.run(serve(cfg))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
