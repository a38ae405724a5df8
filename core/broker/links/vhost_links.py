"""Everything that moves messages between this vhost and other brokers: its shovels and
its federation links, as one watcher of the vhost's parameters and policies."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from lavin.api.shovel import LocalBroker
from lavin.broker.links.endpoints import EndpointClasses
from lavin.broker.links.federation import VHostFederation
from lavin.broker.links.shovels import VHostShovels
from lavin.broker.links.upstreams import UPSTREAM_COMPONENT, UPSTREAM_SET_COMPONENT
from lavin.broker.policy.policies import VHostPolicies
from lavin.broker.queues.queue import Queue
from lavin.broker.routing.exchange import Exchange


class VHostLinks:
    def __init__(
        self,
        policies: VHostPolicies,
        downstream_id: str,
        endpoints: EndpointClasses,
        local: Callable[[], LocalBroker],
        exchanges: Mapping[str, Exchange],
        queues: Mapping[str, Queue],
    ) -> None:
        self.endpoints = endpoints
        self.shovels = VHostShovels(policies, endpoints, local)
        self.federation = VHostFederation(
            policies.vhost_name, downstream_id, endpoints, local, lambda: policies.parameters, exchanges, queues
        )
        policies.watcher = self

    # ---- the vhost's parameters and policies (policies.ParameterWatcher) ------------------------

    def check_parameter(self, component: str, name: str, value: Any) -> None:
        self.endpoints.check_parameter(component, name, value)

    def parameter_changed(self, component: str, name: str, value: Any | None) -> None:
        self.shovels.parameter_changed(component, name, value)
        if component in (UPSTREAM_COMPONENT, UPSTREAM_SET_COMPONENT):
            self.federation.upstreams_changed()

    def policy_applied(self, kind: str, name: str, definition: Mapping[str, Any]) -> None:
        self.federation.policy_applied(kind, name, definition)

    # ---- the broker's lifecycle -------------------------------------------------------------

    def start(self) -> None:
        self.shovels.start()
        self.federation.start()

    async def stop(self) -> None:
        await self.shovels.stop()
        await self.federation.stop()
