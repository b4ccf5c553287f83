"""Withdrawing a queued operator request (``fleet cancel-request``, ``Store.cancel_request``): before, an
operator who queued the wrong isolation had no way to take it back before the leader acted on it."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from fleet.cli import main
from fleet.service.store import CancelOutcome, DecisionRecord, open_store
from tests.fleet.service.test_isolation import HOT_RULE

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


def _store(tmp_path):
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    store = open_store(url)
    fields = {"group_name": "chat", "kind": "scale", "action": "scale_to", "decision_id": "d"}
    store.record_decision(DecisionRecord(service="fleet", at=T0, outcome="noop", **fields))
    return url, store


def _err(capsys) -> str:
    return " ".join(capsys.readouterr().err.split())


def test_a_queued_isolation_is_cancelled_with_who_and_when(tmp_path, capsys):
    url, store = _store(tmp_path)
    assert main(["isolate", "i-7", "--reason", "ECC storm", "--database", url]) == 0
    [queued] = store.pending_requests()
    assert (
        main(["cancel-request", str(queued.id), "--by", "carol", "--reason", "wrong host", "--database", url])
        == 0
    )
    assert f"request {queued.id} (isolate i-7) cancelled by carol" in capsys.readouterr().out
    assert store.pending_requests() == []
    [req] = store.requests()
    assert req.outcome == "cancelled by carol: wrong host"
    assert req.handled_at is not None


def test_a_request_already_handled_cannot_be_cancelled(tmp_path, capsys):
    url, store = _store(tmp_path)
    rid = store.add_request("isolate", T0, instance_id="i-7", reason="x", actor="bob")
    store.mark_request(rid, "applied", T0 + timedelta(seconds=15))
    assert main(["cancel-request", str(rid), "--database", url]) == 2
    err = _err(capsys)
    assert f"request {rid} (isolate i-7) was already handled at 2026-03-02T08:00:15+00:00: applied" in err
    assert "Traceback" not in err
    [req] = store.requests()
    assert req.outcome == "applied"


def test_a_cancelled_request_cannot_be_cancelled_again(tmp_path, capsys):
    url, store = _store(tmp_path)
    rid = store.add_request("reset_breaker", T0, group_name="chat", reason="x", actor="bob")
    assert main(["cancel-request", str(rid), "--by", "carol", "--database", url]) == 0
    assert main(["cancel-request", str(rid), "--by", "dave", "--database", url]) == 2
    assert "was already handled" in _err(capsys)
    assert [r.outcome for r in store.requests()] == ["cancelled by carol"]


def test_an_unknown_request_is_refused_in_one_line(tmp_path, capsys):
    url, _ = _store(tmp_path)
    assert main(["cancel-request", "99", "--database", url]) == 2
    assert "request 99: no such request" in _err(capsys)


@pytest.mark.parametrize("raw", ["i-7", "7x", "7.0", "99999999999999999999", "\u0667"])
def test_a_request_id_that_is_not_a_requests_number_is_refused_in_one_line(tmp_path, capsys, raw):
    url, store = _store(tmp_path)
    rid = store.add_request("isolate", T0, instance_id="i-7", reason="x", actor="bob")
    assert main(["cancel-request", raw, "--database", url]) == 2
    err = capsys.readouterr().err
    assert "request id must be a request's number" in err and len(err.strip().splitlines()) == 1
    assert [r.id for r in store.pending_requests()] == [rid]


def test_an_acknowledgment_is_not_cancelled(tmp_path, capsys):
    url, store = _store(tmp_path)
    rid = store.add_request("ack", T0, incident_id="inc-1", actor="human:bob")
    assert main(["cancel-request", str(rid), "--database", url]) == 2
    assert f"request {rid} is an acknowledgment" in _err(capsys)
    assert [r.id for r in store.pending_requests()] == [rid]


def test_another_services_request_is_refused_naming_it(tmp_path):
    url, store = _store(tmp_path)
    rid = open_store(url, service="other").add_request("release", T0, instance_id="i-7", actor="bob")
    assert store.cancel_request(rid, "carol", T0)[0] == CancelOutcome.OTHER_SERVICE
    assert open_store(url, service="other").pending_requests()[0].id == rid


def test_the_leader_does_not_overwrite_a_cancel(tmp_path):
    """A leader that read the request before the cancel marks nothing over it."""
    _, store = _store(tmp_path)
    rid = store.add_request("isolate", T0, instance_id="i-7", reason="x", actor="bob")
    assert store.cancel_request(rid, "carol", T0)[0] == CancelOutcome.CANCELLED
    assert store.mark_request(rid, "applied", T0 + timedelta(seconds=15)) is False
    assert [r.outcome for r in store.requests()] == ["cancelled by carol"]


def _ids(svc, cloud):
    return [i.instance_id for i in svc.observer.observe(cloud.now()).groups["chat"].instances]


def test_a_cancel_during_the_tick_that_takes_the_request_writes_nothing(fake_world):
    """The tick read the isolation, then the operator withdrew it: the plan applying it is not saved and
    not carried out, and the next tick decides without it."""
    cloud, svc, _ = fake_world(HOT_RULE)
    target = _ids(svc, cloud)[1]
    rid = svc.store.add_request("isolate", cloud.now(), instance_id=target, reason="x", actor="bob")
    read = svc.store.pending_requests

    def read_then_cancel():
        queued = read()
        assert svc.store.cancel_request(rid, "carol", cloud.now())[0] == CancelOutcome.CANCELLED
        return queued

    svc.store.pending_requests = read_then_cancel
    calls = len(list(cloud.calls))
    result = svc.tick(cloud.now())
    assert any(f"request {rid} was cancelled" in e for e in result.errors)
    assert not [a for _, a in list(cloud.calls)[calls:] if not a.startswith("Describe")]  # no write
    svc.store.pending_requests = read
    for _ in range(3):
        svc.tick(cloud.advance(15))
    assert svc.store.incidents() == []
    assert [r.outcome for r in svc.store.requests()] == ["cancelled by carol"]


def test_fleet_requests_lists_the_queued_then_the_handled_with_their_outcome(tmp_path, capsys):
    """``fleet requests`` (before, only ``fleet status`` listed requests, the queued ones alone): a queued
    isolate with why it waits, and a cancelled one with who cancelled it; --json has GET /requests' shape."""
    url, store = _store(tmp_path)
    assert main(["isolate", "i-7", "--reason", "ECC storm", "--by", "alice", "--database", url]) == 0
    assert main(["isolate", "i-9", "--reason", "hot", "--by", "bob", "--database", url]) == 0
    first, second = store.pending_requests()
    assert main(["cancel-request", str(first.id), "--by", "carol", "--database", url]) == 0
    capsys.readouterr()
    assert main(["requests", "--database", url, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["requests"]
    assert [(r["id"], r["instance_id"], r["by"]) for r in rows] == [
        (second.id, "i-9", "bob"),
        (first.id, "i-7", "alice"),
    ]
    assert rows[0]["handled_at"] is None and rows[0]["outcome"] is None
    assert rows[1]["handled_at"] is not None and rows[1]["outcome"] == "cancelled by carol"
    assert main(["requests", "--database", url]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"request {second.id} (isolate i-9, by bob, queued " in out
    assert "): the leader takes it on its next tick" in out
    assert "isolate i-7" in out and "cancelled by carol" in out


def _lines(capsys, start: str) -> list[str]:
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith(start)]


def test_fleet_requests_and_fleet_status_print_a_queued_request_in_the_same_line(tmp_path, capsys):
    """Before, ``fleet status`` said ``request N (isolate i-7, by alice, queued T): ...`` and ``fleet
    requests`` a table row ``queued: ...``, other words for the same wait; now one function writes both."""
    url, store = _store(tmp_path)
    assert main(["isolate", "i-7", "--reason", "ECC storm", "--by", "alice", "--database", url]) == 0
    waits = store.add_request("release", T0, instance_id="i-9", actor="bob")
    with store.begin() as conn:
        store.note_request(waits, "waiting: ESS cannot be read for group chat", conn)
    capsys.readouterr()
    assert main(["status", "--database", url]) == 0
    status = _lines(capsys, "request ")
    assert main(["requests", "--database", url]) == 0
    listed = _lines(capsys, "request ")
    assert len(status) == 2 and listed == status
    assert status[1] == (
        f"request {waits} (release i-9, by bob, queued 2026-03-02T08:00:00): "
        "waiting: ESS cannot be read for group chat"
    )


def test_fleet_requests_refuses_a_limit_out_of_range_in_one_line(tmp_path, capsys):
    url, _ = _store(tmp_path)
    assert main(["requests", "--limit", "0", "--database", url]) == 2
    err = capsys.readouterr().err.strip()
    assert "--limit" in err and "\n" not in err
