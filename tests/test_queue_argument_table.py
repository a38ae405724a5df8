"""The rows of lavin.broker.policy.queue_arguments are the one declaration of each queue
argument: every setting the core acts on comes from one of them (tests/test_generated_docs.py
checks the docs' table). What the rows mean for clients is tested against real brokers
(test_queues, test_policies, test_quorum_queues, test_streams and the feature tests)."""

from __future__ import annotations

import dataclasses
from collections import Counter

from lavin.broker.policy.arguments import EXCHANGE_ARGUMENTS, QueueSettings
from lavin.broker.policy.queue_arguments import QUEUE_ARGUMENTS


def test_every_queue_setting_comes_from_one_row() -> None:
    settings = Counter(row.setting for row in QUEUE_ARGUMENTS if row.setting is not None)
    assert settings == Counter(field.name for field in dataclasses.fields(QueueSettings))


def test_argument_names_and_policy_keys_are_declared_once() -> None:
    rows = (*QUEUE_ARGUMENTS, *EXCHANGE_ARGUMENTS)
    names = Counter(row.name for row in rows)
    policy_keys = Counter(row.policy_key for row in rows if row.policy_key is not None)
    assert [name for name, count in names.items() if count > 1] == []
    assert [key for key, count in policy_keys.items() if count > 1] == []
