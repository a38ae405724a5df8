"""The client side of `lavin ctl`: HTTP requests to the management API over the broker's
control socket, rabbitmqctl's errors and exit codes, and its table output."""

from __future__ import annotations

import html
import http.client
import json
import socket
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import click

# sysexits.h, as rabbitmqctl uses them.
EX_USAGE = 64
EX_DATAERR = 65
EX_NOUSER = 67
EX_UNAVAILABLE = 69
EX_SOFTWARE = 70
EX_NOPERM = 77
EX_CONFIG = 78
TIMEOUT = 60.0


class CtlError(click.ClickException):
    """A failed command: rabbitmqctl's `Error:` and the reason on stderr, and its exit code."""

    exit_code = EX_DATAERR

    def show(self, file: Any = None) -> None:
        click.echo(f"Error:\n{self.format_message()}", err=True)


class BadUsage(CtlError):
    exit_code = EX_USAGE


class BrokerUnavailable(CtlError):
    exit_code = EX_UNAVAILABLE


class NoPermission(CtlError):
    exit_code = EX_NOPERM


class BrokerFailed(CtlError):
    """The broker could not do it, or the object exists already."""

    exit_code = EX_SOFTWARE


class BadConfig(CtlError):
    exit_code = EX_CONFIG


class NoSuchUser(CtlError):
    exit_code = EX_NOUSER

    def __init__(self, name: str) -> None:
        super().__init__(f'User "{name}" does not exist')


class NoSuchVHost(CtlError):
    def __init__(self, name: str) -> None:
        super().__init__(f'Virtual host "{name}" does not exist')


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, socket_path: Path) -> None:
        super().__init__("localhost", timeout=TIMEOUT)
        self.socket_path = socket_path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # closed by close(), also on failure
        self.sock.settimeout(self.timeout)
        self.sock.connect(str(self.socket_path))


class Response:
    def __init__(self, status: int, body: bytes) -> None:
        self.status = status
        self.body = body

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def reason(self) -> str:
        """The error's reason as rabbitmqctl prints it: RabbitMQ's API escapes HTML in reasons."""
        try:
            text = str(self.json().get("reason", self.body.decode(errors="replace")))
        except (ValueError, AttributeError):
            text = self.body.decode(errors="replace") or f"HTTP {self.status}"
        return html.unescape(text).strip()


class ControlClient:
    """Requests to the broker's management API over its control socket."""

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        raw_body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        connection = _UnixHTTPConnection(self.socket_path)
        payload = raw_body if raw_body is not None else None if body is None else json.dumps(body).encode()
        try:
            connection.request(
                method, path, body=payload, headers={"Content-Type": "application/json", **(headers or {})}
            )
            response = connection.getresponse()
            return Response(response.status, response.read())
        except (FileNotFoundError, ConnectionRefusedError):
            raise BrokerUnavailable(
                f"unable to connect to the broker at {self.socket_path}: no broker listens there. "
                "Is it running, and is this its data dir (--data-dir) or socket (--socket)?"
            ) from None
        except PermissionError:
            raise NoPermission(f"no permission to open {self.socket_path}: run as the broker's user or root") from None
        except OSError as exc:
            raise BrokerUnavailable(f"lost the broker at {self.socket_path}: {exc}") from None
        finally:
            connection.close()

    def get(self, path: str) -> Response:
        return self.request("GET", path)

    def expect(self, response: Response, not_found: CtlError | None = None) -> Response:
        """The response when it succeeded; `not_found` for a 404; CtlError with the reason otherwise."""
        if response.ok:
            return response
        if response.status == 404 and not_found is not None:
            raise not_found
        raise (CtlError if response.status < 500 else BrokerFailed)(response.reason)


def path(*parts: str, query: Mapping[str, str] | None = None) -> str:
    joined = "/api/" + "/".join(quote(part, safe="") for part in parts)
    return f"{joined}?{urlencode(query)}" if query else joined


class Session:
    """What every `lavin ctl` command needs: the client, whether to be quiet, and whether
    to print JSON (which also silences the "Listing ..." lines, so stdout parses)."""

    def __init__(self, socket_path: Path, quiet: bool) -> None:
        self.client = ControlClient(socket_path)
        self.quiet = quiet
        self.as_json = False
        self.table_headers = True

    def info(self, line: str) -> None:
        if not self.quiet and not self.as_json:
            click.echo(line)

    def show(self, columns: Sequence[str], records: Iterable[Mapping[str, Any]]) -> None:
        """Records as a table with a header row, or as a JSON list of objects with `--json`."""
        if self.as_json:
            click.echo(json.dumps([{column: record.get(column) for column in columns} for record in records]))
            return
        if self.table_headers:
            click.echo("\t".join(columns))
        for record in records:
            click.echo("\t".join(cell(record.get(column)) for column in columns))

    def user(self, name: str) -> dict[str, Any]:
        response = self.client.expect(self.client.get(path("users", name)), NoSuchUser(name))
        user: dict[str, Any] = response.json()
        return user

    def check_vhost(self, name: str) -> None:
        self.client.expect(self.client.get(path("vhosts", name)), NoSuchVHost(name))

    def check_user_and_vhost(self, user: str, vhost: str) -> None:
        """The error RabbitMQ names the missing one in, rather than the API's vhost_or_user_not_found."""
        self.user(user)
        self.check_vhost(vhost)


def json_object(text: str, what: str, example: str) -> dict[str, Any]:
    """An argument that must be a JSON object (vhost limits, a policy's definition)."""
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise CtlError(f"{what} must be a JSON object, such as '{example}', not {text}")
    return parsed


def cell(value: Any) -> str:
    """A value as rabbitmqctl's table shows it: names as they are, lists of names in brackets,
    booleans in lower case, tables (arguments, definitions) as compact JSON, nothing for none."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return "[" + ", ".join(value) + "]"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)
