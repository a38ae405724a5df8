"""RabbitMQ's query parameters for list endpoints: `sort` / `sort_reverse` (a dotted key),
`columns` (dotted keys to keep), and pagination with `page`, `page_size`, `name` and
`use_regex`, which answers `{items, page, page_count, page_size, filtered_count,
item_count, total_count}` instead of a bare list."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

from aiohttp import web
from lavin.api.patterns import Pattern, PatternError
from lavin.management.http.replies import reply
from lavin.management.shapes.access import BadRequest

DEFAULT_PAGE_SIZE: Final = 100
MAX_PAGE_SIZE: Final = 500

Item = dict[str, Any]


async def list_reply(request: web.Request, items: Sequence[Item]) -> web.Response:
    """The reply to a GET of a list, shaped by the request's query parameters."""
    return reply(await shape_list(request.query, items))


async def shape_list(query: Mapping[str, str], items: Sequence[Item]) -> list[Item] | dict[str, Any]:
    ordered = _sorted(items, query.get("sort"), _flag(query, "sort_reverse"))
    columns = [column for column in query.get("columns", "").split(",") if column]
    if "page" not in query:
        return [_columns(item, columns) for item in ordered]
    page = _positive(query, "page", 1)
    page_size = _positive(query, "page_size", DEFAULT_PAGE_SIZE)
    if page_size > MAX_PAGE_SIZE:
        raise BadRequest(f"page_size must be between 1 and {MAX_PAGE_SIZE}")
    filtered = await _filtered(ordered, query.get("name", ""), _flag(query, "use_regex"))
    page_count = max(1, math.ceil(len(filtered) / page_size))
    if page > page_count:
        raise BadRequest(f"page out of range: {page} of {page_count}")
    chosen = filtered[(page - 1) * page_size : page * page_size]
    return {
        "filtered_count": len(filtered),
        "item_count": len(chosen),
        "items": [_columns(item, columns) for item in chosen],
        "page": page,
        "page_count": page_count,
        "page_size": page_size,
        "total_count": len(items),
    }


def _flag(query: Mapping[str, str], key: str) -> bool:
    return query.get(key, "false").lower() == "true"


def _positive(query: Mapping[str, str], key: str, default: int) -> int:
    text = query.get(key)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise BadRequest(f"{key} must be a positive integer, got '{text}'") from None
    if value < 1:
        raise BadRequest(f"{key} must be a positive integer, got '{text}'")
    return value


def dotted(item: Mapping[str, Any], key: str) -> Any:
    """`item["a"]["b"]` for key "a.b"; None where a level is missing."""
    value = _lookup(item, key)
    return None if value is _MISSING else value


_MISSING: Final = object()


def _lookup(item: Mapping[str, Any], key: str) -> Any:
    """`item["a"]["b"]` for key "a.b"; _MISSING where a level is missing."""
    value: Any = item
    for part in key.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _sorted(items: Sequence[Item], key: str | None, reverse: bool) -> list[Item]:
    if not key:
        return list(reversed(items)) if reverse else list(items)

    def order(item: Item) -> tuple[int, Any]:
        value = dotted(item, key)
        if value is None:
            return (0, "")  # missing values first, as RabbitMQ sorts them
        if isinstance(value, bool | int | float):
            return (1, value)
        return (2, str(value))

    return sorted(items, key=order, reverse=reverse)


async def _filtered(items: list[Item], name: str, use_regex: bool) -> list[Item]:
    if not name:
        return items
    if use_regex:
        try:
            pattern = Pattern(name)
        except PatternError as exc:
            raise BadRequest(str(exc)) from None
        matched = await pattern.matching(_name(item) for item in items)
        return [item for item in items if _name(item) in matched]
    return [item for item in items if name in _name(item)]


def _name(item: Item) -> str:
    return str(item.get("name", ""))


def _columns(item: Item, columns: list[str]) -> Item:
    if not columns:
        return item
    kept: Item = {}
    for column in columns:
        value = _lookup(item, column)
        if value is _MISSING:
            continue
        target = kept
        *parents, last = column.split(".")
        for parent in parents:
            target = target.setdefault(parent, {})
        target[last] = value
    return kept
