"""Where a published message goes: the exchange walk (exchange-to-exchange bindings,
alternate exchanges, delayed holds, deduplication), the default exchange's table, CC/BCC
(sender-selected distribution), dead-lettering back into an exchange, and the direct
reply-to pseudo-queue. The exchange's own stores are here too: the delayed exchange's hold
(`delayed_store`) and the deduplication cache (`deduplication`).

Not here: the exchange types themselves (plugins behind `lavin.api.exchange`), the queues a
message ends in (`lavin.broker.queues`).
"""
