"""Notifications: robot formats and signatures, retries, and never blocking the caller."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import socket

import pytest

from fleet.service.notify import Announcement, Channel, Notifier, render, retry_after_s

NOTE = Announcement(
    kind="incident",
    title="i-1 overheating",
    text="gpu_temperature_c 91 > 85 for 2m",
    severity="critical",
    group="chat",
    incident_id="inc-1",
    fields={"respond_by": "08:15Z"},
)
WALL_S = 1_767_225_600.0


@pytest.fixture
def deliver(receiver):
    def run(channel_type, secret=None, answers=None, **kw):
        with receiver(answers) as rx:
            notifier = Notifier(
                [Channel(channel_type, rx.url + "/hook?access_token=tok", secret)],
                backoff_s=0.01,
                wall_time=lambda: WALL_S,
                **kw,
            ).start()
            notifier.send(NOTE)
            assert notifier.flush(10)
            notifier.stop()
        return rx.requests, notifier

    return run


def test_webhook_posts_the_notification_fields(deliver):
    [req], _ = deliver("webhook")
    assert req["body"]["kind"] == "incident"
    assert req["body"]["incident_id"] == "inc-1"
    assert req["body"]["fields"] == {"respond_by": "08:15Z"}


def test_dingtalk_signs_timestamp_and_secret_in_the_query(deliver):
    [req], _ = deliver("dingtalk", secret="SEC123")
    ts = req["query"]["timestamp"][0]
    expected = base64.b64encode(
        hmac.new(b"SEC123", f"{ts}\nSEC123".encode(), hashlib.sha256).digest()
    ).decode()
    assert ts == str(int(WALL_S * 1000))
    assert req["query"]["sign"] == [expected]
    assert req["query"]["access_token"] == ["tok"]
    assert req["body"]["msgtype"] == "markdown"


def test_feishu_signs_in_the_body_with_seconds(deliver):
    [req], _ = deliver("feishu", secret="fs-secret")
    ts = req["body"]["timestamp"]
    expected = base64.b64encode(hmac.new(f"{ts}\nfs-secret".encode(), b"", hashlib.sha256).digest()).decode()
    assert ts == str(int(WALL_S))
    assert req["body"]["sign"] == expected
    assert req["body"]["msg_type"] == "text"


def test_wecom_sends_markdown_content(deliver):
    [req], _ = deliver("wecom")
    assert req["body"]["msgtype"] == "markdown"
    assert "i-1 overheating" in req["body"]["markdown"]["content"]


def test_server_error_is_retried_until_accepted(deliver):
    reqs, notifier = deliver("webhook", answers=[(503, {}), (500, {})])
    assert len(reqs) == 3
    assert notifier.sent == 1


def test_robot_error_code_in_a_200_is_retried(deliver):
    reqs, notifier = deliver("dingtalk", answers=[(200, {"errcode": 310000, "errmsg": "sign not match"})])
    assert len(reqs) == 2
    assert notifier.sent == 1


def test_gives_up_after_max_attempts(deliver):
    reqs, notifier = deliver("webhook", answers=[(500, {})] * 5, max_attempts=3)
    assert len(reqs) == 3
    assert notifier.failed == 1 and notifier.sent == 0


def test_on_delivered_is_called_per_channel_accepted(receiver):
    seen = []
    with receiver() as rx:
        notifier = Notifier(
            [Channel("webhook", rx.url), Channel("wecom", rx.url)],
            backoff_s=0.01,
            on_delivered=lambda n, c: seen.append(c.type),
        ).start()
        notifier.send(NOTE)
        notifier.flush(10)
        notifier.stop()
    assert sorted(seen) == ["webhook", "wecom"]


def test_send_returns_while_the_receiver_hangs():
    # A receiver that accepts the connection and never answers: send() must still return at once.
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
    notifier = Notifier([Channel("webhook", url)], timeout_s=2, max_attempts=1).start()
    notifier.send(NOTE)
    assert notifier.flush(timeout_s=0) is False  # still in flight: the caller was not held
    notifier.stop(timeout_s=5)
    sock.close()


def test_channel_repr_and_label_never_show_secret_or_token():
    ch = Channel("dingtalk", "https://oapi.dingtalk.com/robot/send?access_token=TOKEN", "SECRETX")
    assert "SECRETX" not in repr(ch)
    assert "TOKEN" not in ch.label


def test_unknown_channel_type_is_refused():
    with pytest.raises(ValueError, match="slack"):
        Channel("slack", "http://127.0.0.1/")


def test_dingtalk_without_secret_keeps_url_unsigned():
    url, _ = render(Channel("dingtalk", "http://h/robot?access_token=t"), NOTE, WALL_S)
    assert "sign=" not in url


def test_from_config_accepts_a_mapping():
    ch = Channel.from_config({"type": "feishu", "url": "http://h/", "secret": "s"})
    assert (ch.type, ch.secret) == ("feishu", "s")


@pytest.mark.parametrize("channel_type", ["webhook", "dingtalk", "wecom", "feishu"])
def test_a_redirect_is_a_failed_delivery_never_a_bodiless_get(receiver, channel_type, caplog):
    """requests followed a 302 as a GET without the message, and the GET's 200 counted as delivered: the
    incident was acknowledged though nobody was told. A redirect is now refused, with the target's host."""
    delivered = []
    with receiver([(302, {})] * 2) as rx:
        rx.location = rx.url.replace("127.0.0.1", "localhost") + "/moved"  # the same receiver, by name
        notifier = Notifier(
            [Channel(channel_type, rx.url + "/hook")],
            backoff_s=0.01,
            max_attempts=2,
            on_delivered=lambda note, ch: delivered.append(ch),
        ).start()
        notifier.send(NOTE)
        assert notifier.flush(10)
        notifier.stop()
    assert [r["method"] for r in rx.requests] == ["POST", "POST"]
    assert delivered == [] and notifier.sent == 0 and notifier.failed == 1
    assert "redirects to localhost" in caplog.text


