"""`policies.json` in a vhost's directory (its policies, operator policies and runtime
parameters) and `global_parameters.json` in the data dir, as RabbitMQ's JSON:

```
policies.json           {"policies": [{"vhost": "/", "name": "ttl", "pattern": "^q", "apply-to": "queues",
                                       "definition": {"message-ttl": 60000}, "priority": 0}],
                         "operator_policies": [...],
                         "parameters": [{"vhost": "/", "component": "shovel", "name": "s1", "value": {...}}]}
global_parameters.json  [{"name": "cluster_name", "value": "lavin@host"}]
```

Each file is rewritten whole on every change, atomically (lavin.storage.metadata.access_files). This
module reads the JSON; what the entries mean is checked by lavin.broker.policy.policies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from lavin.config import StartupError
from lavin.storage.metadata.access_files import read_json_document, write_json_atomically

POLICIES_FILE: Final = "policies.json"
GLOBAL_PARAMETERS_FILE: Final = "global_parameters.json"


class PolicyFileError(StartupError):
    """policies.json or global_parameters.json cannot be read or holds something invalid."""


def read_json_file(path: Path) -> Any:
    """The file's JSON; None when there is no file."""
    return read_json_document(path, PolicyFileError, None)


def write_json_file(path: Path, document: object) -> None:
    write_json_atomically(path, document)
