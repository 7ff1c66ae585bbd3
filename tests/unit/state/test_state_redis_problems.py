"""Redis errors that waiting will not heal, told apart from an outage (gateway/state/redis_problems.py),
on the errors redis-py 8 raises for them: AUTH, NOPERM, OOM, READONLY and SELECT messages as
redis-server 7.0.15 sent them (measured with redis-cli and redis-py), connection errors redis-py's own."""

from __future__ import annotations

import pytest
from redis.exceptions import (
    AuthenticationError,
    BusyLoadingError,
    ConnectionError,
    NoPermissionError,
    OutOfMemoryError,
    ReadOnlyError,
    ResponseError,
    TimeoutError,
)

from gateway.state.redis_problems import lasting, refusing_writes


@pytest.mark.parametrize("error", [
    AuthenticationError("invalid username-password pair or user is disabled."),  # a wrong password
    AuthenticationError("HELLO must be called with the client already authenticated, otherwise the HELLO "
                        "AUTH <user> <pass> option can be used to authenticate the client and select the "
                        "RESP protocol version at the same time"),  # none, to a Redis that wants one
])  # fmt: skip
def test_refused_credentials_do_not_heal(error: Exception) -> None:
    problem = lasting(error, db=0)
    assert problem is not None and "credentials" in problem and "state.url" in problem
    assert str(error) not in problem  # our words, never the server's text


def test_a_database_redis_does_not_have_does_not_heal() -> None:
    problem = lasting(ResponseError("DB index is out of range"), db=99)
    assert problem is not None and "no database 99" in problem


def test_an_acl_that_refuses_the_gateway_does_not_heal() -> None:
    problem = lasting(NoPermissionError("this user has no permissions to run the 'evalsha' command"), db=0)
    assert problem is not None and "ACL" in problem


@pytest.mark.parametrize("error", [
    ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused."),
    TimeoutError("Timeout connecting to server"),
    BusyLoadingError("Redis is loading the dataset in memory"),
    ResponseError("ERR unknown command 'HELLO'"),
])  # fmt: skip
def test_an_outage_is_not_a_lasting_problem(error: Exception) -> None:
    assert lasting(error, db=0) is None and refusing_writes(error) is None


def test_a_full_redis_and_a_read_only_replica_refuse_writes() -> None:
    full = refusing_writes(OutOfMemoryError("command not allowed when used memory > 'maxmemory'."))
    assert full is not None and "maxmemory" in full and "noeviction" in full
    replica = refusing_writes(ReadOnlyError("You can't write against a read only replica."))
    assert replica is not None and "read-only replica" in replica
    assert lasting(OutOfMemoryError("x"), db=0) is None  # Redis answers: a state of its own
