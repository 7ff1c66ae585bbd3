"""Where a forwarded client credential goes on an upstream that takes it in another place."""

import pytest

from gateway.routing import credential_moved

GOOGLE = ("x-goog-api-key", "{}")
BEARER = ("Authorization", "Bearer {}")


@pytest.mark.parametrize(("sent", "query_key", "to", "expected"), [
    ({"Authorization": "Bearer sk-1"}, None, GOOGLE, {"x-goog-api-key": "sk-1"}),
    ({"x-api-key": "sk-ant-1"}, None, GOOGLE, {"x-goog-api-key": "sk-ant-1"}),
    ({}, "AIza-q", GOOGLE, {"x-goog-api-key": "AIza-q"}),
    ({"x-goog-api-key": "AIza-h"}, "AIza-q", GOOGLE, {"x-goog-api-key": "AIza-h"}),  # the header wins
    ({"x-goog-api-key": "AIza-h", "Authorization": "Bearer other"}, None, GOOGLE, {"x-goog-api-key": "AIza-h"}),
    ({"x-api-key": "sk-ant-1"}, None, BEARER, {"Authorization": "Bearer sk-ant-1"}),
    ({"authorization": "bearer sk-2"}, None, BEARER, {"Authorization": "bearer sk-2"}),  # as it came
    ({"Accept": "*/*"}, None, GOOGLE, {"Accept": "*/*"}),  # none sent: none made up
])  # fmt: skip
def test_the_credential_goes_where_the_upstream_takes_it(
    sent: dict[str, str], query_key: str | None, to: tuple[str, str], expected: dict[str, str]
) -> None:
    assert credential_moved(dict(sent), to, query_key) == expected
