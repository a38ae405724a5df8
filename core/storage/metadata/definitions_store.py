"""Durable exchanges, queues and bindings of one vhost: an append-only log.

Each change is one record: u32 length + u32 crc32 (little-endian) + payload, the payload
an AMQP field table, so arguments of every AMQP type round-trip. `load` folds the log into
the current definitions and rewrites it when it held deletes or damage. A damaged record
is skipped and reading goes on at the next record that checks out; the file as it was is
kept aside first (`*.corrupt`), so that no rewrite loses what could not be read.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from lavin.storage import changes
from lavin.storage.changes import CHANGES
from lavin.storage.disk import fsync_directory
from lavin.storage.metadata.storable import check_name, check_value
from lavin.storage.quarantine import copy_aside
from pamqp import decode as amqp_decode
from pamqp import encode as amqp_encode

log = logging.getLogger(__name__)

_FRAME = struct.Struct("<II")  # payload length, crc32 of the payload
DEFINITIONS_FILE = "definitions.lavin"  # in each vhost's directory
DEFAULT_COMPACT_AFTER = 8192  # deletes written since the last rewrite

_EXCHANGE_DECLARE = "exchange.declare"
_EXCHANGE_DELETE = "exchange.delete"
_QUEUE_DECLARE = "queue.declare"
_QUEUE_DELETE = "queue.delete"
_BIND = "bind"
_UNBIND = "unbind"
_DELETES = frozenset((_EXCHANGE_DELETE, _QUEUE_DELETE, _UNBIND))
_OPERATIONS = frozenset((_EXCHANGE_DECLARE, _QUEUE_DECLARE, _BIND)) | _DELETES


@dataclass
class ExchangeDef:
    name: str
    type: str
    auto_delete: bool = False
    internal: bool = False
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass
class QueueDef:
    name: str
    auto_delete: bool = False
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass
class BindingDef:
    source: str
    destination: str
    destination_type: Literal["queue", "exchange"]
    routing_key: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass
class Definitions:
    exchanges: dict[str, ExchangeDef] = field(default_factory=dict)
    queues: dict[str, QueueDef] = field(default_factory=dict)
    bindings: list[BindingDef] = field(default_factory=list)  # in declaration order


def _hashable(value: Any) -> Any:
    """A hashable stand-in for an argument value; tables compare regardless of key order."""
    if isinstance(value, dict):
        return tuple(sorted((key, _hashable(item)) for key, item in value.items()))
    if isinstance(value, list):
        return tuple(_hashable(item) for item in value)
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def _encodable(value: Any) -> Any:
    """pamqp writes byte arrays only from bytearray; callers may hold bytes."""
    if isinstance(value, bytes):
        return bytearray(value)
    if isinstance(value, dict):
        return {key: _encodable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_encodable(item) for item in value]
    return value


_BindingKey = tuple[str, str, str, str, Any]
_Endpoint = tuple[str, str]  # ("exchange" | "queue", name)


class _FoldedDefinitions:
    """The definitions a sequence of records leaves behind."""

    def __init__(self) -> None:
        self.exchanges: dict[str, ExchangeDef] = {}
        self.queues: dict[str, QueueDef] = {}
        self.bindings: dict[_BindingKey, BindingDef] = {}  # insertion order = declaration order
        self._bindings_of: dict[_Endpoint, dict[_BindingKey, None]] = {}

    def changes(self, record: dict[str, Any]) -> bool:
        """Whether `apply` would change anything; changes nothing itself. KeyError for a malformed record."""
        op = record["op"]
        if op == _EXCHANGE_DECLARE:
            return self.exchanges.get(record["name"]) != _exchange_def(record)
        if op == _QUEUE_DECLARE:
            return self.queues.get(record["name"]) != _queue_def(record)
        if op == _EXCHANGE_DELETE:
            return record["name"] in self.exchanges or ("exchange", record["name"]) in self._bindings_of
        if op == _QUEUE_DELETE:
            return record["name"] in self.queues or ("queue", record["name"]) in self._bindings_of
        if op not in (_BIND, _UNBIND):
            raise KeyError(f"unknown operation {op!r}")
        unbinding: bool = op == _UNBIND
        return (self._key(_binding_def(record)) in self.bindings) == unbinding

    def apply(self, record: dict[str, Any]) -> bool:
        """Apply one record; False when it changes nothing. KeyError for a malformed one."""
        op = record["op"]
        if op == _EXCHANGE_DECLARE:
            exchange = _exchange_def(record)
            if self.exchanges.get(exchange.name) == exchange:
                return False
            self.exchanges[exchange.name] = exchange
            return True
        if op == _QUEUE_DECLARE:
            queue = _queue_def(record)
            if self.queues.get(queue.name) == queue:
                return False
            self.queues[queue.name] = queue
            return True
        if op == _EXCHANGE_DELETE:
            existed = self.exchanges.pop(record["name"], None) is not None
            return self._drop_bindings_of(("exchange", record["name"])) or existed
        if op == _QUEUE_DELETE:
            existed = self.queues.pop(record["name"], None) is not None
            return self._drop_bindings_of(("queue", record["name"])) or existed
        binding = _binding_def(record)
        key = self._key(binding)
        if op == _BIND:
            if key in self.bindings:
                return False
            self.bindings[key] = binding
            self._bindings_of.setdefault(("exchange", binding.source), {})[key] = None
            self._bindings_of.setdefault((binding.destination_type, binding.destination), {})[key] = None
            return True
        if op == _UNBIND:
            return self._drop_binding(key)
        raise KeyError(f"unknown operation {op!r}")

    def snapshot(self) -> Definitions:
        return Definitions(dict(self.exchanges), dict(self.queues), list(self.bindings.values()))

    def records(self) -> list[dict[str, Any]]:
        """Declares that rebuild these definitions: exchanges, queues, then bindings."""
        return (
            [_exchange_record(exchange) for exchange in self.exchanges.values()]
            + [_queue_record(queue) for queue in self.queues.values()]
            + [_binding_record(_BIND, binding) for binding in self.bindings.values()]
        )

    @staticmethod
    def _key(binding: BindingDef) -> _BindingKey:
        return (
            binding.source,
            binding.destination,
            binding.destination_type,
            binding.routing_key,
            _hashable(binding.arguments),
        )

    def _drop_binding(self, key: _BindingKey) -> bool:
        binding = self.bindings.pop(key, None)
        if binding is None:
            return False
        for endpoint in (("exchange", binding.source), (binding.destination_type, binding.destination)):
            keys = self._bindings_of.get(endpoint)
            if keys is not None:
                keys.pop(key, None)
                if not keys:
                    del self._bindings_of[endpoint]
        return True

    def _drop_bindings_of(self, endpoint: _Endpoint) -> bool:
        keys = list(self._bindings_of.get(endpoint, ()))
        for key in keys:
            self._drop_binding(key)
        return bool(keys)


def _exchange_def(record: dict[str, Any]) -> ExchangeDef:
    return ExchangeDef(record["name"], record["type"], record["auto_delete"], record["internal"], record["arguments"])


def _queue_def(record: dict[str, Any]) -> QueueDef:
    return QueueDef(record["name"], record["auto_delete"], record["arguments"])


def _binding_def(record: dict[str, Any]) -> BindingDef:
    return BindingDef(
        record["source"], record["destination"], record["destination_type"], record["routing_key"], record["arguments"]
    )


def check_definition(definition: ExchangeDef | QueueDef | BindingDef) -> None:
    """UnstorableValue, naming the object, unless the log can hold `definition`: called
    before the object is created, so that a definition that cannot be written changes nothing."""
    if isinstance(definition, BindingDef):
        what = f"binding of {definition.destination_type} '{definition.destination}' to exchange '{definition.source}'"
        check_name(definition.source, "source exchange name")
        check_name(definition.destination, f"{definition.destination_type} name")
        check_name(definition.routing_key, f"routing key of {what}")
    else:
        kind = "exchange" if isinstance(definition, ExchangeDef) else "queue"
        check_name(definition.name, f"{kind} name")
        what = f"{kind} '{definition.name}'"
        if isinstance(definition, ExchangeDef):
            check_name(definition.type, f"type of {what}")
    check_value(definition.arguments, f"arguments of {what}", field_table=True)


def _exchange_record(exchange: ExchangeDef) -> dict[str, Any]:
    return {
        "op": _EXCHANGE_DECLARE,
        "name": exchange.name,
        "type": exchange.type,
        "auto_delete": exchange.auto_delete,
        "internal": exchange.internal,
        "arguments": exchange.arguments,
    }


def _queue_record(queue: QueueDef) -> dict[str, Any]:
    return {
        "op": _QUEUE_DECLARE,
        "name": queue.name,
        "auto_delete": queue.auto_delete,
        "arguments": queue.arguments,
    }


def _binding_record(op: str, binding: BindingDef) -> dict[str, Any]:
    return {
        "op": op,
        "source": binding.source,
        "destination": binding.destination,
        "destination_type": binding.destination_type,
        "routing_key": binding.routing_key,
        "arguments": binding.arguments,
    }


def _read_frame(data: bytes, offset: int) -> dict[str, Any] | str:
    """The record of the frame at `offset`, or what is wrong with the frame."""
    if offset + _FRAME.size > len(data):
        return "truncated"
    length, crc = _FRAME.unpack_from(data, offset)
    payload = data[offset + _FRAME.size : offset + _FRAME.size + length]
    if len(payload) < length:
        return "truncated"
    if zlib.crc32(payload) != crc:
        return "corrupt"
    try:
        _, record = amqp_decode.field_table(payload)
    except (ValueError, KeyError, TypeError) as exc:
        return f"unreadable ({exc})"
    if record.get("op") not in _OPERATIONS:
        return f"unreadable (operation {record.get('op')!r})"
    return record


def _next_readable_frame(data: bytes, start: int) -> int | None:
    """Where the first frame at or after `start` that checks out begins: reading resumes
    there after damage. None when no frame does."""
    for offset in range(start, len(data) - _FRAME.size + 1):
        if offset + _FRAME.size + _FRAME.unpack_from(data, offset)[0] > len(data):
            continue  # most positions end here, before any crc
        if not isinstance(_read_frame(data, offset), str):
            return offset
    return None


def _frame(record: dict[str, Any]) -> bytes:
    payload = amqp_encode.field_table(_encodable(record))
    return _FRAME.pack(len(payload), zlib.crc32(payload)) + payload


class DefinitionsStore:
    """The definitions log at `path`. Call `load` once before recording changes; every
    change is on disk (fsynced) when its method returns."""

    def __init__(self, path: Path, compact_after: int = DEFAULT_COMPACT_AFTER) -> None:
        self.path = path
        self.compact_after = compact_after
        self._folded = _FoldedDefinitions()
        self._deletes = 0  # delete records in the file
        self._fd = -1

    def load(self) -> Definitions:
        """Read the log; rewrite it compactly when it held deletes or damage."""
        data, offset, read, damage = self._fold()
        if offset < len(data):  # the broker stopped while appending the last record
            log.warning("%s: truncated record at byte %d; ignoring it", self.path, offset)
        if damage:
            log.error(
                "%s: %d damaged stretch(es) skipped (%s); %d record(s) read before the damage and %d after; "
                "the file as it was is kept as %s",
                self.path,
                len(damage),
                "; ".join(damage),
                read[0],
                sum(read[1:]),
                copy_aside(self.path).name,
            )
        self.close()
        if offset < len(data) or damage or self._deletes:
            self._compact()
        else:
            self._open_for_append()
        return self._folded.snapshot()

    def read(self) -> Definitions:
        """The definitions in the log, read without writing anything (no rewrite, nothing
        opened for appends): a follower's view of a log that its replication keeps
        extending, where a record being appended is not there yet. Damage is passed over."""
        self._fold()
        return self._folded.snapshot()

    def _fold(self) -> tuple[bytes, int, list[int], list[str]]:
        """Fold the log into the definitions, passing over damage; write nothing. Returns the
        log, where its truncated last record starts (else its end), the records read before
        the first damage and after each, and the damage."""
        self._folded = _FoldedDefinitions()
        self._deletes = 0
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = b""
        offset = 0
        read = [0]
        damage: list[str] = []
        while offset < len(data):
            problem = self._apply_frame(data, offset)
            if not problem:
                read[-1] += 1
                offset += _FRAME.size + _FRAME.unpack_from(data, offset)[0]
                continue
            resume = _next_readable_frame(data, offset + 1)
            if resume is None and problem == "truncated":
                break
            end = len(data) if resume is None else resume
            damage.append(f"{problem} record at byte {offset}, {end - offset} bytes")
            read.append(0)
            offset = end
        return data, offset, read, damage

    def exchange_declared(self, exchange: ExchangeDef) -> None:
        check_definition(exchange)
        self._record(_exchange_record(exchange))

    def exchange_deleted(self, name: str) -> None:
        """Forget an exchange and every binding from or to it."""
        self._record({"op": _EXCHANGE_DELETE, "name": name})

    def queue_declared(self, queue: QueueDef) -> None:
        check_definition(queue)
        self._record(_queue_record(queue))

    def queue_deleted(self, name: str) -> None:
        """Forget a queue and every binding to it."""
        self._record({"op": _QUEUE_DELETE, "name": name})

    def bound(self, binding: BindingDef) -> None:
        check_definition(binding)
        self._record(_binding_record(_BIND, binding))

    def unbound(self, binding: BindingDef) -> None:
        check_definition(binding)
        self._record(_binding_record(_UNBIND, binding))

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _apply_frame(self, data: bytes, offset: int) -> str:
        """Apply the record at `offset`; what is wrong with it, or "" when nothing is."""
        record = _read_frame(data, offset)
        if isinstance(record, str):
            return record
        try:
            self._folded.apply(record)
        except (ValueError, KeyError, TypeError) as exc:
            return f"unreadable ({exc})"
        if record["op"] in _DELETES:
            self._deletes += 1
        return ""

    def _record(self, record: dict[str, Any]) -> None:
        """Append `record`, then fold it in: when the write fails (OSError) the file is cut
        back to where it was and the definitions are as they were."""
        if self._fd < 0:
            raise RuntimeError("DefinitionsStore.load() must run before changes are recorded")
        frame = _frame(record)  # TypeError for a value AMQP cannot carry, before any change
        if not self._folded.changes(record):
            return
        size = os.fstat(self._fd).st_size
        try:
            unwritten = memoryview(frame)
            while unwritten:  # a write may store part: the next one says why it stopped
                unwritten = unwritten[os.write(self._fd, unwritten) :]
            os.fsync(self._fd)
        except OSError:
            os.ftruncate(self._fd, size)
            raise
        sink = CHANGES.sink
        if sink is not None:
            sink.written(self.path, size, frame)
        self._folded.apply(record)
        if record["op"] in _DELETES:
            self._deletes += 1
            if self._deletes >= self.compact_after:
                self.close()
                try:
                    self._compact()
                except OSError as exc:  # the delete is recorded: keep appending to the long log
                    log.error("%s: cannot rewrite the log compactly: %s", self.path, exc)
                    self._open_for_append()

    def _compact(self) -> None:
        """Replace the log with the declares of the current definitions, atomically."""
        temporary = self.path.with_name(self.path.name + ".tmp")
        try:
            data = b"".join(_frame(record) for record in self._folded.records())
            with open(temporary, "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            changes.install(temporary, self.path, data)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        fsync_directory(self.path.parent)
        self._deletes = 0
        self._open_for_append()

    def _open_for_append(self) -> None:
        created = not self.path.exists()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        if created:
            fsync_directory(self.path.parent)
            sink = CHANGES.sink
            if sink is not None:
                sink.written(self.path, 0, b"")  # creates the empty log
