"""`lavin ctl`: rabbitmqctl's commands (status; users, vhosts, permissions, limits; queues,
exchanges, bindings, connections, channels, consumers; policies; definitions), sent to a
running broker over its control socket.

The socket speaks the management API's HTTP; only the broker's own user (and root) can
open it, so no password is asked. Output and exit codes follow rabbitmqctl's: a line
saying what is done, tab-separated tables with a header (`--json`: a JSON document and
nothing else), the reason on stderr and a sysexits code when something fails.
"""

from lavin.ctl import access, cluster, diagnostics, links, objects, parameters, policies  # noqa: F401 - importing them adds their commands to the group
from lavin.ctl.group import config_file_option, ctl

__all__ = ["config_file_option", "ctl"]
