"""The beta header an ``output_config.effort`` needs on the model it goes to.

Claude Opus 4.5 took effort before it was generally available, behind ``effort-2025-11-24``
("Requires beta flag `effort-2025-11-24` in API calls", anthropics/claude-code's Opus 4.5
migration skill, references/effort.md); from Opus 4.6 on none is needed (``claude_models``).
Whether Opus 4.5 refuses effort without it is not documented, so nothing here judges that:
the gateway only sends what the docs ask for on what it translated itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.apis.messages.binding import BETA_HEADER
from gateway.apis.messages.claude_models import thinking_for


def betas(payload: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """The beta a Messages body's effort needs on its model; joined to the betas already sent
    (``routing.headers.with_added``, which never repeats one)."""
    config, model = payload.get("output_config"), payload.get("model")
    if not (isinstance(config, dict) and "effort" in config and isinstance(model, str)):
        return ()
    beta = thinking_for(model).beta
    return ((BETA_HEADER, beta),) if beta else ()
