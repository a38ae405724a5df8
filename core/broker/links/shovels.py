"""A vhost's shovels: one link per `shovel` runtime parameter, started when the broker is
ready to take connections, started again when its parameter changes, stopped when it is
cleared, when the vhost goes and when the broker shuts down. A pause is stored beside the
parameter (`VHostPolicies.paused`), so a paused shovel stays paused across restarts until it
is resumed or its parameter changes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from lavin.api.printable import printable
from lavin.api.shovel import LocalBroker
from lavin.broker.links.definition import parse_shovel
from lavin.broker.links.endpoints import SHOVEL_COMPONENT, EndpointClasses
from lavin.broker.links.link import TERMINATED, BackgroundStops, ShovelLink
from lavin.broker.policy.policies import VHostPolicies
from lavin.broker.policy.policy_rules import PolicyError, reasons_line

log = logging.getLogger(__name__)


class VHostShovels:
    def __init__(self, policies: VHostPolicies, endpoints: EndpointClasses, local: Callable[[], LocalBroker]) -> None:
        self.vhost = policies.vhost_name
        self.endpoints = endpoints
        self._local = local
        self._policies = policies  # where the parameters and pauses are stored
        self.links: dict[str, ShovelLink] = {}
        # Stored shovels that cannot run (their endpoint is no longer installed): the reason.
        self.broken: dict[str, str] = {}
        self._stopping = BackgroundStops()
        self.running = False

    def parameter_changed(self, component: str, name: str, value: Any | None) -> None:
        """Stop the old link of that name, if any, and start the new one."""
        if component != SHOVEL_COMPONENT:
            return
        self.broken.pop(name, None)
        old = self.links.pop(name, None)
        if old is not None:
            self._stopping.start(old.stop())
        if value is not None:
            self._add(name, value)

    # ---- the broker's lifecycle ----------------------------------------------------------

    def start(self) -> None:
        """Start a link for every stored shovel (a paused one only held)."""
        self.running = True
        for (component, name), value in self._policies.parameters.items():
            if component == SHOVEL_COMPONENT:
                self._add(name, value)

    async def stop(self) -> None:
        self.running = False
        links = list(self.links.values())
        self.links.clear()
        await asyncio.gather(*(link.stop() for link in links), self._stopping.wait())

    def _add(self, name: str, value: Any) -> None:
        try:
            definition = parse_shovel(name, value, self.endpoints.sources, self.endpoints.destinations)
        except PolicyError as exc:
            reason = reasons_line(exc)
            log.error("shovel '%s' in vhost '%s' cannot start: %s", printable(name), printable(self.vhost), reason)
            self.broken[name] = reason
            return
        link = ShovelLink(self.vhost, definition, self._local, self._finished)
        self.links[name] = link
        if (SHOVEL_COMPONENT, name) in self._policies.paused:
            link.hold()
        elif self.running:
            link.start()

    async def pause(self, link: ShovelLink) -> None:
        """Hold the shovel, and keep it held across restarts."""
        self._policies.set_paused(SHOVEL_COMPONENT, link.name, True)
        await link.pause()

    def resume(self, link: ShovelLink) -> None:
        self._policies.set_paused(SHOVEL_COMPONENT, link.name, False)
        link.resume()

    def _finished(self, link: ShovelLink) -> None:
        log.info("shovel '%s' in vhost '%s' is done", printable(link.name), printable(self.vhost))
        if self.links.get(link.name) is link:
            self._policies.delete_parameter(SHOVEL_COMPONENT, link.name)  # done: it deletes itself

    def status(self, node: str) -> list[dict[str, Any]]:
        rows = [link.status(node) for link in self.links.values()]
        rows += [
            {"node": node, "name": name, "vhost": self.vhost, "type": "dynamic", "state": TERMINATED, "reason": reason}
            for name, reason in self.broken.items()
        ]
        return sorted(rows, key=lambda row: str(row["name"]))
