"""Where a request goes: the upstream or pool its model names, the order of a pool's
deployments, and which headers travel with it. Pure decisions, no I/O.

    headers.py    what is forwarded each way, the credential an upstream gets, what each
                  API requires of a request the gateway wrote in it, safe URLs
    headroom.py   a deployment's rate-limit headroom, read from its answers' headers
    affinity.py   which conversation a request belongs to, for prompt-cache affinity
    pools.py      which deployment of a pool serves a request, and when one sits out
"""

from gateway.routing.headers import (
    API_HEADERS,
    CREDENTIAL_HEADERS,
    HOP_BY_HOP,
    Outbound,
    UnsafePath,
    credential_moved,
    in_api,
    outbound_headers,
    pick_upstream,
    request_headers,
    required_for,
    response_headers,
    upstream_url,
    with_added,
    with_fixed_query,
)

__all__ = [
    "API_HEADERS", "CREDENTIAL_HEADERS", "HOP_BY_HOP", "Outbound", "UnsafePath", "credential_moved", "in_api",
    "outbound_headers", "pick_upstream", "request_headers", "required_for", "response_headers",
    "upstream_url", "with_added", "with_fixed_query",
]  # fmt: skip
