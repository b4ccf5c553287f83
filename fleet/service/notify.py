"""Notifications to people: a generic webhook and the DingTalk, WeCom and Feishu group robots.

The tick only enqueues; one background thread delivers, retrying failures with exponential backoff, so a
slow or broken receiver never delays a decision. Formats and signing follow each vendor's custom-robot docs:

- DingTalk: ``timestamp`` in ms; ``sign = base64(HMAC-SHA256(key=secret, msg=f"{timestamp}\\n{secret}"))``,
  both appended to the webhook URL as query parameters; success is ``errcode == 0``.
- Feishu: ``timestamp`` in s; ``sign = base64(HMAC-SHA256(key=f"{timestamp}\\n{secret}", msg=b""))`` in the
  body; success is ``code == 0`` (older robots answer ``StatusCode == 0``).
- WeCom: the key is part of the URL and there is no signing; success is ``errcode == 0``.

URLs of robots carry their access token, so logs name only the channel type and host, never the URL or secret.
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import heapq
import hmac
import itertools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote_plus, urlsplit

import requests
import urllib3

log = logging.getLogger(__name__)

CHANNEL_TYPES = ("webhook", "dingtalk", "wecom", "feishu")
# Robots answer a few dozen bytes of JSON; an answer is read up to this much (nothing bigger is held).
MAX_ANSWER_BYTES = 64 * 1024
READ_CHUNK_BYTES = 4096


class AnswerTooSlow(Exception):
    """The receiver took longer than the delivery's timeout to answer in full."""


@dataclass(frozen=True)
class Announcement:
    """What people should know: a scale action, an incident, an SLA at risk or breached, the breaker."""

    # scale | scale_failure | incident | sla_risk | sla_breach | breaker | launch | lease | capacity | group
    kind: str
    title: str
    text: str
    severity: str = "info"  # info | warning | critical
    group: str | None = None
    incident_id: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Channel:
    """One configured receiver (config key ``notifications``: ``{type, url, secret}``)."""

    type: str
    url: str
    secret: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.type not in CHANNEL_TYPES:
            raise ValueError(f"notification type {self.type!r} is not one of {', '.join(CHANNEL_TYPES)}")

    @property
    def label(self) -> str:
        """Safe to log: the type and host, never the token-bearing URL."""
        return f"{self.type}@{urlsplit(self.url).hostname or '?'}"

    @classmethod
    def from_config(cls, item: Any) -> Channel:
        """From a config model or a plain mapping; a pydantic SecretStr secret is unwrapped here only."""
        get = item.get if isinstance(item, dict) else lambda k, d=None: getattr(item, k, d)
        secret = get("secret", None)
        if secret is not None and hasattr(secret, "get_secret_value"):
            secret = secret.get_secret_value()
        kind = get("type")
        return cls(type=str(getattr(kind, "value", kind)), url=str(get("url")), secret=secret)


