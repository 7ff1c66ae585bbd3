"""Where a request goes: the upstream or pool its model names, the order of a pool's
deployments, and which headers travel with it. Pure decisions, no I/O.

    headers.py    what is forwarded each way, the credential an upstream gets, safe URLs
    headroom.py   a deployment's rate-limit headroom, read from its answers' headers
    affinity.py   which conversation a request belongs to, for prompt-cache affinity
"""

from gateway.routing.headers import (
    CREDENTIAL_HEADERS,
    HOP_BY_HOP,
    Outbound,
    UnsafePath,
    pick_upstream,
    request_headers,
    response_headers,
    upstream_url,
)

__all__ = [
    "CREDENTIAL_HEADERS", "HOP_BY_HOP", "Outbound", "UnsafePath", "pick_upstream",
    "request_headers", "response_headers", "upstream_url",
]  # fmt: skip
