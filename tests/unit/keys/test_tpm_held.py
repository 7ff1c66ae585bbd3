"""A key's ``tokens_per_minute`` refusal tells held from used (``Accounts.admit``): the minute
counts each request in flight at its prompt and every output token it asks for until it is
settled, so a minute "full" of requests in flight has room again as soon as one ends. Such a
refusal says so, with the figures, and asks again in 2 s (as a budget held by requests in
flight does), not at the minute's end; only tokens used keep it refused until then. The wall
clock is a number; the store is this process's memory."""

from __future__ import annotations

from gateway.keys.ledger import HELD_RETRY_S, Accounts, LimitHit, Reservation
from gateway.keys.prices import PriceTable
from gateway.keys.registry import KeySpec
from gateway.state.memory import MemoryStore

T0 = 1_800_000_000.0 - 1_800_000_000.0 % 60 + 20  # 20 s into a minute
KEY = KeySpec("tpm", tokens_per_minute=1000)


def accounts() -> Accounts:
    def wall() -> float:
        return T0

    return Accounts(MemoryStore(wall), PriceTable.of({}), wall)


async def test_a_minute_held_by_a_request_in_flight_is_tried_again_shortly() -> None:
    acc = accounts()
    first = await acc.admit(KEY, "m", 19, 600)
    assert isinstance(first, Reservation)
    second = await acc.admit(KEY, "m", 19, 600)
    assert isinstance(second, LimitHit) and second.kind == "tpm_held"
    assert second.retry_after_s == HELD_RETRY_S and second.reset_at_s == T0 + HELD_RETRY_S
    assert second.message == ("key 'tpm' used 0 of its 1000 tokens of this minute, and requests in flight "
                              "hold 619 of them until they end (this request counts 619: its prompt and "
                              "the 600 output tokens it asks for); try again when one has ended")
    await acc.settle(first, {"prompt": 12, "completion": 7})
    assert isinstance(await acc.admit(KEY, "m", 19, 600), Reservation)  # 19 used + 619: room


async def test_tokens_used_keep_the_key_refused_until_the_minute_ends() -> None:
    acc = accounts()
    first = await acc.admit(KEY, "m", 19, 600)
    assert isinstance(first, Reservation)
    await acc.settle(first, {"prompt": 500, "completion": 400})
    refused = await acc.admit(KEY, "m", 19, 600)
    assert isinstance(refused, LimitHit) and refused.kind == "tpm"
    minute_end = T0 - T0 % 60 + 60
    assert refused.retry_after_s == minute_end - T0 and refused.reset_at_s == minute_end
    assert refused.message == ("key 'tpm' used 900 of its 1000 tokens of this minute (this request counts "
                               "619: its prompt and the 600 output tokens it asks for); the minute resets "
                               "at 2027-01-15T08:01:00Z")


async def test_a_request_larger_than_the_whole_limit_is_told_it_opens_a_minute_only() -> None:
    """Admitted as a minute's first (docs/keys.md: a minute's tokens are overspent by at most the
    request that opens it); after that, told why it waits for the next minute, and what to change."""
    acc = accounts()
    first = await acc.admit(KEY, "m", 19, 2000)
    assert isinstance(first, Reservation)
    await acc.settle(first, {"prompt": 12, "completion": 7})
    refused = await acc.admit(KEY, "m", 19, 2000)
    assert isinstance(refused, LimitHit) and refused.kind == "tpm"
    assert refused.message == ("key 'tpm' may use 1000 tokens a minute and this request alone counts 2019 (its "
                               "prompt and the 2000 output tokens it asks for), so it is sent only as a "
                               "minute's first request; the minute resets at 2027-01-15T08:01:00Z (a lower "
                               "max_tokens, or accounting.reserved_output_max on the gateway, lets it share "
                               "a minute)")
