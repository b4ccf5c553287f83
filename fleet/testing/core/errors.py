"""Errors as data: the real wire code, message and HTTP status, so the real SDK raises its own exception."""

from __future__ import annotations


class AliyunError(Exception):
    """An API error answered as ``{"Code", "Message", "RequestId"}`` with ``status`` as the HTTP status."""

    def __init__(self, code: str, message: str, status: int = 400, retry_after_ms: int | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        # Sent as the ``x-acs-retry-after`` header; the SDK reads it as milliseconds (darabonba sleeps ms).
        self.retry_after_ms = retry_after_ms


def not_found(code: str, what: str) -> AliyunError:
    return AliyunError(code, f"The specified {what} does not exist.", 404)


def invalid(message: str, code: str = "InvalidParameter") -> AliyunError:
    return AliyunError(code, message, 400)


def missing(name: str) -> AliyunError:
    return AliyunError(
        f"MissingParameter.{name}" if name else "MissingParameter",
        f'The input parameter "{name}" that is mandatory for processing this request is not supplied.',
        400,
    )


def not_implemented(what: str) -> AliyunError:
    # HTTP 400 (a ClientException), not 5xx: callers must not retry something the fake will never answer.
    return AliyunError("NotImplemented", f"fleet.testing fake Alibaba Cloud: {what} is not faked", 400)
