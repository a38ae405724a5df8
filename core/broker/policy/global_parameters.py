"""Global runtime parameters (`{name, value}`, any JSON value), stored for plugins in the
data dir's `global_parameters.json` and exported with the definitions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lavin.broker.policy.policy_rules import validation_failed
from lavin.storage.metadata.policy_files import GLOBAL_PARAMETERS_FILE, PolicyFileError, read_json_file, write_json_file
from lavin.storage.metadata.storable import UnstorableValue, check_value


class GlobalParameters:
    """`broker.global_parameters`."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / GLOBAL_PARAMETERS_FILE
        self.values: dict[str, Any] = {}

    def load(self) -> None:
        """A file that cannot be read or is not a list of `{name, value}` stops start-up."""
        document = read_json_file(self.path)
        if document is None:
            return
        if not isinstance(document, list) or not all(
            isinstance(entry, dict) and isinstance(entry.get("name"), str) and "value" in entry for entry in document
        ):
            raise PolicyFileError(f"{self.path} must be a list of {{name, value}} objects")
        self.values = {entry["name"]: entry["value"] for entry in document}

    def to_json(self) -> list[dict[str, Any]]:
        return [{"name": name, "value": value} for name, value in self.values.items()]

    def set(self, name: str, value: Any) -> bool:
        """True when new; written before it takes effect. PolicyError (400) for a value the
        file cannot hold."""
        try:
            check_value(name, "global parameter name")
            check_value(value, f"value of global parameter '{name}'")
        except UnstorableValue as exc:
            raise validation_failed([str(exc)]) from None
        created = name not in self.values
        self._save({**self.values, name: value})
        return created

    def delete(self, name: str) -> bool:
        if name not in self.values:
            return False
        self._save({key: value for key, value in self.values.items() if key != name})
        return True

    def _save(self, values: dict[str, Any]) -> None:
        write_json_file(self.path, [{"name": name, "value": value} for name, value in values.items()])
        self.values = values
