"""The ``llm-gateway`` command.

SIGHUP reloads the config once the gateway serves; until its handler is in place the signal's
default action ends the process. ``main`` holds it back, but only after importing what it
needs (~0.3 s): a SIGHUP in that time (a reload sidecar, ``systemctl reload`` just after a
start) ended the gateway with no word (audit: exit 129). So it is held here, before anything
else is imported; ``python -m gateway`` does the same at the top of ``__main__``.
"""

from __future__ import annotations

import signal


def run() -> int:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
    from gateway.__main__ import main

    return main()
