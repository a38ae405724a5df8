"""AMQP exceptions as Python exceptions; the core maps them to reply codes.

Channel errors close the channel, connection errors close the whole connection, as the
AMQP 0-9-1 spec and RabbitMQ define them.
"""

from __future__ import annotations


class AMQPError(Exception):
    """Base of every error that becomes a channel.close or connection.close."""

    reply_code: int = 541
    reply_name: str = "INTERNAL_ERROR"
    connection_level: bool = False

    def __init__(self, text: str, class_id: int = 0, method_id: int = 0) -> None:
        super().__init__(text)
        self.text = text
        # The method that failed, reported back in channel.close / connection.close.
        self.class_id = class_id
        self.method_id = method_id

    @property
    def reply_text(self) -> str:
        """The text RabbitMQ would send: the reply name, a dash, and the detail."""
        text = f"{self.reply_name} - {self.text}"
        try:  # client bytes that are not UTF-8, held as surrogate escapes, are shown as \xNN
            text = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:  # a lone surrogate of another kind
            text = text.encode("utf-8", "backslashreplace").decode()
        # A shortstr holds 255 bytes; RabbitMQ cuts at 252 and marks the cut.
        return text if len(text.encode()) <= 255 else text.encode()[:252].decode(errors="ignore") + "..."


class ChannelError(AMQPError):
    """An error that closes only the channel it happened on."""


class ConnectionError_(AMQPError):
    """An error that closes the connection."""

    connection_level = True


class ContentTooLarge(ChannelError):
    reply_code, reply_name = 311, "CONTENT_TOO_LARGE"


class NoConsumers(ChannelError):
    reply_code, reply_name = 313, "NO_CONSUMERS"


class AccessRefused(ChannelError):
    reply_code, reply_name = 403, "ACCESS_REFUSED"


class NotFound(ChannelError):
    reply_code, reply_name = 404, "NOT_FOUND"


class ResourceLocked(ChannelError):
    reply_code, reply_name = 405, "RESOURCE_LOCKED"


class PreconditionFailed(ChannelError):
    reply_code, reply_name = 406, "PRECONDITION_FAILED"


class ConnectionForced(ConnectionError_):
    reply_code, reply_name = 320, "CONNECTION_FORCED"


class InvalidPath(ConnectionError_):
    reply_code, reply_name = 402, "INVALID_PATH"


class ConnectionAccessRefused(ConnectionError_):
    reply_code, reply_name = 403, "ACCESS_REFUSED"


class FrameError(ConnectionError_):
    reply_code, reply_name = 501, "FRAME_ERROR"


class SyntaxError_(ConnectionError_):
    reply_code, reply_name = 502, "SYNTAX_ERROR"


class CommandInvalid(ConnectionError_):
    reply_code, reply_name = 503, "COMMAND_INVALID"


class ChannelErrorConn(ConnectionError_):
    """Reply 504: a frame on a channel that is not open (a connection-level error)."""

    reply_code, reply_name = 504, "CHANNEL_ERROR"


class UnexpectedFrame(ConnectionError_):
    reply_code, reply_name = 505, "UNEXPECTED_FRAME"


class ResourceError(ConnectionError_):
    reply_code, reply_name = 506, "RESOURCE_ERROR"


class NotAllowed(ConnectionError_):
    reply_code, reply_name = 530, "NOT_ALLOWED"


class NotImplemented_(ConnectionError_):
    reply_code, reply_name = 540, "NOT_IMPLEMENTED"


class InternalError(ConnectionError_):
    reply_code, reply_name = 541, "INTERNAL_ERROR"
