"""The handshake of one client connection, from its protocol header to open-ok, and what
its login governs afterwards: connection.update-secret and the credentials' expiry.

As LavinMQ's connection factory does, the handshake authenticates the client (PLAIN,
AMQPLAIN, or EXTERNAL by a verified client certificate), negotiates the limits, opens the
vhost, and hands the connection over in state OPEN; `Connection` parses the frames
throughout and passes channel 0's handshake methods here. A login never blocks the loop:
the socket is not read until the auth backends answer, and a refused login is answered
LOGIN_REFUSAL_DELAY late.
"""

from __future__ import annotations

import asyncio
import logging
import platform
import struct
import time
from typing import TYPE_CHECKING, Any, Final

import lavin
from lavin.amqp import codec
from lavin.amqp.authorization import Authorization, NeedsAuthorization
from lavin.amqp.output import PAUSED_FOR_LOGIN
from lavin.api import errors
from lavin.api.auth import AuthBackend, User
from lavin.api.field_table import decode_table
from lavin.api.printable import printable
from lavin.transport.certificates import external_login_name
from pamqp import commands
from pamqp.common import FieldTable

if TYPE_CHECKING:
    from lavin.amqp.connection import Connection

log = logging.getLogger(__name__)

# A connection's states: the handshake's steps, then open (handed over), closing, closed.
AWAIT_HEADER: Final = 0
AWAIT_START_OK: Final = 1
AWAIT_TUNE_OK: Final = 2
AWAIT_OPEN: Final = 3
OPEN: Final = 4
CLOSING: Final = 5
CLOSED: Final = 6  # close-ok sent (the socket lingers until the client closes it) or gone
AUTHENTICATING: Final = 7  # start-ok received, the auth backends not done yet (or a refusal waits)

# What the handshake waits for in each of its states.
NEXT_METHOD: Final[dict[int, type[Any]]] = {
    AWAIT_START_OK: commands.Connection.StartOk,
    AWAIT_TUNE_OK: commands.Connection.TuneOk,
    AWAIT_OPEN: commands.Connection.Open,
}

# A client that never finishes the handshake must not hold a socket forever.
HANDSHAKE_TIMEOUT: Final = 10.0
# A refused login is answered this many seconds late, so that guessing passwords is slow;
# RabbitMQ waits 3 s before it drops a connection whose handshake failed.
LOGIN_REFUSAL_DELAY: Final = 1.0
FRAME_MIN_SIZE: Final = 4096
TLS_HANDSHAKE_RECORD: Final = 0x16  # the first byte a TLS client sends
PROXY_V2_SIGNATURE_START: Final = b"\r\n\r\n\x00\r\nQ"

SERVER_CAPABILITIES: Final[FieldTable] = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "consumer_priorities": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
    "direct_reply_to": True,
}


