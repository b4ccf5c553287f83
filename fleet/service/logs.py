"""The service's log lines: plain or JSON on stderr, with known secrets redacted whatever code logged them."""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from collections.abc import Hashable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from fleet.cloud.retry import RETRY_MESSAGE
from fleet.config import FleetConfig


class JsonFormatter(logging.Formatter):
    """One JSON object per line, with the structured fields the service attaches (``extra=``)."""

    _EXTRA = ("decision_id", "request_id", "outcome", "leader", "epoch")

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key in self._EXTRA:
            if hasattr(record, key):
                data[key] = getattr(record, key)
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


class Redact(logging.Filter):
    """Last line of defence: known secret values never reach a log line, whatever code logged them."""

    def __init__(self, secrets: list[str]) -> None:
        super().__init__()
        # Every secret, however short: a short one mangles a few log lines, a leaked one is leaked. Longest
        # first, so a secret that contains another is masked whole.
        self.secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def filter(self, record: logging.LogRecord) -> bool:
        if self.secrets:
            msg = record.getMessage()
            if any(s in msg for s in self.secrets):
                for s in self.secrets:
                    msg = msg.replace(s, "***")
                record.msg, record.args = msg, None
        return True


@dataclass(frozen=True)
class Verdict:
    """What to do with one occurrence of a repeating event: write it or hold it back; when written, whether it
    starts anew (nothing of its kind within the interval before it) and how many were held back since
    ``since`` (the last one written)."""

    write: bool
    new: bool = True
    held: int = 0
    since: float = 0.0


class HeldBack:
    """Per key, which occurrences of a repeating event to write: the first, then at most one every ``every_s``
    (carrying how many were held back); after ``every_s`` with none, the next is new. Times are seconds."""

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self._state: dict[Hashable, tuple[float, int, float]] = {}  # key -> (written at, held, last seen)
        self._lock = threading.Lock()

    def seen(self, key: Hashable, t: float) -> Verdict:
        with self._lock:
            state = self._state.get(key)
            if state is not None and t - state[0] < self.every_s:
                self._state[key] = (state[0], state[1] + 1, t)
                return Verdict(write=False)
            self._state[key] = (t, 0, t)
        if state is None:
            return Verdict(write=True)
        written_at, held, last = state
        return Verdict(write=True, new=t - last > self.every_s, held=held, since=written_at)


class RepeatedRetries(logging.Filter):
    """Holds back the adapters' retry lines that repeat: the first retry of an (product, Action, error code)
    is written, then at most one every ``every_s`` saying how many were held back. During an outage every
    read of every tick retries a few times (a one-hour CloudMonitor outage: thousands of lines). Only the
    written output is thinned: the ``fleet.cloud`` logger's own handlers (the retried-error counter of
    ``/metrics``) see every record before it reaches this filter on the root handler."""

    def __init__(self, every_s: float = 300.0) -> None:
        super().__init__()
        self.held = HeldBack(every_s)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name != "fleet.cloud" or record.msg != RETRY_MESSAGE or not isinstance(record.args, tuple):
            return True
        product, action = record.args[0], record.args[1]
        exc = record.args[4] if len(record.args) > 4 else None
        verdict = self.held.seen((product, action, getattr(exc, "code", None)), record.created)
        if verdict.write and verdict.held:
            since = datetime.fromtimestamp(verdict.since, UTC).isoformat()
            record.msg = f"{record.getMessage()} ({verdict.held} like it since {since} not logged)"
            record.args = None
        return verdict.write


def setup_logging(json_logs: bool, level: str, secrets: list[str]) -> None:
    """Route every logger to stderr, plain or JSON, through the redacting filter."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter() if json_logs else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    handler.addFilter(RepeatedRetries())
    handler.addFilter(Redact(secrets))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Per-request chatter of the HTTP stack is noise at INFO.
    for noisy in ("apscheduler", "urllib3", "uvicorn.access", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def config_secrets(config: FleetConfig, token: str | None) -> list[str]:
    """The secret values a log line must never show: the API token, channel secrets, cloud credentials."""
    out = [token or ""]
    for item in config.notifications:
        out.append(item.secret.get_secret_value() if item.secret is not None else "")
    for g in config.groups:  # a Prometheus source's basic-auth password and bearer token
        source = g.metrics_source
        out.append(urlsplit(source.url).password or "" if source.url else "")
        out.append(os.environ.get(source.bearer_token_env, "") if source.bearer_token_env else "")
    for var in ("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "ALIBABA_CLOUD_SECURITY_TOKEN", "FLEET_API_TOKEN"):
        out.append(os.environ.get(var, ""))
    return out
