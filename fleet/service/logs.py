"""The service's log lines: plain or JSON on stderr, with known secrets redacted whatever code logged them."""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import UTC, datetime
from typing import Any

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


def setup_logging(json_logs: bool, level: str, secrets: list[str]) -> None:
    """Route every logger to stderr, plain or JSON, through the redacting filter."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter() if json_logs else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
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
    for var in ("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "ALIBABA_CLOUD_SECURITY_TOKEN", "FLEET_API_TOKEN"):
        out.append(os.environ.get(var, ""))
    return out
