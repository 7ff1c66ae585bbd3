"""`python -m bench.timed FUNCS -- GATEWAY ARGS`: the gateway, with some of its functions timed
in place (issue #38).

py-spy's shares mislead for small functions: a sampler pausing the process inflates what runs
between its samples, and a micro-benchmark runs warm where a request runs cold (the same
function took 2-3x longer inside a loaded gateway than in `timeit`). This wraps each named
plain function (not a coroutine function: its call only makes the coroutine) with a
perf_counter_ns pair, runs the gateway in this process, and on SIGUSR2 (and at exit) writes
each function's call count and mean time to stderr, then starts counting afresh: send one
SIGUSR2 before the measured load and one after.

    python -m bench.timed gateway.pipeline.forward:leg_call,gateway.translate:Translation.answer \\
        -- --config gateway.yaml

A function is named ``module:attribute`` where it is *looked up* at call time: a name another
module imported (``from x import f``) is patched in that module (``gateway.pipeline.forward:leg_call``).
The wrapper itself costs ~0.3 µs a call.
"""

from __future__ import annotations

import importlib
import signal
import sys
import time
from collections.abc import Callable
from typing import Any


class Timings:
    def __init__(self) -> None:
        self.stats: dict[str, list[int]] = {}

    def wrap(self, spec: str) -> None:
        module_name, _, attr = spec.partition(":")
        owner: Any = importlib.import_module(module_name)
        *path, name = attr.split(".")
        for part in path:
            owner = getattr(owner, part)
        fn: Callable[..., Any] = getattr(owner, name)
        stat = self.stats.setdefault(spec, [0, 0])
        clock = time.perf_counter_ns

        def timed(*args: Any, **kwargs: Any) -> Any:
            t = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                stat[0] += clock() - t
                stat[1] += 1

        setattr(owner, name, timed)

    def dump(self, *_: object) -> None:
        for spec, stat in self.stats.items():
            ns, n = stat
            sys.stderr.write(f"timed {spec}: {n} calls, {ns / max(n, 1) / 1000:.2f} µs each\n")
            stat[0] = stat[1] = 0  # in place: the wrapper holds this list
        sys.stderr.flush()


def main() -> int:
    if "--" not in sys.argv[1:]:
        sys.exit(__doc__.split("\n\n")[2] if __doc__ else "usage: python -m bench.timed FUNCS -- ARGS")
    cut = sys.argv.index("--")
    timings = Timings()
    for spec in ",".join(sys.argv[1:cut]).split(","):
        if spec:
            timings.wrap(spec)
    signal.signal(signal.SIGUSR2, timings.dump)
    from gateway.__main__ import main as gateway_main

    sys.argv = ["llm-gateway", *sys.argv[cut + 1 :]]
    try:
        return gateway_main()
    finally:
        timings.dump()


if __name__ == "__main__":
    sys.exit(main())
