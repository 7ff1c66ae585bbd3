"""Redis errors that waiting will not heal, in words an operator can act on: an outage passes,
a wrong password, database or scheme does not, and a Redis that answers but refuses writes is
neither down nor shared. The words are the gateway's own, never the server's text or the URL
(either may carry a password)."""

from __future__ import annotations

from redis.exceptions import (
    AuthenticationError,
    AuthenticationWrongNumberOfArgsError,
    NoPermissionError,
    OutOfMemoryError,
    ReadOnlyError,
    ResponseError,
)

# A Redis without TLS never answers a TLS handshake: redis-py times out as if it were down.
PLAIN_BEHIND_TLS = ("state.url says rediss:// (TLS), but Redis there speaks plain Redis: use redis://, or "
                    "turn TLS on in Redis")


def lasting(error: BaseException, db: int | None) -> str | None:
    """What is wrong, when ``error`` says the configuration is (``db``: the database state.url
    names); None for an error an outage also makes."""
    if isinstance(error, AuthenticationError | AuthenticationWrongNumberOfArgsError):
        # WRONGPASS, NOAUTH, and redis-py's "HELLO must be called with the client already
        # authenticated" when no password is given to a Redis that wants one.
        return "Redis refused the credentials in state.url (a wrong or missing password, or user)"
    if isinstance(error, NoPermissionError):
        return "Redis's ACL refuses the user in state.url some of the gateway's commands or keys"
    if isinstance(error, ResponseError) and "DB index" in str(error):  # "DB index is out of range"
        return (f"Redis has no database {db} (the number in state.url's path; a Redis has 16, 0 to 15, "
                "unless its `databases` setting says more)")  # fmt: skip
    return None


def refusing_writes(error: BaseException) -> str | None:
    """Why Redis refuses writes while it answers (reads and PINGs go on), or None."""
    if isinstance(error, OutOfMemoryError):
        return ("Redis is full: it reached its maxmemory and, under maxmemory-policy noeviction, refuses "
                "every write (volatile-ttl, as deploy/ runs it, evicts instead)")  # fmt: skip
    if isinstance(error, ReadOnlyError):
        return "state.url names a read-only replica, which refuses every write (point it at the primary)"
    return None
