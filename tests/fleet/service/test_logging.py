"""The service's logs: JSON lines when asked, and no configured secret in any line."""

from __future__ import annotations

import json
import logging

from fleet.cloud.errors import CloudError
from fleet.cloud.retry import RETRY_MESSAGE
from fleet.service.logs import JsonFormatter, Redact, RepeatedRetries


def _record(msg, *args, **extra):
    rec = logging.LogRecord("fleet.service", logging.INFO, __file__, 1, msg, args, None)
    for k, v in extra.items():
        setattr(rec, k, v)
    return rec


def test_json_formatter_writes_one_object_with_action_fields():
    line = JsonFormatter().format(
        _record("chat %s -> %s", "scale_to", "applied", decision_id="chat:scale:0", outcome="applied")
    )
    data = json.loads(line)
    assert data["msg"] == "chat scale_to -> applied"
    assert (data["decision_id"], data["outcome"], data["level"]) == ("chat:scale:0", "applied", "info")


def test_redact_replaces_configured_secrets_in_the_message():
    rec = _record("calling with token %s", "tok-SECRET-1")
    Redact(["tok-SECRET-1"]).filter(rec)
    assert "tok-SECRET-1" not in rec.getMessage() and "***" in rec.getMessage()


def test_redact_ignores_empty_values():
    rec = _record("a b c")
    Redact([""]).filter(rec)
    assert rec.getMessage() == "a b c"


def test_redact_masks_short_secrets_too():
    """Issue 14: a 3-character secret was skipped; a mangled log line is better than a leaked secret."""
    rec = _record("robot secret is %s", "s3x")
    Redact(["s3x"]).filter(rec)
    assert "s3x" not in rec.getMessage()


def test_redact_masks_a_secret_containing_another_whole():
    rec = _record("token abcdef-long")
    Redact(["abc", "abcdef-long"]).filter(rec)
    assert rec.getMessage() == "token ***"


def _retry_record(created: float, action: str = "DescribeMetricLast", code: str = "ServiceUnavailable"):
    exc = CloudError(code, "down", action=action)
    args = ("cms", action, 2, 5, exc, 0.5)
    record = logging.LogRecord("fleet.cloud", logging.WARNING, __file__, 1, RETRY_MESSAGE, args, None)
    record.created = created
    return record


def test_repeated_retry_lines_are_written_once_then_every_five_minutes_with_the_count():
    held = RepeatedRetries(every_s=300.0)
    written = [r for r in (_retry_record(15.0 * k) for k in range(80)) if held.filter(r)]  # 20 minutes
    assert [r.created for r in written] == [0.0, 300.0, 600.0, 900.0]
    assert written[0].getMessage().startswith("cms DescribeMetricLast failed (attempt 2/5)")
    assert all("(19 like it since" in r.getMessage() for r in written[1:])
    # another Action, another code, another logger's line: each passes on its own
    assert held.filter(_retry_record(1200.0, action="DescribeMetricList"))
    assert held.filter(_retry_record(1200.0, code="Throttling.User"))
    other = logging.LogRecord("fleet.service", logging.WARNING, __file__, 1, "tick failed", None, None)
    assert held.filter(other) and held.filter(other)