def dingtalk_sign(secret: str, timestamp_ms: int) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp_ms}\n{secret}".encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def feishu_sign(secret: str, timestamp_s: int) -> str:
    digest = hmac.new(f"{timestamp_s}\n{secret}".encode(), b"", hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def _details(note: Announcement) -> list[str]:
    """The note's fields, one ``- key: value`` line each, with its incident id (what an on-call engineer types
    into `fleet incidents ack`) when no field carries it."""
    fields = dict(note.fields)
    if note.incident_id and note.incident_id not in {str(v) for v in fields.values()}:
        fields["incident"] = note.incident_id
    return [f"- {key}: {value}" for key, value in fields.items()]


def _markdown(note: Announcement) -> str:
    return "\n".join([f"**{note.title}**", "", note.text, *_details(note)])


def render(channel: Channel, note: Announcement, wall_time_s: float) -> tuple[str, dict[str, Any]]:
    """The URL and JSON body to POST for ``note`` on ``channel`` (signed where the robot wants it)."""
    if channel.type == "webhook":
        body = {
            "kind": note.kind,
            "title": note.title,
            "text": note.text,
            "severity": note.severity,
            "group": note.group,
            "incident_id": note.incident_id,
            "fields": note.fields,
            "sent_at_s": int(wall_time_s),
        }
        return channel.url, body
    if channel.type == "dingtalk":
        url = channel.url
        if channel.secret:
            ts_ms = int(wall_time_s * 1000)
            sep = "&" if "?" in url else "?"
            url = f"{url}{sep}timestamp={ts_ms}&sign={quote_plus(dingtalk_sign(channel.secret, ts_ms))}"
        return url, {"msgtype": "markdown", "markdown": {"title": note.title, "text": _markdown(note)}}
    if channel.type == "wecom":
        return channel.url, {"msgtype": "markdown", "markdown": {"content": _markdown(note)}}
    # feishu
    text = "\n".join([note.title, note.text, *_details(note)])
    message: dict[str, Any] = {"msg_type": "text", "content": {"text": text}}
    if channel.secret:
        ts_s = int(wall_time_s)
        message = {"timestamp": str(ts_s), "sign": feishu_sign(channel.secret, ts_s), **message}
    return channel.url, message


def delivered(channel: Channel, status: int, payload: Any) -> bool:
    """Whether the receiver accepted the message (robots answer HTTP 200 with an error code in the body)."""
    if not 200 <= status < 300:
        return False
    if channel.type == "webhook":
        return True
    if not isinstance(payload, dict):
        return False
    if channel.type in ("dingtalk", "wecom"):
        return payload.get("errcode") == 0
    return payload.get("code", payload.get("StatusCode")) == 0


def _read_answer(resp: requests.Response, deadline: float) -> bytes:
    """The answer's body, at most MAX_ANSWER_BYTES of it, read by whatever each socket read brings so that
    the deadline is checked between reads; AnswerTooSlow once it has passed."""
    data = bytearray()
    while len(data) < MAX_ANSWER_BYTES:
        if time.monotonic() > deadline:
            raise AnswerTooSlow
        chunk = resp.raw.read1(READ_CHUNK_BYTES, decode_content=True)
        if not chunk:
            break
        data += chunk
    return bytes(data[:MAX_ANSWER_BYTES])


def retry_after_s(resp: requests.Response, wall_time_s: float) -> float:
    """Seconds a throttled (429) or unavailable (503) receiver asks to wait (RFC 9110 Retry-After: seconds or
    an HTTP date); 0 when it asks nothing, or in anything else."""
    value = (resp.headers.get("retry-after") or "").strip()
    if resp.status_code not in (429, 503) or not value:
        return 0.0
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return 0.0
    if when.tzinfo is None:  # an HTTP date is GMT; one without a zone is not one
        return 0.0
    return max(0.0, when.timestamp() - wall_time_s)


def _json_or_none(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:  # not JSON (an HTML error page, a truncated answer): no payload to read
        return None


@dataclass(order=True)
class _Job:
    due_s: float
    seq: int
    attempt: int = field(compare=False)
    channel: Channel = field(compare=False)
    note: Announcement = field(compare=False)
    wait_s: float = field(default=0.0, compare=False)  # what the receiver asked (Retry-After)


class Notifier:
    """Queue and deliver notifications from one daemon thread; ``send`` never blocks the caller."""

    def __init__(
        self,
        channels: Iterable[Channel],
        *,
        max_attempts: int = 5,
        backoff_s: float = 1.0,
        max_backoff_s: float = 60.0,
        timeout_s: float = 5.0,
        max_queue: int = 1000,
        on_delivered: Callable[[Announcement, Channel], None] | None = None,
        wall_time: Callable[[], float] = time.time,
        session: requests.Session | None = None,
    ) -> None:
        self.channels: Sequence[Channel] = tuple(channels)
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.timeout_s = timeout_s
        self.max_queue = max_queue
        self.on_delivered = on_delivered
        self.wall_time = wall_time
        self.session = session or requests.Session()
        self.sent = 0
        self.failed = 0
        self._heap: list[_Job] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopping = False
        self._busy = 0
        self._thread: threading.Thread | None = None

    @property
    def has_channels(self) -> bool:
        return bool(self.channels)

    def start(self) -> Notifier:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="fleet-notifier", daemon=True)
            self._thread.start()
        return self

    def send(self, note: Announcement) -> None:
        """Enqueue ``note`` for every channel; drops (and logs) when the queue is full rather than block."""
        with self._cond:
            for channel in self.channels:
                if len(self._heap) >= self.max_queue:
                    log.warning("notification queue full, dropping %s for %s", note.kind, channel.label)
                    self.failed += 1
                    continue
                heapq.heappush(self._heap, _Job(time.monotonic(), next(self._seq), 1, channel, note))
            self._cond.notify_all()

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until nothing is queued or in flight (tests, shutdown); False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._heap or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.05))
        return True

    def stop(self, timeout_s: float = 5.0) -> None:
        self.flush(timeout_s)
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and (not self._heap or self._heap[0].due_s > time.monotonic()):
                    wait = self._heap[0].due_s - time.monotonic() if self._heap else None
                    self._cond.wait(wait)
                if self._stopping:
                    return
                job = heapq.heappop(self._heap)
                self._busy += 1
            ok = False
            try:
                ok = self._deliver(job)
            except Exception:  # a bug in one delivery must not end the thread that carries every other one
                log.exception("notification %s to %s failed", job.note.kind, job.channel.label)
            finally:
                with self._cond:
                    self._busy -= 1
                    if not ok and job.attempt < self.max_attempts:
                        # a throttled receiver's Retry-After: retried sooner, the attempt is refused again
                        backoff = max(self.backoff_s * 2 ** (job.attempt - 1), job.wait_s)
                        delay = min(self.max_backoff_s, backoff)
                        due_s = time.monotonic() + delay
                        retry = _Job(due_s, next(self._seq), job.attempt + 1, job.channel, job.note)
                        heapq.heappush(self._heap, retry)
                    elif not ok:
                        self.failed += 1
                        log.error(
                            "notification %s to %s given up after %d attempts",
                            job.note.kind,
                            job.channel.label,
                            job.attempt,
                        )
                    self._cond.notify_all()

    def _deliver(self, job: _Job) -> bool:
        url, body = render(job.channel, job.note, self.wall_time())
        try:
            # Never follow a redirect: requests turns a redirected POST into a GET without the body, whose
            # 200 read as delivered (and acknowledged the incident) though nobody got the message.
            # ``timeout`` bounds each socket read only: a receiver that trickles its answer a byte at a time
            # held the one delivery thread (every channel's messages) for as long as it liked, so the answer
            # is read here against one deadline for the whole delivery.
            deadline = time.monotonic() + self.timeout_s
            with self.session.post(
                url, json=body, timeout=self.timeout_s, allow_redirects=False, stream=True
            ) as resp:
                ok = delivered(job.channel, resp.status_code, _json_or_none(_read_answer(resp, deadline)))
        except AnswerTooSlow:
            log.warning(
                "notification to %s failed: no full answer within %g s", job.channel.label, self.timeout_s
            )
            return False
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            log.warning("notification to %s failed: %s", job.channel.label, type(exc).__name__)
            return False
        if resp.is_redirect:
            log.warning(
                "notification to %s refused: HTTP %s redirects to %s; configure the URL it redirects to",
                job.channel.label,
                resp.status_code,
                urlsplit(resp.headers.get("location", "")).hostname or "the same host",
            )
            return False
        if not ok:
            wait_s = retry_after_s(resp, self.wall_time())
            if wait_s:
                job.wait_s = wait_s
            log.warning(
                "notification to %s refused (HTTP %s)%s",
                job.channel.label,
                resp.status_code,
                f"; it asks to retry after {wait_s:g} s" if wait_s else "",
            )
            return False
        self.sent += 1
        if self.on_delivered is not None:
            try:
                self.on_delivered(job.note, job.channel)
            except Exception:  # a failing callback must not kill the delivery thread
                log.exception("on_delivered callback failed")
        return True
