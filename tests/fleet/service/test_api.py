"""The status API: open reads, token-guarded mutations, and a /metrics that Prometheus can parse."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from fleet.service.api import ApiServer, create_app
from fleet.service.metrics import ServiceMetrics
from fleet.service.store import IncidentRecord, open_store

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
TOKEN = "s3cret-token"


@pytest.fixture
def store(tmp_path):
    return open_store(f"sqlite:///{tmp_path / 'api.db'}")


@pytest.fixture
def servers():
    started: list[ApiServer] = []
    yield started
    for server in started:
        server.stop()


@pytest.fixture
def client(store, servers):
    """``client(token=..., metrics=...)``: an httpx client of the app served by uvicorn on 127.0.0.1."""

    def make(token=TOKEN, metrics=None):
        server = ApiServer(_app(store, token, metrics), "127.0.0.1", 0).start()
        servers.append(server)
        return httpx.Client(base_url=f"http://127.0.0.1:{server.port}")

    return make


def _app(store, token=TOKEN, metrics=None):
    return create_app(
        store=store,
        metrics=metrics or ServiceMetrics(),
        token=token,
        clock=lambda: T0,
        groups=lambda: {"chat"},
        status=lambda: {"groups": [{"name": "chat", "desired": 3}]},
        health=lambda: {"leader": True},
    )


AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_healthz_answers_without_token(store, client):
    r = client().get("/healthz")
    assert r.status_code == 200 and r.json()["ok"] is True


def test_status_returns_the_live_view(store, client):
    assert client().get("/status").json()["groups"][0]["desired"] == 3


def test_pause_without_token_is_401_and_changes_nothing(store, client):
    r = client().post("/groups/chat/pause")
    assert r.status_code == 401
    assert store.paused_groups() == set()


def test_pause_with_wrong_token_is_403(store, client):
    r = client().post("/groups/chat/pause", headers={"Authorization": "Bearer nope"})
    assert r.status_code == 403
    assert store.paused_groups() == set()


def test_mutation_refused_when_no_token_is_configured(store, client):
    r = client(token=None).post("/groups/chat/pause", headers=AUTH)
    assert r.status_code == 403


def test_replace_queues_a_request_for_an_instance_under_an_incident(store, client):
    c = client()
    r = c.post("/replace", headers=AUTH, json={"instance_id": "i-7"})
    assert r.status_code == 409 and "nothing to replace" in r.json()["error"]
    assert c.post("/isolate", headers=AUTH, json={"instance_id": "i-7", "reason": "x"}).status_code == 202
    assert c.post("/replace", headers=AUTH, json={"instance_id": "i-7"}).status_code == 202
    assert [r.kind for r in store.pending_requests()] == ["isolate", "replace"]


def test_reset_breaker_queues_a_request_naming_the_group(store, client):
    c = client()
    assert c.post("/groups/chat/reset-breaker", json={"reason": "x"}).status_code == 401
    assert c.post("/groups/nope/reset-breaker", headers=AUTH, json={"reason": "x"}).status_code == 404
    assert c.post("/groups/chat/reset-breaker", headers=AUTH, json={}).status_code == 400
    r = c.post("/groups/chat/reset-breaker", headers=AUTH, json={"reason": "fans replaced", "actor": "alice"})
    assert r.status_code == 202
    [req] = store.pending_requests()
    assert (req.kind, req.group_name, req.reason, req.actor) == (
        "reset_breaker",
        "chat",
        "fans replaced",
        "alice",
    )


def test_pause_and_resume_with_token(store, client):
    c = client()
    assert c.post("/groups/chat/pause", headers=AUTH).status_code == 200
    assert store.paused_groups() == {"chat"}
    assert c.post("/groups/chat/resume", headers=AUTH).status_code == 200
    assert store.paused_groups() == set()


def _incident(store, **fields) -> None:
    """Incident inc-1 of instance i-1 in group chat, detected at T0 (``fields`` override)."""
    base = dict(id="inc-1", service="fleet", group_name="chat", instance_id="i-1", state="detected")
    times = dict(detected_at=T0, updated_at=T0, respond_by=T0 + timedelta(minutes=15))
    store.upsert_incident(IncidentRecord(**{**base, **times, **fields}))


def test_pause_of_unknown_group_is_404_naming_known_ones(store, client):
    r = client().post("/groups/nope/pause", headers=AUTH)
    assert r.status_code == 404 and "chat" in r.json()["error"]


def test_ack_records_a_human_acknowledgment(store, client):
    _incident(store)
    r = client().post("/incidents/inc-1/ack", headers=AUTH, json={"actor": "alice"})
    assert r.status_code == 200
    assert store.incident("inc-1").acknowledged_by == "human:alice"


def test_ack_without_token_is_refused(store, client):
    assert client().post("/incidents/inc-1/ack").status_code == 401


def test_ack_unknown_incident_is_404(store, client):
    assert client().post("/incidents/nope/ack", headers=AUTH).status_code == 404


def test_ack_by_a_name_too_long_to_keep_behind_the_human_prefix_is_400(store, client):
    _incident(store)
    r = client().post("/incidents/inc-1/ack", headers=AUTH, json={"actor": "y" * 199})
    assert r.status_code == 400 and "actor" in r.json()["error"]
    assert store.incident("inc-1").acknowledged_at is None


def test_ack_of_a_closed_incident_is_409_and_writes_nothing(store, client):
    _incident(store, state="closed", closed_at=T0 + timedelta(minutes=5))
    r = client().post("/incidents/inc-1/ack", headers=AUTH, json={"actor": "alice"})
    assert r.status_code == 409 and "closed" in r.json()["error"]
    assert store.incident("inc-1").acknowledged_at is None and store.requests() == []


def test_ack_of_another_services_incident_is_409_naming_it_and_writes_nothing(store, client):
    _incident(store, service="batch")
    r = client().post("/incidents/inc-1/ack", headers=AUTH, json={"actor": "alice"})
    assert r.status_code == 409 and "belongs to service 'batch'" in r.json()["error"]
    assert store.incident("inc-1").acknowledged_at is None and store.requests() == []


def test_isolate_queues_an_operator_request(store, client):
    r = client().post("/isolate", headers=AUTH, json={"instance_id": "i-7", "reason": "ECC storm"})
    assert r.status_code == 202
    [req] = store.pending_requests()
    assert (req.kind, req.instance_id, req.reason) == ("isolate", "i-7", "ECC storm")


def test_isolate_without_reason_is_400(store, client):
    r = client().post("/isolate", headers=AUTH, json={"instance_id": "i-7"})
    assert r.status_code == 400 and store.pending_requests() == []


def test_release_without_token_is_refused(store, client):
    assert client().post("/release", json={"instance_id": "i-7"}).status_code == 401
    assert store.pending_requests() == []


def test_release_of_an_instance_with_nothing_to_release_is_409(store, client):
    r = client().post("/release", headers=AUTH, json={"instance_id": "i-7"})
    assert r.status_code == 409 and "nothing to release" in r.json()["error"]
    assert store.pending_requests() == []
    assert (
        client().post("/isolate", headers=AUTH, json={"instance_id": "i-7", "reason": "x"}).status_code == 202
    )
    assert client().post("/release", headers=AUTH, json={"instance_id": "i-7"}).status_code == 202


def test_metrics_parse_with_the_prometheus_text_parser(store, client):
    metrics = ServiceMetrics()
    metrics.ticks.labels(outcome="acted").inc()
    metrics.cloud_errors.labels(code="Throttling.User").inc(2)
    metrics.metric_staleness.labels(group="chat", metric="queue_waiting").set(12.5)
    text = client(metrics=metrics).get("/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    errors = [s for s in families["fleet_cloud_api_errors"].samples if s.name.endswith("_total")]
    assert errors[0].labels == {"code": "Throttling.User"} and errors[0].value == 2
    assert "fleet_tick_duration_seconds" in families


def test_server_refuses_a_port_already_taken(store, client):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        with pytest.raises(RuntimeError, match="could not listen"):
            ApiServer(_app(store), "127.0.0.1", sock.getsockname()[1]).start()


def test_isolate_of_an_instance_whose_group_ess_cannot_read_says_it_waits_and_why(store, client):
    from fleet.service.ess_reach import UNREADABLE, event_key
    from fleet.service.store import IncidentEvent

    with store.begin() as conn:
        store.save_instance_list("chat", T0 - timedelta(minutes=5), [{"instance_id": "i-7"}], conn)
    error = "DescribeScalingGroups: HTTP 503 ServiceUnavailable"
    store.add_incident_event(IncidentEvent(event_key("chat"), T0 - timedelta(minutes=2), UNREADABLE, error))
    r = client().post("/isolate", headers=AUTH, json={"instance_id": "i-7", "reason": "ECC storm"})
    assert r.status_code == 202 and r.json()["queued"] is True
    waiting = r.json()["waiting"]
    assert waiting.startswith("waiting: ESS cannot be read for group chat") and error in waiting
    assert (
        client().post("/isolate", headers=AUTH, json={"instance_id": "i-8", "reason": "x"}).json()["waiting"]
        is None
    )  # in no group ESS cannot read


def test_a_queued_request_is_cancelled_through_the_api(store, client):
    rid = store.add_request("isolate", T0, instance_id="i-7", reason="x", actor="bob")
    body = {"actor": "carol", "reason": "wrong host"}
    r = client().post(f"/requests/{rid}/cancel", json=body, headers=AUTH)
    assert r.status_code == 200
    assert r.json() == {"request": rid, "kind": "isolate", "cancelled": True, "by": "carol"}
    [req] = store.requests()
    assert (req.outcome, req.handled_at) == ("cancelled by carol: wrong host", T0)


@pytest.mark.parametrize(
    ("setup", "status", "error"),
    [
        ("unknown", 404, "no such request"),
        ("applied", 409, "was already handled at 2026-03-02T08:00:00+00:00: applied"),
        ("ack", 409, "is an acknowledgment"),
    ],
)
def test_a_cancel_that_finds_nothing_to_withdraw_is_refused(store, client, setup, status, error):
    rid = 41
    if setup == "applied":
        rid = store.add_request("release", T0, instance_id="i-7", actor="bob")
        store.mark_request(rid, "applied", T0)
    elif setup == "ack":
        rid = store.add_request("ack", T0, incident_id="inc-1", actor="human:bob")
    r = client().post(f"/requests/{rid}/cancel", headers=AUTH)
    assert r.status_code == status
    assert error in r.json()["error"]


def test_a_cancel_needs_the_token_and_a_numeric_id(store, client):
    rid = store.add_request("isolate", T0, instance_id="i-7", reason="x", actor="bob")
    c = client()
    assert c.post(f"/requests/{rid}/cancel").status_code == 401
    assert c.post("/requests/abc/cancel", headers=AUTH).status_code == 400
    assert c.post("/requests/99999999999/cancel", headers=AUTH).status_code == 400  # past INTEGER
    assert [r.id for r in store.pending_requests()] == [rid]


def test_requests_lists_the_queued_then_the_newest_handled_without_a_token(store, client):
    done = store.add_request("isolate", T0 - timedelta(minutes=9), instance_id="i-1", reason="x", actor="bob")
    store.mark_request(done, "applied", T0 - timedelta(minutes=8))
    later = store.add_request("reset_breaker", T0 - timedelta(minutes=7), group_name="chat", reason="y")
    store.cancel_request(later, "carol", T0 - timedelta(minutes=6))
    first = store.add_request("release", T0 - timedelta(minutes=5), instance_id="i-2", actor="bob")
    store.add_request("ack", T0 - timedelta(minutes=4), incident_id="inc-1", actor="human:bob")
    second = store.add_request("isolate", T0 - timedelta(minutes=3), instance_id="i-3", reason="z")
    with store.begin() as conn:
        store.note_request(second, "waiting: ESS cannot be read for group chat", conn)
    r = client().get("/requests")
    assert r.status_code == 200
    rows = r.json()["requests"]
    # queued in the order the leader takes them, then the handled newest first; no acknowledgment
    assert [x["id"] for x in rows] == [first, second, later, done]
    assert [(x["waiting"], x["outcome"]) for x in rows] == [
        (None, None),
        ("waiting: ESS cannot be read for group chat", None),
        (None, "cancelled by carol"),
        (None, "applied"),
    ]
    assert rows[2]["group"] == "chat" and rows[2]["handled_at"] == (T0 - timedelta(minutes=6)).isoformat()
    assert rows[0]["handled_at"] is None and rows[0]["by"] == "bob" and rows[0]["instance_id"] == "i-2"


def test_requests_takes_a_limit_and_refuses_a_bad_one_in_one_line(store, client):
    queued = store.add_request("isolate", T0, instance_id="i-1", reason="x", actor="bob")
    handled = store.add_request("release", T0, instance_id="i-2", actor="bob")
    store.mark_request(handled, "applied", T0)
    c = client()
    assert [x["id"] for x in c.get("/requests", params={"limit": 1}).json()["requests"]] == [queued]
    for bad in ("0", "501", "ten", "-1"):
        r = c.get("/requests", params={"limit": bad})
        assert r.status_code == 400, bad
        assert r.json()["error"].startswith("limit must be a number from 1 to 500"), bad