class Handshake:
    """Walks a connection from its protocol header through connection.start, start-ok,
    tune, tune-ok and open, and keeps what the login needs later: the backend that
    authenticated the user."""

    # One per connection for its whole life: slots keep an idle connection as small as it was
    # before the handshake had a class of its own.
    __slots__ = ("_expiry_timer", "_secret_update", "_timer", "auth_backend", "connection")

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.auth_backend: AuthBackend | None = None  # the backend that authenticated the user
        self._timer: asyncio.TimerHandle | None = None  # the handshake's deadline, or a refused login's answer
        self._expiry_timer: asyncio.TimerHandle | None = None  # closes it when the credentials expire
        self._secret_update: asyncio.Task[User | errors.NotAllowed] | None = None

    def begin(self) -> None:
        """The socket is open: the client has HANDSHAKE_TIMEOUT to get to open-ok."""
        self._timer = self.connection.loop.call_later(HANDSHAKE_TIMEOUT, self._timed_out)

    def stop(self) -> None:
        """The connection closes: none of the login's timers fires any more."""
        for timer in (self._timer, self._expiry_timer):
            if timer is not None:
                timer.cancel()
        self._timer = self._expiry_timer = None

    def _timed_out(self) -> None:
        self._timer = None
        connection = self.connection
        if connection.state != OPEN:
            log.warning("connection from %s did not finish the handshake in time", connection.peer)
            connection.abort()

    # ---- the protocol header and connection.start ----------------------------------------

    def protocol_header(self, header: bytes) -> bool:
        """The client's first eight octets: whether they are AMQP 0-9-1's header, which
        connection.start answers."""
        connection = self.connection
        # Logged once the client sent something, as RabbitMQ does: port probes stay quiet.
        log.info("accepting AMQP connection %s", connection.name)
        if header != codec.PROTOCOL_HEADER:
            self._log_foreign_header(header)
            # The spec's answer to a header we don't speak: ours, then close.
            transport = connection.output.transport
            if transport is not None:
                transport.write(codec.PROTOCOL_HEADER)
                transport.close()
            connection.state = CLOSED
            return False
        self._start()
        return True

    def _log_foreign_header(self, header: bytes) -> None:
        """Name the two mistakes a header reveals: a TLS client on the plain port, a load
        balancer sending the PROXY protocol where it is not turned on."""
        if header[0] == TLS_HANDSHAKE_RECORD:
            log.warning("TLS handshake from %s on the plain AMQP port: closed", self.connection.peer)
        elif header.startswith(b"PROXY ") or header == PROXY_V2_SIGNATURE_START:
            log.warning("PROXY protocol header from %s, where tcp_proxy_protocol is off: closed", self.connection.peer)

    def _start(self) -> None:
        connection = self.connection
        start = connection_start(connection.broker.config.bind, tls=connection.tls() is not None)
        connection.output.send(codec.method_frame(0, start))
        connection.state = AWAIT_START_OK

    def on_method(self, method: Any) -> None:
        """A method on channel 0 other than close and close-ok: the next step of the
        handshake, or once open, update-secret."""
        expected = NEXT_METHOD.get(self.connection.state)
        if expected is not None:
            if not isinstance(method, expected):
                raise errors.CommandInvalid(f"expected '{expected.name}', got '{method.name}'")
            if isinstance(method, commands.Connection.StartOk):
                self._start_ok(method)
            elif isinstance(method, commands.Connection.TuneOk):
                self._tune_ok(method)
            else:
                self._open(method)
        elif isinstance(method, (commands.Connection.Blocked, commands.Connection.Unblocked)):
            return
        elif isinstance(method, commands.Connection.UpdateSecret):
            self._update_secret(method)
        else:
            raise errors.CommandInvalid(f"unexpected '{method.name}' on channel 0")

    # ---- the login -----------------------------------------------------------------------

    def _start_ok(self, method: commands.Connection.StartOk) -> None:
        """Authenticate without blocking the loop: reading pauses until the backends answer
        (a client sends nothing before tune anyway)."""
        connection = self.connection
        connection.client_properties = dict(method.client_properties or {})
        if connection.client_name():
            log.info("connection %s has a client-provided name: %s", connection.name, connection.client_name())
        connection.auth_mechanism = method.mechanism
        if connection.direct_user is not None:  # a link's own connection to this broker: trusted
            self._logged_in(connection.direct_user, None)
            return
        try:
            username, password = self._credentials(method.mechanism, method.response or "")
        except errors.ConnectionAccessRefused as exc:
            log.warning("login from %s refused: %s", connection.peer, printable(exc.text))
            self._refuse_login(exc)
            return
        connection.state = AUTHENTICATING
        connection.output.pause_reading(PAUSED_FOR_LOGIN)
        login = connection.broker.login(username, password, connection.peer_host, method.mechanism)
        connection.loop.create_task(login).add_done_callback(self._authenticated)

    def _authenticated(self, task: asyncio.Task[tuple[User, AuthBackend]]) -> None:
        connection = self.connection
        if connection.state != AUTHENTICATING:  # the client went away meanwhile
            return
        try:
            user, backend = task.result()
        except errors.ConnectionAccessRefused as exc:
            self._refuse_login(exc)
            return
        except Exception:  # a broken backend must cost this login only
            log.exception("authentication of a client from %s failed", connection.peer)
            self._refuse_login(errors.ConnectionAccessRefused("authentication failed"))
            return
        connection.output.resume_reading(PAUSED_FOR_LOGIN)
        self._logged_in(user, backend)

    def _logged_in(self, user: User, backend: AuthBackend | None) -> None:
        """Tune: `user` is who the connection acts for from now on."""
        connection = self.connection
        connection.user = user
        self.auth_backend = backend
        connection.authorization = Authorization(user)
        config = connection.broker.config
        tune = commands.Connection.Tune(
            channel_max=config.channel_max, frame_max=config.frame_max, heartbeat=config.heartbeat
        )
        connection.output.send(codec.method_frame(0, tune))
        connection.state = AWAIT_TUNE_OK
        if connection.buffer:  # frames that came in while the backends were asked
            connection.data_received(b"")

    def _refuse_login(self, exc: errors.ConnectionAccessRefused) -> None:
        """Answer a failed login after LOGIN_REFUSAL_DELAY: one timer, the socket unread
        meanwhile, so a client guessing passwords gets one answer per delay and connection."""
        connection = self.connection
        connection.state = AUTHENTICATING
        connection.output.pause_reading(PAUSED_FOR_LOGIN)
        if self._timer is not None:  # the handshake's deadline: the refusal comes sooner
            self._timer.cancel()
        self._timer = connection.loop.call_later(LOGIN_REFUSAL_DELAY, self._answer_refused_login, exc)

    def _answer_refused_login(self, exc: errors.ConnectionAccessRefused) -> None:
        self._timer = None
        connection = self.connection
        if connection.client_can("authentication_failure_close"):
            connection.output.resume_reading(PAUSED_FOR_LOGIN)  # for the close-ok
            connection.close_with_error(exc)
        else:
            connection.abort()  # pre-capability clients expect the socket to just close

    def _credentials(self, mechanism: str, response: str | bytes) -> tuple[str, str | None]:
        """The user name and password; no password for EXTERNAL, whose user the client's
        verified certificate names."""
        if mechanism == "EXTERNAL":
            config = self.connection.broker.config
            login = config.tls_cert_login_from, config.tls_cert_login_san_type, config.tls_cert_login_san_index
            return external_login_name(self.connection.tls(), *login), None
        return password_credentials(mechanism, response)

    # ---- tune-ok and open ----------------------------------------------------------------

    def _tune_ok(self, method: commands.Connection.TuneOk) -> None:
        connection = self.connection
        config = connection.broker.config
        connection.frame_max = _negotiate("frame_max", method.frame_max, FRAME_MIN_SIZE, config.frame_max)
        connection.channel_max = _negotiate("channel_max", method.channel_max, 0, config.channel_max) or 65535
        connection.heartbeats.start(method.heartbeat)
        connection.state = AWAIT_OPEN

    def _open(self, method: commands.Connection.Open) -> None:
        """Open the vhost, and hand the connection over."""
        connection = self.connection
        user, authorization = connection.user, connection.authorization
        assert user is not None and authorization is not None
        vhost = connection.broker.vhosts.get(method.virtual_host)
        if vhost is None:
            raise errors.NotAllowed(f"vhost {method.virtual_host} not found", 10, 40)
        vhost.check_connection_limit(user.name)  # before the access check, as RabbitMQ
        authorization.require_vhost(method.virtual_host)
        self._watch_expiry()
        connection.vhost = vhost
        vhost.connection_opened(connection)
        connection.state = OPEN
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        connection.output.send(codec.method_frame(0, commands.Connection.OpenOk()))
        log.info(
            "connection %s: user '%s' authenticated and granted access to vhost '%s'",
            connection.log_name(),
            printable(user.name),
            printable(vhost.name),
        )
        connection.broker.registry.hooks.lavin_connection_opened(connection=connection)

    # ---- after the handshake: update-secret, expiry --------------------------------------

    def _update_secret(self, method: commands.Connection.UpdateSecret) -> None:
        """connection.update-secret: the backend that authenticated the user checks the new
        secret; the frame is parsed again once it has answered, and applies the answer."""
        update = self._secret_update
        if update is None:
            self._secret_update = update = self.connection.loop.create_task(self._check_secret(method.new_secret or ""))
            raise NeedsAuthorization(update)
        self._secret_update = None
        user = update.result()
        if isinstance(user, errors.NotAllowed):
            raise user
        connection = self.connection
        assert connection.authorization is not None
        connection.user = user
        connection.authorization.user = user
        connection.forget_permissions()
        self._watch_expiry()
        log.info(
            "connection %s: user '%s' updated secret, reason: %s",
            connection.peer,
            printable(user.name),
            printable(method.reason or ""),
        )
        connection.output.send(codec.method_frame(0, commands.Connection.UpdateSecretOk()))

    async def _check_secret(self, secret: str) -> User | errors.NotAllowed:
        """The user with the new secret, or the error that closes the connection (530, with
        RabbitMQ's texts). A backend without secrets keeps the user, as RabbitMQ's internal
        backend does."""
        user, backend = self.connection.user, self.auth_backend
        assert user is not None
        if backend is None:  # a link's local connection has no secret
            return user
        try:
            return await backend.update_secret(user, secret)
        except NotImplementedError:
            return user
        except errors.AccessRefused as exc:
            log.error("secret update was refused for user '%s': %s", printable(user.name), printable(exc.text))
            return errors.NotAllowed("New secret was refused by one of the backends", 10, 70)
        except Exception:  # a broken backend costs this connection only
            log.exception("secret update for user '%s' failed", printable(user.name))
            return errors.NotAllowed("Secret update failed", 10, 70)

    def _watch_expiry(self) -> None:
        """One timer closes the connection when the user's credentials expire (an OAuth2
        token's expiry); a new secret replaces it."""
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
            self._expiry_timer = None
        user = self.connection.user
        expires_at = user.expires_at if user is not None else None
        if expires_at is not None:
            delay = max(0.0, expires_at - time.monotonic())
            self._expiry_timer = self.connection.loop.call_later(delay, self._credentials_expired)

    def _credentials_expired(self) -> None:
        self._expiry_timer = None
        self.connection.close_with_error(errors.ConnectionAccessRefused("credential expired"))


