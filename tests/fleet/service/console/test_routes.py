"""The console's routes through starlette's TestClient: rendering, escaping, sign-in, CSRF and the audit of
every action. Fast; the browser-level checks live in test_browser.py."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta

import pytest
from starlette.testclient import TestClient

from fleet.service.api import create_app
from fleet.service.console.security import SESSION_COOKIE, issue_session
from fleet.service.demand import DemandLog, DemandReading, record_forecasts
from fleet.service.metrics import ServiceMetrics
from fleet.service.store import DecisionRecord, IncidentRecord, open_store
from tests.fleet.service.test_demand import remembered

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
TOKEN = "console-token-1"
HOSTILE = '<script>alert("x")</script>'


def _status(paused: bool = False) -> dict:
    return {
        "service": "fleet",
        "lease": {"holder": "replica-a", "epoch": 3},
        "replica": {"holder": "replica-a", "leader": True, "last_tick_at": T0.isoformat()},
        "groups": [
            {
                "name": "chat",
                "paused": paused,
                "desired": 7,
                "in_service": 5,
                "pending": 1,
                "standby": 2,
                "target": 7,
                "floor": 4,
                "active_schedules": ["business-hours"],
            }
        ],
        "incidents": [],
    }


@pytest.fixture
def store(tmp_path):
    s = open_store(f"sqlite:///{tmp_path / 'console.db'}")
    yield s
    s.close()


def _app(store, token: str | None = TOKEN, groups=("chat",)):
    return create_app(
        store=store,
        metrics=ServiceMetrics(),
        token=token,
        clock=lambda: T0,
        groups=lambda: set(groups),
        status=lambda: {
            **_status(),
            "groups": [
                dict(_status()["groups"][0], name=g, paused=g in store.paused_groups()) for g in groups
            ],
        },
        health=lambda: {},
    )


@pytest.fixture
def client(store):
    return TestClient(_app(store), base_url="http://127.0.0.1:8780", follow_redirects=False)


def sign_in(client: TestClient, name: str = "alice") -> str:
    """Sign in and return the CSRF token the pages then carry."""
    r = client.post("/console/signin", data={"name": name, "token": TOKEN})
    assert r.status_code == 303, r.text
    page = client.get("/console/incidents").text
    match = re.search(r'name="csrf" value="([^"]+)"', page)
    assert match, "a signed-in page carries the CSRF token"
    return match.group(1)


def _decision(store, **kw) -> None:
    base = dict(
        service="fleet",
        at=T0 - timedelta(minutes=30),
        group_name="chat",
        kind="scale",
        action="scale_to",
        decision_id="chat:scale:0",
        outcome="applied",
        reason="rule_scale_out; queue",
        target=6,
        inputs={
            "in_service": 4,
            "reasons": [
                {"code": "rule_scale_out", "inputs": {"desired": 8}},
                {"code": "floor_schedule", "inputs": {}},
            ],
        },
        client_token="tok-abc",
        request_id="req-123",
    )
    store.record_decision(DecisionRecord(**{**base, **kw}))


def _incident(store, iid: str = "inc-1", closed: bool = False, outcome: str | None = None) -> None:
    store.upsert_incident(
        IncidentRecord(
            id=iid,
            service="fleet",
            group_name="chat",
            instance_id="i-hot1",
            state="closed" if closed else "detected",
            detected_at=T0 - timedelta(minutes=5),
            updated_at=T0,
            cause="metric: gpu_overheat",
            respond_by=T0 + timedelta(minutes=10),
            isolate_by=T0 + timedelta(hours=4),
            closed_at=T0 if closed else None,
            body={"outcome": outcome} if outcome else None,
        )
    )


def test_fleet_page_shows_each_group_with_its_numbers_and_floors(client, store):
    _decision(store)
    r = client.get("/console/")
    assert r.status_code == 200
    row = re.search(r"<tr><td><a href=\"/console/groups/chat\">chat</a>.*?</tr>", r.text, re.S).group(0)
    cells = re.findall(r'<span class="num">([^<]*)</span>', row)
    assert cells[:5] == ["7", "5", "6", "2", "7"]  # desired, InService, serving, Standby, target
    assert "schedule: business-hours" in row and "floor_schedule" in row
    assert "rule_scale_out; queue" in row and "<svg" in row


def test_pages_load_nothing_from_another_origin(client, store):
    _decision(store)
    _incident(store)
    for path in ("/console/", "/console/groups/chat", "/console/incidents", "/console/decisions"):
        r = client.get(path)
        assert r.status_code == 200, path
        assert "default-src 'none'" in r.headers["content-security-policy"]
        refs = re.findall(r'(?:src|href|action)="([^"]*)"', r.text)
        assert refs and all(u.startswith(("/", "?", "#")) for u in refs), (path, refs)


def test_store_data_is_escaped_everywhere(store):
    client = TestClient(_app(store, groups=(HOSTILE,)), follow_redirects=False)
    _decision(store, group_name=HOSTILE, reason=HOSTILE, inputs={"note": HOSTILE})
    store.upsert_incident(
        IncidentRecord(
            id="inc-x",
            service="fleet",
            group_name=HOSTILE,
            instance_id="i-1",
            state="detected",
            detected_at=T0,
            updated_at=T0,
            cause=HOSTILE,
            respond_by=T0,
            isolate_by=T0,
        )
    )
    store.add_request("reset_breaker", T0, group_name=HOSTILE, actor=HOSTILE)
    store.mark_request(store.add_request("isolate", T0, instance_id="i-1"), HOSTILE, T0)
    for path in (
        "/console/",
        "/console/incidents",
        "/console/decisions",
        "/console/decisions?group=" + HOSTILE,
    ):
        text = client.get(path).text
        assert HOSTILE not in text, path
        assert "&lt;script&gt;" in text, path


def test_read_only_view_has_no_forms_and_actions_need_sign_in(client, store):
    _incident(store)
    page = client.get("/console/incidents").text
    assert 'name="csrf"' not in page and "sign in" in page
    r = client.post("/console/incidents/inc-1/ack", data={"csrf": "x"})
    assert r.status_code == 401
    assert store.incident("inc-1").acknowledged_by is None


def test_sign_in_sets_an_httponly_samesite_strict_cookie_without_the_token(client):
    r = client.post("/console/signin", data={"name": "alice", "token": TOKEN})
    cookie = r.headers["set-cookie"]
    assert r.status_code == 303
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/console" in cookie
    assert TOKEN not in cookie


def test_wrong_token_is_refused_and_sets_no_cookie(client):
    r = client.post("/console/signin", data={"name": "alice", "token": "guess"})
    assert r.status_code == 403 and "set-cookie" not in r.headers


def test_a_forged_session_cookie_is_not_a_session(client, store):
    other = issue_session("mallory", "another-token", T0).cookie
    client.cookies.set(SESSION_COOKIE, other)
    assert client.post("/console/groups/chat/pause", data={"csrf": "x"}).status_code == 401
    assert store.paused_groups() == set()


def test_an_action_without_the_csrf_token_is_refused(client, store):
    sign_in(client)
    r = client.post("/console/groups/chat/pause", data={})
    assert r.status_code == 403 and "CSRF" in r.text
    assert store.paused_groups() == set()


def test_a_cross_origin_post_is_refused_even_with_the_csrf_token(client, store):
    csrf = sign_in(client)
    r = client.post(
        "/console/groups/chat/pause", data={"csrf": csrf}, headers={"origin": "http://evil.example"}
    )
    assert r.status_code == 403
    assert store.paused_groups() == set()


def test_pause_and_resume_record_who_did_it(client, store):
    csrf = sign_in(client, "bob")
    r = client.post("/console/groups/chat/pause", data={"csrf": csrf, "next": "/console/"})
    assert r.status_code == 303 and r.headers["location"].startswith("/console/?")
    assert store.paused_groups() == {"chat"}
    with store.engine.connect() as c:
        assert c.exec_driver_sql("select actor from group_controls").scalar_one() == "bob"
    client.post("/console/groups/chat/resume", data={"csrf": csrf})
    assert store.paused_groups() == set()


def test_ack_isolate_and_release_reach_the_store_under_the_operators_name(client, store):
    _incident(store)
    csrf = sign_in(client, "carol")
    assert client.post("/console/incidents/inc-1/ack", data={"csrf": csrf}).status_code == 303
    assert store.incident("inc-1").acknowledged_by == "human:carol"
    client.post("/console/isolate", data={"csrf": csrf, "instance_id": "i-hot1", "reason": "fans"})
    client.post("/console/release", data={"csrf": csrf, "instance_id": "i-hot1"})
    queued = [(q.kind, q.instance_id or q.incident_id, q.actor) for q in store.requests()]
    assert queued == [
        ("ack", "inc-1", "human:carol"),
        ("isolate", "i-hot1", "carol"),
        ("release", "i-hot1", "carol"),
    ]


def test_release_of_an_instance_with_nothing_to_release_is_refused(client, store):
    csrf = sign_in(client, "carol")
    r = client.post("/console/release", data={"csrf": csrf, "instance_id": "i-idle"})
    assert r.status_code == 409 and store.requests() == []


def test_isolate_without_a_reason_is_refused(client, store):
    csrf = sign_in(client)
    r = client.post("/console/isolate", data={"csrf": csrf, "instance_id": "i-1"})
    assert r.status_code == 400 and store.requests() == []


def test_without_a_configured_token_nobody_signs_in_and_actions_are_refused(store):
    client = TestClient(_app(store, token=None), follow_redirects=False)
    assert "read-only (no API token configured)" in client.get("/console/").text
    assert client.post("/console/signin", data={"name": "a", "token": ""}).status_code == 403
    assert client.post("/console/groups/chat/pause", data={"csrf": ""}).status_code == 403


def test_redirects_after_an_action_stay_inside_the_console(client, store):
    csrf = sign_in(client)
    r = client.post("/console/groups/chat/pause", data={"csrf": csrf, "next": "//evil.example/x"})
    assert r.headers["location"].startswith("/console/?")


def test_incidents_page_lists_open_incidents_first_with_countdowns(client, store):
    _incident(store, "inc-old", closed=True, outcome="recovered")
    _incident(store, "inc-new")
    text = client.get("/console/incidents").text
    assert text.index('id="incident-inc-new"') < text.index('id="incident-inc-old"')
    deadline = (T0 + timedelta(minutes=10)).isoformat()
    assert f'data-deadline="{deadline}"' in text and ">10m 0s<" in text
    assert 'id="sla-summary"' in text
    assert "closed (recovered)" in text  # how the closed one ended


def test_decisions_filter_by_outcome_and_reason_code(client, store):
    _decision(store, decision_id="a", outcome="applied", reason="rule_scale_out; q", request_id="req-a")
    _decision(store, decision_id="b", outcome="error", reason="rule_scale_out; q", request_id="req-b")
    _decision(store, decision_id="c", outcome="applied", reason="floor_schedule; day", request_id="req-c")
    text = client.get("/console/decisions?outcome=applied&reason=rule_scale_out&since=").text
    assert "req-a" in text and "req-b" not in text and "req-c" not in text
    assert "tok-abc" in text  # the ClientToken column


def test_decisions_page_answers_a_bad_since_with_a_message(client, store):
    text = client.get("/console/decisions?since=soon").text
    assert "is not a duration" in text


def test_group_page_says_there_is_no_forecast_for_a_group_without_forecasts(client, store):
    _decision(store)
    text = client.get("/console/groups/chat?window=1h").text
    assert 'id="forecast-none"' in text and "<svg" in text
    assert "forecast req/s" not in text


def test_group_page_plots_recorded_forecasts_against_the_observed_demand_in_req_per_s(store):
    for made, rps, upper in [(40, 5.0, 6.5), (30, 6.0, 7.5), (20, 7.0, 9.0)]:
        made_at = T0 - timedelta(minutes=made)
        with store.begin() as conn:
            record_forecasts(store, {"chat": remembered(made_at, 10, rps, upper)}, made_at, conn)
    # demand observed for the first two forecast times (T0-30m, T0-20m); the third's minute went unmeasured
    DemandLog(store, {"chat": 86400}).write(
        "chat",
        [DemandReading(T0 - timedelta(minutes=30), 4.0), DemandReading(T0 - timedelta(minutes=20), 6.2)],
    )
    text = TestClient(_app(store, groups=("chat", "batch"))).get("/console/groups/chat?window=1h").text
    assert 'id="forecast-none"' not in text and "Forecast against actual (req/s)" in text
    section = text[text.index("Forecast against actual") :]
    lines = re.findall(r'<polyline[^>]*points="([^"]+)"><title>([^<]+)</title>', section.split("</svg>")[0])
    by_label = {label: pts.split() for pts, label in lines}
    assert set(by_label) == {"forecast req/s", "upper q. req/s", "actual req/s"}
    # step lines: the forecast and its upper quantile take three values, the actual two (4.0 and 6.2 req/s)
    assert len({p.split(",")[1] for p in by_label["forecast req/s"]}) == 3
    assert len({p.split(",")[1] for p in by_label["upper q. req/s"]}) == 3
    assert len({p.split(",")[1] for p in by_label["actual req/s"]}) == 2
    other = TestClient(_app(store, groups=("chat", "batch"))).get("/console/groups/batch?window=1h").text
    assert 'id="forecast-none"' in other


def test_unknown_group_page_is_404(client):
    assert client.get("/console/groups/nope").status_code == 404


def test_serve_open_without_the_api_is_one_line_and_exit_2(tmp_path, capsys):
    from fleet.cli import main

    cfg = tmp_path / "fleet.yaml"
    cfg.write_text(
        "region: cn-chengdu\ngroups:\n  - {name: chat, scaling_group_id: asg-1, min_size: 1, max_size: 2}\n"
    )
    assert main(["serve", "--config", str(cfg), "--once", "--open"]) == 2
    err = capsys.readouterr().err
    assert "--open needs the status API" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("127.0.0.1", "http://127.0.0.1:8780/console/"),
        ("0.0.0.0", "http://127.0.0.1:8780/console/"),
        ("::1", "http://[::1]:8780/console/"),
    ],
)
def test_console_url_reaches_a_wildcard_listener_through_loopback(host, url):
    from fleet.commands.serve import _console_url

    assert _console_url(host, 8780) == url


def test_group_page_shows_each_decisions_metric_inputs(client, store):
    reasons = [{"code": "rule_scale_out", "inputs": {"metric": "queue_waiting_per_instance", "value": 3.25}}]
    _decision(store, inputs={"in_service": 4, "reasons": reasons})
    text = client.get("/console/groups/chat").text
    assert "&quot;metric&quot;: &quot;queue_waiting_per_instance&quot;" in text
    assert "&quot;value&quot;: 3.25" in text


def test_a_crafted_confirmation_link_shows_nothing(client):
    text = client.get("/console/?msg=call+this+number&sig=forged").text
    assert "call this number" not in text


def test_an_actions_confirmation_is_shown_after_the_redirect(client, store):
    csrf = sign_in(client, "dora")
    r = client.post("/console/groups/chat/pause", data={"csrf": csrf, "next": "/console/"})
    assert "chat paused by dora" in client.get(r.headers["location"]).text


def test_sparklines_are_thinned_to_a_bounded_number_of_points_keeping_the_ends():
    from fleet.service.console.data import SPARK_POINTS, CapacityPoint, thin

    start = T0 - timedelta(hours=6)
    pts = [
        CapacityPoint(start + timedelta(seconds=10 * i), i, None, None, "applied", "") for i in range(2000)
    ]
    kept = thin(pts, start)
    assert len(kept) <= SPARK_POINTS + 1
    assert kept[0] is pts[0] and kept[-1] is pts[-1]
    assert [p.at for p in kept] == sorted(p.at for p in kept)


def test_an_oversized_sign_in_form_is_refused_before_it_is_read_whole():
    """Before, the form's body was read whole and only then measured: anyone could post gigabytes to
    /console/signin (no credential is checked before the form is read) and the service held them."""
    import asyncio

    from starlette.requests import Request

    from fleet.service.console.routes import MAX_FORM_BYTES, Refused, _form

    chunk = b"x" * 4096
    sent = [0]

    async def receive() -> dict:
        sent[0] += 1
        return {"type": "http.request", "body": chunk, "more_body": sent[0] < 10_000}  # 40 MB in all

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/console/signin",
        "headers": [(b"content-type", b"application/x-www-form-urlencoded")],  # chunked: no length
    }
    with pytest.raises(Refused) as refused:
        asyncio.run(_form(Request(scope, receive)))
    assert refused.value.status == 413
    assert sent[0] <= MAX_FORM_BYTES // len(chunk) + 1


def test_a_declared_oversized_sign_in_form_is_refused_unread(client):
    r = client.post(
        "/console/signin",
        content=b"name=alice&token=" + b"x" * (16 * 1024),
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert r.status_code == 413


def _requests_table(text: str) -> str:
    return re.search(r'<table class="requests">.*?</table>', text, re.S).group(0)


def test_incidents_page_lists_queued_and_handled_requests_with_why_and_how(client, store):
    done = store.add_request("release", T0 - timedelta(minutes=20), instance_id="i-old", actor="bob")
    store.mark_request(done, "refused: no open incident", T0 - timedelta(minutes=19))
    store.add_request("ack", T0 - timedelta(minutes=6), incident_id="inc-1", actor="human:bob")
    waits = store.add_request("isolate", T0 - timedelta(minutes=5), instance_id="i-hot1", actor="bob")
    with store.begin() as conn:
        store.note_request(waits, "waiting: ESS cannot be read for group chat", conn)
    store.add_request("reset_breaker", T0 - timedelta(seconds=30), group_name="chat", reason="y", actor="dan")
    requests = _requests_table(client.get("/console/incidents").text)
    rows = re.findall(r"<tr><td>(.*?)</tr>", requests, re.S)
    cells = [[html.unescape(re.sub(r"<[^>]+>", "", c)) for c in r.split("</td><td>")] for r in rows]
    assert [c[:5] for c in cells] == [
        [str(waits), "isolate", "i-hot1", "bob", "5m 0s ago"],
        [str(waits + 1), "reset_breaker", "chat", "dan", "30s ago"],
        [str(done), "release", "i-old", "bob", "20m 0s ago"],
    ]
    assert cells[0][5] == "queued; waiting: ESS cannot be read for group chat"
    assert cells[1][5] == "queued; the leader takes it on its next tick"  # as fleet status says
    assert cells[2][5].startswith("refused: no open incident at ")
    assert "cancel" not in requests  # read-only: no forms
    sign_in(client)
    signed = _requests_table(client.get("/console/incidents").text)
    assert signed.count(">cancel</button>") == 2  # the queued ones only
    assert f'action="/console/requests/{waits}/cancel"' in signed


def test_cancel_from_the_console_withdraws_a_queued_request_under_the_operators_name(client, store):
    rid = store.add_request("isolate", T0, instance_id="i-hot1", reason="fans", actor="bob")
    csrf = sign_in(client, "carol")
    r = client.post(f"/console/requests/{rid}/cancel", data={"csrf": csrf, "next": "/console/incidents"})
    assert r.status_code == 303 and r.headers["location"].startswith("/console/incidents?")
    assert store.pending_requests() == []
    assert store.request(rid).outcome == "cancelled by carol"
    assert f"request {rid} (isolate i-hot1) cancelled by carol" in client.get(r.headers["location"]).text


def test_a_cancel_from_the_console_is_refused_with_the_apis_line(client, store):
    rid = store.add_request("release", T0, instance_id="i-hot1", actor="bob")
    store.mark_request(rid, "applied", T0)
    csrf = sign_in(client, "carol")
    r = client.post(f"/console/requests/{rid}/cancel", data={"csrf": csrf})
    assert r.status_code == 409
    at = T0.isoformat(timespec="seconds")
    assert f"request {rid} (release i-hot1) was already handled at {at}: applied" in r.text
    assert client.post("/console/requests/41/cancel", data={"csrf": csrf}).status_code == 404
    assert client.post("/console/requests/i-7/cancel", data={"csrf": csrf}).status_code == 400


def test_a_cancel_needs_sign_in_and_the_csrf_token(client, store):
    rid = store.add_request("isolate", T0, instance_id="i-hot1", reason="fans", actor="bob")
    assert client.post(f"/console/requests/{rid}/cancel", data={"csrf": "x"}).status_code == 401
    sign_in(client)
    assert client.post(f"/console/requests/{rid}/cancel", data={}).status_code == 403
    assert [q.id for q in store.pending_requests()] == [rid]