def _trickling_receiver(gap_s: float, body: bytes) -> tuple[socket.socket, str]:
    """A receiver that answers 200 at once, then its body one byte every ``gap_s`` seconds."""
    import threading
    import time

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n")
            conn.sendall(f"content-length: {len(body)}\r\n\r\n".encode())
            for byte in body:
                try:
                    conn.sendall(bytes([byte]))
                except OSError:  # the notifier hung up: what this test waits for
                    return
                time.sleep(gap_s)

    threading.Thread(target=serve, daemon=True).start()
    return server, f"http://127.0.0.1:{server.getsockname()[1]}/hook"


def test_an_answer_trickled_slower_than_the_timeout_fails_the_delivery_in_time():
    """Each byte comes well within the socket timeout, the whole answer well past it: the timeout bounded
    every read, not the delivery, and the one delivery thread waited out the trickle (every channel's
    messages behind it). Now the answer must be complete within ``timeout_s``."""
    server, url = _trickling_receiver(0.05, b'{"errcode": 0}' + b" " * 26)  # 2 s in all
    notifier = Notifier([Channel("dingtalk", url)], timeout_s=0.3, max_attempts=1).start()
    notifier.send(NOTE)
    assert notifier.flush(timeout_s=1.2)  # before: still reading at 2 s
    assert notifier.sent == 0 and notifier.failed == 1
    notifier.stop()
    server.close()


def test_a_note_that_cannot_be_sent_does_not_stop_the_deliveries_after_it(receiver):
    """A field the JSON encoder refuses raised out of the delivery thread and ended it: every later
    notification stayed queued forever. It is now a failed delivery of that note alone."""
    bad = Announcement(kind="scale", title="t", text="x", fields={"at": object()})
    with receiver() as rx:
        notifier = Notifier([Channel("webhook", rx.url)], backoff_s=0.01, max_attempts=1).start()
        notifier.send(bad)
        notifier.send(NOTE)
        assert notifier.flush(5)
        notifier.stop()
    assert [r["body"]["title"] for r in rx.requests] == [NOTE.title]
    assert notifier.sent == 1 and notifier.failed == 1


def test_a_throttled_receiver_is_retried_no_sooner_than_it_asks(deliver):
    """A 429's Retry-After was ignored: the retries came 1, 2, 4 and 8 s apart whatever the receiver asked,
    each refused again, and the message was given up inside the window the receiver had named."""
    reqs, notifier = deliver("webhook", answers=[(429, {}, {"Retry-After": "1"})])
    assert len(reqs) == 2 and notifier.sent == 1
    assert reqs[1]["at"] - reqs[0]["at"] >= 1.0  # backoff_s is 0.01


@pytest.mark.parametrize(
    ("status", "header", "expected_s"),
    [
        (429, "30", 30.0),
        (503, "Tue, 01 Jan 2026 00:01:00 GMT", 60.0),  # WALL_S is 2026-01-01T00:00:00Z
        (429, "Tue, 01 Jan 2025 00:00:00 GMT", 0.0),  # in the past
        (429, "soon", 0.0),
        (500, "30", 0.0),  # only a throttled or unavailable receiver asks
    ],
)
def test_retry_after_reads_seconds_or_an_http_date(status, header, expected_s):
    import requests

    resp = requests.Response()
    resp.status_code = status
    resp.headers["Retry-After"] = header
    assert retry_after_s(resp, WALL_S) == expected_s


SLA_NOTE = Announcement(
    kind="sla_breach",
    title="chat: sla respond breached",
    text="not acknowledged by 2026-01-01T00:15:00+00:00",
    severity="critical",
    group="chat",
    incident_id="chat:i-1:20260101T000000Z",
    fields={"instance": "i-1"},
)


@pytest.mark.parametrize("channel_type", ["dingtalk", "wecom", "feishu"])
def test_a_robot_message_names_the_incident_to_acknowledge(channel_type):
    """The robots' text left out the incident id of an SLA page (and Feishu's every field): the engineer
    paged had to look it up before `fleet incidents ack` could stop the clock."""
    _, body = render(Channel(channel_type, "https://robot.invalid/send"), SLA_NOTE, WALL_S)
    text = body["content"]["text"] if channel_type == "feishu" else json.dumps(body["markdown"])
    assert "incident: chat:i-1:20260101T000000Z" in text and "instance: i-1" in text


def test_an_incident_id_already_in_the_fields_is_not_repeated():
    note = Announcement(
        kind="incident", title="t", text="x", incident_id="inc-1", fields={"incident": "inc-1"}
    )
    _, body = render(Channel("wecom", "https://robot.invalid/send"), note, WALL_S)
    assert body["markdown"]["content"].count("inc-1") == 1