def password_credentials(mechanism: str, response: str | bytes) -> tuple[str, str]:
    """The user name and password of a PLAIN or AMQPLAIN login response."""
    raw = response.encode("latin-1") if isinstance(response, str) else bytes(response)
    if mechanism == "PLAIN":
        parts = raw.split(b"\x00")
        if len(parts) != 3:
            raise errors.ConnectionAccessRefused("malformed PLAIN response")
        return parts[1].decode("utf-8", "replace"), parts[2].decode("utf-8", "replace")
    if mechanism == "AMQPLAIN":
        try:
            table, _ = decode_table(struct.pack(">I", len(raw)) + raw)
        except ValueError as exc:
            raise errors.ConnectionAccessRefused(f"malformed AMQPLAIN response: {exc}") from None
        return str(table.get("LOGIN", "")), str(table.get("PASSWORD", ""))
    raise errors.ConnectionAccessRefused(f"unsupported authentication mechanism '{mechanism}'")


def connection_start(cluster_name: str, *, tls: bool) -> commands.Connection.Start:
    """connection.start as this broker sends it (a cluster follower's front too)."""
    return commands.Connection.Start(
        version_major=0,
        version_minor=9,
        server_properties={
            "product": "Lavin",
            "version": lavin.__version__,
            "platform": f"Python {platform.python_version()}",
            "information": "An AMQP 0-9-1 broker",
            "cluster_name": cluster_name,
            "capabilities": SERVER_CAPABILITIES,
        },
        mechanisms="PLAIN AMQPLAIN EXTERNAL" if tls else "PLAIN AMQPLAIN",
        locales="en_US",
    )


def _negotiate(field: str, client_value: int, minimum: int, server_value: int) -> int:
    """Check a tune-ok value the way RabbitMQ does (both limits answer 530, naming tune)."""
    if client_value != 0 and client_value < minimum:
        raise errors.NotAllowed(
            f"negotiated {field} = {client_value} is lower than the minimum allowed value ({minimum})", 10, 30
        )
    if server_value != 0 and (client_value == 0 or client_value > server_value):
        raise errors.NotAllowed(
            f"negotiated {field} = {client_value} is higher than the maximum allowed value ({server_value})", 10, 30
        )
    return client_value
