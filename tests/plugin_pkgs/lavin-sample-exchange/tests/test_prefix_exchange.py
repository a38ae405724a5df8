"""The x-prefix exchange passes Lavin's exchange-type kit, and routes by prefix."""

from __future__ import annotations

from lavin.testing import ExchangeTypeKit, Publish, StubDestination
from lavin_sample_exchange import PrefixExchange


class TestPrefixExchange(ExchangeTypeKit):
    exchange_type = PrefixExchange
    binding_key = "eu."
    other_binding_key = "eu.fr"
    matching = Publish("eu.de")
    not_matching = Publish("us.ny")

    def test_every_prefix_of_the_routing_key_matches(self) -> None:
        table = self.new_table()
        everything, europe, france = StubDestination("all"), StubDestination("eu"), StubDestination("fr")
        for destination, key in [(everything, ""), (europe, "eu."), (france, "eu.fr")]:
            table.bind(destination, key, {})
        assert self.routed(table, Publish("eu.fr.paris")) == {everything, europe, france}
        assert self.routed(table, Publish("eu.de")) == {everything, europe}
        assert self.routed(table, Publish("eu")) == {everything}
