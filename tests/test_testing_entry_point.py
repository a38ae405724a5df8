"""An application's test suite gets the broker fixtures from the installed lavin alone: a
fresh pytest run in an empty folder, with no conftest and none of Lavin's test helpers."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

APPLICATION_TESTS = """
import kombu


def test_a_message_goes_round_trip(lavin_url):
    with kombu.Connection(lavin_url) as connection:
        queue = connection.SimpleQueue("orders")
        queue.put({"order": 42})
        message = queue.get(timeout=5)
        message.ack()
        queue.close()
    assert message.payload == {"order": 42}
"""


def test_fixtures_are_registered_by_the_entry_point(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("--fixtures")
    result.stdout.fnmatch_lines([
        "*-- fixtures defined from lavin.testing.pytest_plugin --*",
        "lavin_plugins [[]session scope[]] -- *",
        "lavin_broker -- *",
        "lavin_broker_session [[]session scope[]] -- *",
        "lavin_url -- *",
    ])  # fmt: skip


def test_an_application_test_talks_to_the_fixture_broker(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_application=APPLICATION_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
