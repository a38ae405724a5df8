"""The operator's commands run when this node becomes leader or stops being it (LavinMQ's
`on_leader_elected` / `on_leader_lost`): moving a virtual IP, telling a load balancer."""

from __future__ import annotations

import asyncio
import logging
from typing import Final

log = logging.getLogger(__name__)

HOOK_TIMEOUT: Final = 30.0
_running: set[asyncio.Task[None]] = set()  # kept referenced until they finish


def run_hook(command: str | None, what: str) -> None:
    """Start `command` in a shell and go on; its outcome is logged."""
    if command:
        task = asyncio.ensure_future(_run(command, what))
        _running.add(task)
        task.add_done_callback(_running.discard)


async def _run(command: str, what: str) -> None:
    try:
        process = await asyncio.create_subprocess_shell(command)
    except OSError as exc:
        log.error("%s command could not start: %s", what, exc)
        return
    try:
        code = await asyncio.wait_for(process.wait(), HOOK_TIMEOUT)
    except TimeoutError:
        process.kill()
        log.error("%s command ran longer than %g s and was killed", what, HOOK_TIMEOUT)
        return
    if code != 0:
        log.error("%s command exited with %s", what, code)
    else:
        log.info("%s command done", what)
