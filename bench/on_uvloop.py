"""``python -m bench.on_uvloop MODULE ARGS...``: run MODULE (as ``python -m`` would) with
uvloop as asyncio's event loop. The bench uses it to run the minimal proxy and the gateway
on the same loop, so the ratios compare like with like."""

from __future__ import annotations

import runpy
import sys

import uvloop


def main() -> None:
    uvloop.install()
    module = sys.argv[1]
    sys.argv = [module, *sys.argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
