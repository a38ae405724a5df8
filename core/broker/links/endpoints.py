"""The shovel endpoints installed, by URI scheme, and the check of every runtime parameter
that runs on them (shovels, federation upstreams and upstream sets) before it is stored."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from lavin.api.shovel import ShovelDestination, ShovelSource
from lavin.broker.links.definition import parse_shovel
from lavin.broker.links.upstreams import (
    UPSTREAM_COMPONENT,
    UPSTREAM_SET_COMPONENT,
    check_upstream_set,
    parse_upstream,
)

SHOVEL_COMPONENT: Final = "shovel"


class EndpointClasses:
    """The registry's two groups: where links take messages from and put them."""

    def __init__(
        self, sources: Mapping[str, type[ShovelSource]], destinations: Mapping[str, type[ShovelDestination]]
    ) -> None:
        self.sources = sources
        self.destinations = destinations

    def check_parameter(self, component: str, name: str, value: Any) -> None:
        """PolicyError unless the value can run (the generic shape is checked already)."""
        if component == SHOVEL_COMPONENT:
            parse_shovel(name, value, self.sources, self.destinations)
        elif component == UPSTREAM_COMPONENT:
            parse_upstream(name, value, self.sources)
        elif component == UPSTREAM_SET_COMPONENT:
            check_upstream_set(value)
