"""Base of the per-product response classes: Action name -> snake_case handler."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, ClassVar

from fleet.testing.core.errors import AliyunError, not_implemented
from fleet.testing.core.params import Params

if TYPE_CHECKING:
    from fleet.testing.cloud import FakeCloud

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def snake(action: str) -> str:
    return _CAMEL.sub("_", action).lower()


class BaseResponse:
    ACTIONS: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, cloud: FakeCloud, params: Params) -> None:
        self.cloud = cloud
        self.params = params

    def dispatch(self, action: str) -> dict[str, Any]:
        handler = getattr(self, snake(action), None)
        if handler is None:
            raise not_implemented(action)
        result = handler()
        if not isinstance(result, dict):  # pragma: no cover - a handler bug, loud
            raise AliyunError("InternalError", f"handler for {action} returned {type(result).__name__}", 500)
        return result


def page(
    items: list[Any],
    params: Params,
    default_size: int = 10,
    max_size: int = 50,
    number_key: str = "PageNumber",
    size_key: str = "PageSize",
) -> tuple[list[Any], int, int]:
    number, size = page_bounds(params, default_size, max_size, number_key, size_key)
    start = (number - 1) * size
    return items[start : start + size], number, size


def page_bounds(
    params: Params,
    default_size: int,
    max_size: int | None,
    number_key: str = "PageNumber",
    size_key: str = "PageSize",
) -> tuple[int, int]:
    """The page number (from 1) and size (1 to ``max_size``; None: no upper bound documented), or
    ``InvalidParameter``: 0 is out of range, not "the default"."""
    number = params.int(number_key, 1)
    size = params.int(size_key, default_size)
    if number < 1 or size < 1 or (max_size is not None and size > max_size):
        raise AliyunError("InvalidParameter", f"{number_key}/{size_key} out of range ({number}/{size}).", 400)
    return number, size
