"""The service store: migrations at start-up, decisions, history, incidents, controls and requests round-
trip.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from fleet.service.store import (
    AckOutcome,
    DecisionRecord,
    IncidentEvent,
    IncidentRecord,
    default_database_url,
    open_store,
)

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


def _decision(**kw):
    base = dict(
        service="fleet",
        at=T0,
        group_name="chat",
        kind="scale",
        action="scale_to",
        decision_id="chat:0",
        outcome="applied",
        target=4,
        reason="queue_waiting_per_instance above 2 for 30s",
        inputs={"queue_waiting_per_instance": 3.5},
    )
    base.update(kw)
    return DecisionRecord(**base)


def test_open_store_applies_migrations_to_head(database_url):
    store = open_store(database_url)
    names = set(sa.inspect(store.engine).get_table_names())
    assert {"leases", "decisions", "policy_state", "incidents", "incident_events", "alembic_version"} <= names


def test_a_store_a_newer_version_migrated_is_refused_by_name_and_left_as_it_is(database_url):
    # was alembic's "Can't locate revision identified by '0099_future'", which names no cause
    from fleet.service.store import StoreTooNew

    store = open_store(database_url)
    with store.engine.begin() as c:
        c.execute(sa.text("UPDATE alembic_version SET version_num = '0099_future'"))
    store.close()
    with pytest.raises(StoreTooNew, match="revision 0099_future, which this fleet version does not know"):
        open_store(database_url)
    engine = sa.create_engine(database_url)
    with engine.connect() as c:
        assert c.execute(sa.text("SELECT version_num FROM alembic_version")).scalar_one() == "0099_future"
    engine.dispose()


def test_open_store_twice_is_idempotent(database_url):
    open_store(database_url).close()
    store = open_store(database_url)
    with store.engine.connect() as c:
        assert c.execute(sa.text("select count(*) from alembic_version")).scalar_one() == 1


def test_decision_round_trips_with_aware_utc_time(database_url):
    store = open_store(database_url)
    store.record_decision(_decision(at=T0.astimezone(tz=None)))
    [got] = store.decisions()
    assert got.at == T0 and got.at.tzinfo is not None
    assert got.inputs == {"queue_waiting_per_instance": 3.5}
    assert got.target == 4


def test_decisions_filter_by_since_newest_first(database_url):
    store = open_store(database_url)
    for i in range(3):
        store.record_decision(_decision(at=T0 + timedelta(minutes=i), decision_id=f"chat:{i}"))
    got = store.decisions(since=T0 + timedelta(minutes=1))
    assert [d.decision_id for d in got] == ["chat:2", "chat:1"]


def test_applied_count_ignores_other_outcomes(database_url):
    store = open_store(database_url)
    store.record_decision(_decision())
    store.record_decision(_decision(outcome="conflict"))
    store.record_decision(_decision(outcome="dry_run"))
    assert store.applied_count("chat", "scale", "scale_to") == 1


def test_history_is_replaced_not_appended(database_url):
    store = open_store(database_url)
    assert store.load_history() is None
    store.save_history({"v": 1}, T0, epoch=1)
    store.save_history({"v": 2}, T0, epoch=1)
    assert store.load_history() == {"v": 2}


def test_histories_of_two_services_are_separate(database_url):
    a = open_store(database_url, service="a")
    b = open_store(database_url, service="b")
    a.save_history({"who": "a"}, T0, epoch=None)
    assert b.load_history() is None


def _incident(**kw):
    base = dict(
        id="inc-1",
        service="fleet",
        group_name="chat",
        instance_id="i-1",
        state="detected",
        detected_at=T0,
        updated_at=T0,
        cause="gpu_temperature_c above 85 for 2m",
        respond_by=T0 + timedelta(minutes=15),
        isolate_by=T0 + timedelta(hours=4),
    )
    base.update(kw)
    return IncidentRecord(**base)


def test_upsert_incident_reports_new_once(database_url):
    store = open_store(database_url)
    assert store.upsert_incident(_incident()) is True
    assert store.upsert_incident(_incident(state="isolated")) is False
    assert store.incident("inc-1").state == "isolated"


def test_service_update_keeps_a_human_acknowledgment(database_url):
    store = open_store(database_url)
    store.upsert_incident(_incident())
    store.acknowledge_incident("inc-1", "alice", T0 + timedelta(minutes=3))
    store.upsert_incident(_incident(state="isolated"))
    got = store.incident("inc-1")
    assert got.acknowledged_by == "human:alice"
    assert got.acknowledged_at == T0 + timedelta(minutes=3)


def test_acknowledging_an_unknown_incident_says_so(database_url):
    assert open_store(database_url).acknowledge_incident("nope", "alice", T0) == AckOutcome.UNKNOWN


def test_acknowledging_a_closed_incident_changes_nothing(database_url):
    """An ack after the close was written as the response time: an incident that recovered unanswered
    before its respond-by became a respond breach in the SLA report once someone acked it late."""
    store = open_store(database_url)
    closed = T0 + timedelta(minutes=5)
    store.upsert_incident(_incident(state="closed", closed_at=closed, body={"outcome": "recovered"}))
    assert store.acknowledge_incident("inc-1", "alice", T0 + timedelta(hours=2)) == AckOutcome.CLOSED
    got = store.incident("inc-1")
    assert got.acknowledged_at is None and got.acknowledged_by is None
    assert store.incident_events("inc-1") == []


def test_open_only_excludes_closed_incidents(database_url):
    store = open_store(database_url)
    store.upsert_incident(_incident())
    store.upsert_incident(_incident(id="inc-2", closed_at=T0 + timedelta(hours=1), state="closed"))
    assert [i.id for i in store.incidents(open_only=True)] == ["inc-1"]


def test_incident_timeline_is_in_time_order(database_url):
    store = open_store(database_url)
    store.add_incident_event(IncidentEvent("inc-1", T0 + timedelta(minutes=2), "isolated"))
    store.add_incident_event(IncidentEvent("inc-1", T0, "detected"))
    assert [e.kind for e in store.incident_events("inc-1")] == ["detected", "isolated"]


def test_pause_and_resume_a_group(database_url):
    store = open_store(database_url)
    store.set_paused("chat", True, "alice", T0)
    assert store.paused_groups() == {"chat"}
    store.set_paused("chat", False, "alice", T0)
    assert store.paused_groups() == set()


def test_operator_request_is_pending_until_marked(database_url):
    store = open_store(database_url)
    rid = store.add_request("isolate", T0, instance_id="i-9", reason="ECC errors", actor="alice")
    assert [r.instance_id for r in store.pending_requests()] == ["i-9"]
    store.mark_request(rid, "incident inc-9 opened", T0)
    assert store.pending_requests() == []


def test_default_database_url_prefers_the_environment():
    assert (
        default_database_url({"FLEET_DATABASE_URL": "postgresql+psycopg://h/db"})
        == "postgresql+psycopg://h/db"
    )
    assert default_database_url({}) == "sqlite:///fleet.db"


def test_a_migration_that_fails_before_its_version_stamp_leaves_nothing_behind(tmp_path, monkeypatch):
    """SQLite ran the migrations' DDL in autocommit: a start-up that died between a migration's CREATE TABLE
    and alembic's version stamp left the tables under the old revision, and every later start failed with
    ``table leases already exists``."""
    from alembic.runtime.migration import HeadMaintainer

    from fleet.service.store import make_engine, migrate

    url = f"sqlite:///{tmp_path / 'fleet.db'}"

    def killed(*_args, **_kwargs):
        raise RuntimeError("killed before the version stamp")

    with monkeypatch.context() as m:
        m.setattr(HeadMaintainer, "update_to_step", killed)
        engine = make_engine(url)
        with pytest.raises(RuntimeError, match="version stamp"):
            migrate(engine)
        engine.dispose()
    assert sa.inspect(make_engine(url)).get_table_names() == []
    store = open_store(url)  # the next start migrates from scratch
    assert "leases" in sa.inspect(store.engine).get_table_names()
