"""The rows of lavin.broker.policy.queue_arguments are the one declaration of each queue
argument: docs/queue-semantics.md shows them as they are, and every setting the core acts
on comes from one of them. What the rows mean for clients is tested against real brokers
(test_queues, test_policies, test_quorum_queues, test_streams and the feature tests)."""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from pathlib import Path

from lavin.broker.policy.arguments import EXCHANGE_ARGUMENTS, QueueSettings
from lavin.broker.policy.queue_arguments import QUEUE_ARGUMENTS, markdown_table

DOCS = Path(__file__).resolve().parent.parent / "docs" / "queue-semantics.md"
TABLE = re.compile(r"<!-- queue-arguments:begin[^>]*-->\n(.*?)\n<!-- queue-arguments:end -->", re.DOTALL)
REGENERATE = (
    'python -c "from lavin.broker.policy.queue_arguments import markdown_table; print(markdown_table())"'
    " and paste its output between the markers in docs/queue-semantics.md"
)


def test_the_docs_show_the_table_the_rows_make() -> None:
    found = TABLE.findall(DOCS.read_text(encoding="utf-8"))
    assert len(found) == 1, "docs/queue-semantics.md holds one table between the queue-arguments markers"
    assert found[0] == markdown_table(), REGENERATE


def test_every_queue_setting_comes_from_one_row() -> None:
    settings = Counter(row.setting for row in QUEUE_ARGUMENTS if row.setting is not None)
    assert settings == Counter(field.name for field in dataclasses.fields(QueueSettings))


def test_argument_names_and_policy_keys_are_declared_once() -> None:
    rows = (*QUEUE_ARGUMENTS, *EXCHANGE_ARGUMENTS)
    names = Counter(row.name for row in rows)
    policy_keys = Counter(row.policy_key for row in rows if row.policy_key is not None)
    assert [name for name, count in names.items() if count > 1] == []
    assert [key for key, count in policy_keys.items() if count > 1] == []
