"""Sender-selected distribution: the CC and BCC headers add routing keys to a publish."""

from __future__ import annotations

from lavin.api import Message, errors

_HEADERS_FLAG = 0x20  # in the first byte of the property flags


def routing_keys_of(message: Message) -> list[str]:
    """The routing key plus the CC and BCC keys (sender-selected distribution).

    Raises 406 when CC or BCC is not an array of strings; leaves the message unchanged.
    """
    if len(message.properties) < 2 or not message.properties[0] & _HEADERS_FLAG:
        return [message.routing_key]
    headers = message.headers
    if "CC" not in headers and "BCC" not in headers:
        return [message.routing_key]
    keys = [message.routing_key]
    for name in ("CC", "BCC"):
        value = headers.get(name)
        if value is None:
            continue
        # A key that is not UTF-8 (decoded as bytes) is refused too: routing keys are text.
        if not isinstance(value, list) or not all(isinstance(k, str) for k in value):
            raise errors.PreconditionFailed(f"invalid {name} header: expected an array of strings")
        keys.extend(value)
    return keys


def strip_bcc(message: Message) -> None:
    """Remove the BCC header, which no receiver may see."""
    if len(message.properties) < 2 or not message.properties[0] & _HEADERS_FLAG:
        return
    headers = message.headers
    if "BCC" in headers:
        props = dict(message.props)
        props["headers"] = {key: value for key, value in headers.items() if key != "BCC"}
        message.replace_properties(props)
