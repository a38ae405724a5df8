"""Test helpers shipped with Lavin, for plugin authors and for applications.

- `ExchangeTypeKit`, `QueueTypeKit`: conformance tests that a third-party exchange type or
  queue type inherits in its own test suite.
- `ShovelSourceKit`, `ShovelDestinationKit` (both `ShovelEndpointKit`s): conformance tests
  for shovel endpoints, run against a far side the subclass starts.
- `EmptyAuthContext`: the broker's side of `AuthBackend.configure`, for testing an auth
  backend in-process.
- `running_broker`, `LavinBroker`: a broker in a background thread of the test process;
  the pytest plugin's `lavin_broker` and `lavin_url` fixtures are built on them.

See docs/testing.md. Names are imported on first use: pytest imports this package for its
plugin in every run, and a run that uses none of it should not import the broker.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lavin.testing.auth_context import EmptyAuthContext
    from lavin.testing.broker import LavinBroker, running_broker
    from lavin.testing.exchange_kit import ExchangeTypeKit, Publish, StubDestination
    from lavin.testing.queue_kit import QueueTypeKit
    from lavin.testing.shovel_kit import ShovelDestinationKit, ShovelEndpointKit, ShovelSourceKit

_HOME = {
    "EmptyAuthContext": "lavin.testing.auth_context",
    "LavinBroker": "lavin.testing.broker",
    "running_broker": "lavin.testing.broker",
    "ExchangeTypeKit": "lavin.testing.exchange_kit",
    "Publish": "lavin.testing.exchange_kit",
    "StubDestination": "lavin.testing.exchange_kit",
    "QueueTypeKit": "lavin.testing.queue_kit",
    "ShovelDestinationKit": "lavin.testing.shovel_kit",
    "ShovelEndpointKit": "lavin.testing.shovel_kit",
    "ShovelSourceKit": "lavin.testing.shovel_kit",
}

__all__ = [
    "EmptyAuthContext",
    "ExchangeTypeKit",
    "LavinBroker",
    "Publish",
    "QueueTypeKit",
    "ShovelDestinationKit",
    "ShovelEndpointKit",
    "ShovelSourceKit",
    "StubDestination",
    "running_broker",
]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
