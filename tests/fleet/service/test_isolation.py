"""Node isolation through the service against the in-process fake (issue 6): the workflow's cloud side."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from datetime import datetime, timedelta

import requests
import urllib3

from fleet.service.notify import Channel, Notifier

HOT_RULE = """\
min_size: 1
max_size: 20
warm_floor: 3
cold_start_s: 60
isolation:
  drain_timeout: 60s
  rules:
    - {metric: gpu_temperature_c, above: 85, for: 2m, action: reboot}
"""


def _ids(svc, cloud, *states):
    g = svc.observer.observe(cloud.now()).groups["chat"]
    return [i.instance_id for i in g.instances if not states or i.lifecycle_state in states]


def _publish(cloud, ids, hot, temp_hot=91.0):
    for iid in ids:
        cloud.publish_metric(
            "acs_ecs_dashboard",
            "instance_gpu_gpu_temperature",
            {"instanceId": iid},
            temp_hot if iid in hot else 60.0,
        )
        cloud.put_custom_metric("vllm_num_requests_waiting", {"instanceId": iid}, 0)
        cloud.put_custom_metric("vllm_num_requests_running", {"instanceId": iid}, 0)


def _run(cloud, svc, hot, ticks, cool_after=None, on_tick=None):
    """Tick every 15 s of fake time publishing temperatures; the (serving, standby) counts per tick."""
    seen = []
    for t in range(ticks):
        still_hot = hot if cool_after is None or t < cool_after else set()
        _publish(cloud, _ids(svc, cloud), still_hot)
        result = svc.tick(cloud.now())
        obs = svc.last_observation.groups["chat"]
        seen.append((obs.count("InService", "Pending"), obs.count("Standby")))
        if on_tick:
            on_tick(t, result)
        cloud.advance(15)
    return seen


def test_overheating_instance_is_isolated_rebooted_and_returned_without_breaking_the_floor(fake_world):
    cloud, svc, _ = fake_world(HOT_RULE)
    hot = _ids(svc, cloud)[0]
    seen = _run(cloud, svc, {hot}, ticks=45, cool_after=30)
    done = {(d.action, d.outcome) for d in svc.store.decisions(kind="isolation")}
    assert {("enter_standby", "applied"), ("reboot", "applied"), ("exit_standby", "applied")} <= done
    assert min(serving for serving, _ in seen) >= 3  # the warm floor held throughout
    [inc] = svc.store.incidents()
    assert inc.instance_id == hot and inc.isolated_at is not None


def _answer(status: int) -> requests.Response:
    resp = requests.Response()
    resp.status_code = status
    resp.raw = urllib3.HTTPResponse(body=io.BytesIO(b"{}"), preload_content=False)
    return resp


class _Accepting:
    """A transport for the notifier that accepts every post (mock_aliyun intercepts all of ``requests``)."""

    def __init__(self):
        self.bodies = []

    def post(self, url, json, timeout, **kwargs):
        self.bodies.append(json)
        return _answer(200)


def test_incident_is_acknowledged_once_a_human_channel_was_notified(fake_world):
    transport = _Accepting()
    notifier = Notifier([Channel("webhook", "http://127.0.0.1:9/hook")], backoff_s=0.01, session=transport)
    cloud, svc, _ = fake_world(HOT_RULE, notifier=notifier)
    hot = _ids(svc, cloud)[0]
    _run(cloud, svc, {hot}, ticks=10, on_tick=lambda t, r: notifier.flush(5))
    [inc] = svc.store.incidents()
    assert inc.notified_at is not None
    assert inc.acknowledged_at is not None
    assert any(b["kind"] == "incident" and b["incident_id"] == inc.id for b in transport.bodies)


def test_without_a_channel_isolation_proceeds_unacknowledged(fake_world):
    cloud, svc, _ = fake_world(HOT_RULE)
    hot = _ids(svc, cloud)[0]
    _run(cloud, svc, {hot}, ticks=14)
    [inc] = svc.store.incidents()
    assert inc.acknowledged_at is None and inc.isolated_at is not None


def test_ten_hot_instances_stop_at_the_guardrail(fake_world):
    cloud, svc, _ = fake_world(HOT_RULE.replace("warm_floor: 3", "warm_floor: 2"), in_service=10)
    hot = set(_ids(svc, cloud))
    seen = _run(cloud, svc, hot, ticks=20)
    limit = 2  # the default max_isolated: max(1, 20% of 10)
    assert max(standby for _, standby in seen) <= limit
    codes = {w.code.value for gp in svc.last_tick.plan.groups for w in gp.warnings} | {
        w.code.value for w in svc.last_tick.plan.warnings
    }
    assert codes & {"breaker_open", "guardrail_max_isolated"}


def test_restart_mid_isolation_resumes_without_repeating_a_write(fake_world):
    cloud, svc, _ = fake_world(HOT_RULE)
    hot = _ids(svc, cloud)[0]

    def entered(_t, _r):
        return any(
            d.action == "enter_standby" and d.outcome == "applied"
            for d in svc.store.decisions(kind="isolation")
        )

    for _ in range(30):
        _run(cloud, svc, {hot}, ticks=1)
        if entered(0, None):
            break
    [before] = svc.store.incidents()
    # The replica dies without releasing its lease; a new one starts on the same database.
    cloud.advance(svc.settings.lease_ttl_s + 1)
    _, svc2, _ = fake_world(HOT_RULE)
    _run(cloud, svc2, {hot}, ticks=20, cool_after=5)
    [after] = svc2.store.incidents()
    assert (after.respond_by, after.isolate_by, after.detected_at) == (
        before.respond_by,
        before.isolate_by,
        before.detected_at,
    )
    assert sum(1 for _, action in cloud.calls if action == "EnterStandby") == 1
    assert any(d.action == "exit_standby" and d.outcome == "applied" for d in svc2.store.decisions())


def test_hardware_xid_leads_to_replacement(fake_world):
    cloud, svc, _ = fake_world("""\
        min_size: 1
        max_size: 20
        warm_floor: 3
        cold_start_s: 60
        isolation:
          drain_timeout: 30s
          rules:
            - {name: xid_hw, xids: [79], action: replace}
        """)
    bad = _ids(svc, cloud)[0]
    for t in range(25):
        for iid in _ids(svc, cloud):
            cloud.put_custom_metric("vllm_num_requests_waiting", {"instanceId": iid}, 0)
            cloud.put_custom_metric("vllm_num_requests_running", {"instanceId": iid}, 0)
        if t == 0:
            cloud.put_custom_metric("gpu_xid", {"instanceId": bad}, 79)
        svc.tick(cloud.now())
        cloud.advance(15)
    assert any(
        d.action == "remove" and d.outcome == "applied" and d.instance_id == bad
        for d in svc.store.decisions(kind="isolation")
    )
    assert bad not in _ids(svc, cloud)


def test_operator_isolate_request_opens_a_manual_incident(fake_world):
    cloud, svc, _ = fake_world(HOT_RULE)
    target = _ids(svc, cloud)[1]
    svc.store.add_request("isolate", cloud.now(), instance_id=target, reason="ECC storm", actor="alice")
    _run(cloud, svc, set(), ticks=3)
    [inc] = svc.store.incidents()
    assert inc.instance_id == target
    assert inc.body["manual"] is True
    assert svc.store.pending_requests() == []


def test_a_manual_incident_shows_the_operators_reason_as_its_cause(fake_world):
    cloud, svc, _ = fake_world(HOT_RULE)
    target = _ids(svc, cloud)[1]
    svc.store.add_request("isolate", cloud.now(), instance_id=target, reason="fan noise", actor="alice")
    _run(cloud, svc, set(), ticks=2)
    [inc] = svc.store.incidents()
    assert inc.cause == "manual: fan noise"


def test_request_for_an_unknown_instance_is_refused_and_closed(fake_world):
    cloud, svc, _ = fake_world(HOT_RULE)
    svc.store.add_request("isolate", cloud.now(), instance_id="i-nowhere", reason="x", actor="alice")
    _run(cloud, svc, set(), ticks=1)
    [req] = svc.store.requests()
    assert req.handled_at is not None and "not in any configured group" in req.outcome


XID_RULES = """\
min_size: 1
max_size: 20
warm_floor: 3
cold_start_s: 60
isolation:
  drain_timeout: 30s
  rules:
    - {name: xid_app, xids: [13], repeat: 3, window: 10m, action: reboot}
"""


def _xid_ticks(cloud, svc, bad, publish_at):
    """25 ticks 15 s apart; XID 13 reported at the given ticks and 0 (none) at the others. Reports of one
    code closer than 2 min are one occurrence (the agent repeats its last XID), so repeats are spaced."""
    for t in range(25):
        for iid in _ids(svc, cloud):
            cloud.put_custom_metric("vllm_num_requests_waiting", {"instanceId": iid}, 0)
            cloud.put_custom_metric("vllm_num_requests_running", {"instanceId": iid}, 0)
        cloud.put_custom_metric("gpu_xid", {"instanceId": bad}, 13 if t in publish_at else 0)
        svc.tick(cloud.now())
        cloud.advance(15)


def test_a_single_application_xid_opens_no_incident(fake_world):
    cloud, svc, _ = fake_world(XID_RULES)
    _xid_ticks(cloud, svc, _ids(svc, cloud)[0], publish_at={0})
    assert svc.store.incidents() == []


def test_repeated_application_xids_open_an_incident(fake_world):
    cloud, svc, _ = fake_world(XID_RULES)
    bad = _ids(svc, cloud)[0]
    _xid_ticks(cloud, svc, bad, publish_at={0, 10, 20})
    assert [i.instance_id for i in svc.store.incidents()] == [bad]


def test_a_request_waiting_for_ess_waits_past_an_hour_and_expires_after_a_day(fake_world):
    """The group cannot be read, so the policy never sees the request: it waits for ESS and says why; before,
    it expired after an hour as not applicable (test_requests_while_blind.py). After a day (as long as the
    service watches the last instance list read) it expires, saying why: an isolation asked a day ago is
    not applied out of the blue."""
    cloud, svc, _ = fake_world(HOT_RULE)
    target = _ids(svc, cloud)[0]
    svc.store.add_request("isolate", cloud.now(), instance_id=target, reason="x", actor="alice")
    cloud.inject_fault("DescribeScalingInstances", code="InternalError", status=500)
    svc.tick(cloud.now())
    cloud.advance(3700)
    svc.tick(cloud.now())
    [req] = svc.store.pending_requests()
    assert req.outcome.startswith("waiting: ESS cannot be read for group chat")
    cloud.advance(86400)
    svc.tick(cloud.now())
    [req] = svc.store.requests()
    assert req.handled_at is not None
    assert req.outcome.startswith("expired: ESS could not be read for group chat for a day")


class _RefusingIncidents(_Accepting):
    """Accepts every notification except the incident itself, so nobody acknowledges it."""

    def post(self, url, json, timeout, **kwargs):
        if json["kind"] == "incident":
            self.bodies.append(json)
            return _answer(503)
        return super().post(url, json, timeout, **kwargs)


def test_sla_risk_and_breach_are_notified_once_each_and_counted(fake_world):
    transport = _RefusingIncidents()
    notifier = Notifier(
        [Channel("webhook", "http://127.0.0.1:9/hook")], backoff_s=0.01, max_attempts=1, session=transport
    )
    rule = HOT_RULE.replace("  drain_timeout: 60s", "  drain_timeout: 60s\n  respond_within: 2m")
    cloud, svc, _ = fake_world(rule, notifier=notifier)
    hot = _ids(svc, cloud)[0]
    _run(cloud, svc, {hot}, ticks=20, on_tick=lambda t, r: notifier.flush(5))
    kinds = [b["kind"] for b in transport.bodies]
    assert kinds.count("sla_risk") == 1
    assert kinds.count("sla_breach") == 1
    assert svc.metrics.registry.get_sample_value("fleet_sla_breaches_total", {"kind": "respond"}) == 1


def test_sla_timers_are_exported_per_open_incident(fake_world):
    cloud, svc, _ = fake_world(HOT_RULE)
    hot = _ids(svc, cloud)[0]
    _run(cloud, svc, {hot}, ticks=10)
    [inc] = svc.store.incidents()
    labels = {"incident": inc.id, "instance": hot}
    left = svc.metrics.registry.get_sample_value("fleet_incident_respond_by_seconds", labels)
    assert left == (inc.respond_by - svc.last_tick.at).total_seconds()
    assert svc.metrics.registry.get_sample_value("fleet_incidents", {"state": inc.state}) == 1


def test_an_ecs_system_failure_event_opens_an_incident(fake_world):
    cloud, svc, _ = fake_world("""\
        min_size: 1
        max_size: 20
        warm_floor: 3
        isolation:
          rules:
            - {name: ecs_failure, events: ["SystemFailure.*"], action: replace}
        """)
    bad = _ids(svc, cloud)[2]
    cloud.add_system_event(bad, "SystemFailure.Reboot")
    _run(cloud, svc, set(), ticks=2)
    [inc] = svc.store.incidents()
    assert inc.instance_id == bad and "ecs_failure" in inc.cause


def test_replacing_a_node_launches_exactly_one_replacement(fake_world):
    # The surge replaces the bad node; its removal must lower desired capacity, or ESS launches a second one.
    cloud, svc, _ = fake_world("""\
        min_size: 1
        max_size: 20
        warm_floor: 3
        cold_start_s: 60
        isolation:
          drain_timeout: 30s
          rules:
            - {name: xid_hw, xids: [79], action: replace}
        """)
    before = set(_ids(svc, cloud))
    bad = sorted(before)[0]
    for t in range(40):
        for iid in _ids(svc, cloud):
            cloud.put_custom_metric("vllm_num_requests_waiting", {"instanceId": iid}, 0)
            cloud.put_custom_metric("vllm_num_requests_running", {"instanceId": iid}, 0)
        if t == 0:
            cloud.put_custom_metric("gpu_xid", {"instanceId": bad}, 79)
        svc.tick(cloud.now())
        cloud.advance(15)
    launched = {i.instance_id for i in cloud.ecs.instances.values()} - before
    assert len(launched) == 1
    assert sorted(_ids(svc, cloud, "InService")) == sorted((before - {bad}) | launched)


def test_incidents_within_the_breaker_limit_are_isolated_when_one_past_it_trips_it(fake_world):
    """Three nodes overheat together and the breaker allows two: the two go to Standby, the third waits
    for a human, and actuation never refuses what the policy admitted."""
    config = HOT_RULE.replace("warm_floor: 3", "warm_floor: 2") + (
        "guardrails: {max_isolated: 5, breaker: {max_isolations: 2, window: 1h}}\n"
    )
    cloud, svc, _ = fake_world(config, in_service=10)
    hot = set(_ids(svc, cloud)[:3])
    seen = _run(cloud, svc, hot, ticks=16)
    decisions = svc.store.decisions(kind="isolation")
    assert not [d for d in decisions if d.outcome == "blocked"]
    entered = {d.instance_id for d in decisions if d.action == "enter_standby" and d.outcome == "applied"}
    assert len(entered) == 2 and entered <= hot
    assert max(standby for _, standby in seen) == 2
    incidents = svc.store.incidents()
    assert len(incidents) == 3
    [waiting] = [i for i in incidents if i.instance_id not in entered]
    assert waiting.isolated_at is None
    assert svc.last_tick.plan.history.groups["chat"].breaker.open


def test_fleet_reset_breaker_lets_the_held_incident_be_isolated(fake_world, capsys):
    """Only a human ends an open breaker, and nothing let a human do it: no command, endpoint or page
    queued a reset, so automatic isolation stayed stopped (and scale-in blocked) until someone wrote
    the request into the database by hand."""
    from fleet.cli import main

    config = HOT_RULE.replace("warm_floor: 3", "warm_floor: 2") + (
        "guardrails: {max_isolated: 5, breaker: {max_isolations: 2, window: 1m}}\n"
    )
    cloud, svc, _ = fake_world(config, in_service=10)
    hot = set(_ids(svc, cloud)[:3])
    _run(cloud, svc, hot, ticks=16)  # tripped at detection; its window has passed since: a reset admits
    assert svc.last_tick.plan.history.groups["chat"].breaker.open
    db = str(svc.store.engine.url)
    assert main(["reset-breaker", "chta", "--reason", "x", "--database", db]) == 2  # a typo: refused at once
    assert "no such group; it has: chat" in capsys.readouterr().err
    assert (
        main(["reset-breaker", "chat", "--reason", "fans replaced", "--by", "alice", "--database", db]) == 0
    )
    _run(cloud, svc, hot, ticks=4)
    breaker = svc.last_tick.plan.history.groups["chat"].breaker
    assert breaker.reason.startswith("reset by alice") and "fans replaced" in breaker.reason
    assert all(i.isolated_at is not None for i in svc.store.incidents())  # the held one went too
    [req] = [r for r in svc.store.requests() if r.kind == "reset_breaker"]
    assert req.outcome == "applied" and req.group_name == "chat"


def test_a_replica_started_while_ess_is_down_watches_the_instances_the_last_one_read(fake_world):
    cloud, svc, _ = fake_world(HOT_RULE)
    ids = _ids(svc, cloud)
    _run(cloud, svc, set(), ticks=2)  # ESS answers: the group's instances are read and kept in the store
    svc.close()
    cloud.advance(svc.settings.lease_ttl_s + 1)
    for action in ("DescribeScalingGroups", "DescribeScalingInstances"):
        cloud.inject_fault(action, code="ServiceUnavailable", status=503)
    _, svc2, _ = fake_world(HOT_RULE)  # restarted on the same store while ESS is down
    for _ in range(12):  # three minutes: past the rule's two
        _publish(cloud, ids, {ids[0]})
        svc2.tick(cloud.now())
        cloud.advance(15)
    [inc] = svc2.store.incidents()
    assert inc.instance_id == ids[0] and inc.detected_at is not None
    assert svc2.last_observation.groups["chat"].blind


def test_a_kept_instance_list_survives_the_store_and_a_damaged_row_is_left_out():
    from datetime import UTC, datetime

    from fleet.cloud.types import ScalingInstance
    from fleet.service.observe import instance_from_json, instance_json

    inst = ScalingInstance(
        "i-1", "asg-1", "InService", "Healthy", "AutoCreated", datetime(2026, 3, 2, tzinfo=UTC), "cn-a"
    )
    assert instance_from_json(instance_json(inst)) == inst
    assert instance_from_json({"instance_id": 7}) is None
    assert instance_from_json({**instance_json(inst), "created_at": "yesterday"}) is None
    assert instance_from_json("i-1") is None


def test_fleet_replace_removes_an_instance_held_for_diagnosis(fake_world, capsys):
    """A held node stays in Standby "until an operator releases it or asks to replace it", and nothing let
    an operator ask: no command or endpoint queued a replace."""
    from fleet.cli import main

    cloud, svc, _ = fake_world(HOT_RULE)
    target = _ids(svc, cloud)[1]
    db = str(svc.store.engine.url)
    assert main(["replace", target, "--database", db]) == 2  # nothing isolated it: nothing to replace
    assert "nothing to replace" in capsys.readouterr().err
    svc.store.add_request("isolate", cloud.now(), instance_id=target, reason="ECC storm", actor="alice")
    _run(cloud, svc, set(), ticks=6)
    [inc] = svc.store.incidents()
    assert inc.state == "remediating" and target in _ids(svc, cloud, "Standby")  # held for a human
    assert main(["replace", target, "--by", "alice", "--database", db]) == 0
    _run(cloud, svc, set(), ticks=4)
    [inc] = svc.store.incidents()
    assert inc.outcome == "replaced" and target not in _ids(svc, cloud)
    assert {("remove", "applied")} <= {(d.action, d.outcome) for d in svc.store.decisions(kind="isolation")}


def test_a_group_renamed_in_the_config_goes_on_with_its_isolated_node(fake_world):
    """The history and the store kept the open incident under the old name, which no tick decided any
    more: the node stayed in Standby for good and `fleet release` did nothing. The group now holding the
    node takes the incident over."""
    cloud, svc, _ = fake_world(HOT_RULE)
    target = _ids(svc, cloud)[1]
    svc.store.add_request("isolate", cloud.now(), instance_id=target, reason="fans", actor="alice")
    _run(cloud, svc, set(), ticks=4)
    [inc] = svc.store.incidents()
    assert inc.isolated_at is not None and target in _ids(svc, cloud, "Standby")
    # as if the config had named this scaling group "chat-old" until now
    history = svc.store.load_history()
    history["groups"]["chat-old"] = history["groups"].pop("chat")
    svc.store.save_history(history, cloud.now(), svc.last_tick.lease_epoch)
    svc.store.upsert_incident(replace(inc, group_name="chat-old"))
    _run(cloud, svc, set(), ticks=1)
    assert svc.store.incident(inc.id).group_name == "chat"
    svc.store.add_request("release", cloud.now(), instance_id=target, actor="alice")
    _run(cloud, svc, set(), ticks=3)
    assert svc.store.incident(inc.id).outcome == "released" and target in _ids(svc, cloud, "InService")


MAINTENANCE_RULE = """\
min_size: 3
max_size: 20
warm_floor: 3
isolation:
  rules:
    - {name: ecs_maintenance, events: ["SystemMaintenance.*"], action: reboot}
"""


def test_maintenance_ecs_schedules_weeks_ahead_then_cancels_opens_and_closes_an_incident_untouched(
    fake_world,
):
    cloud, svc, _ = fake_world(MAINTENANCE_RULE)
    node = _ids(svc, cloud)[1]
    event = cloud.add_system_event(
        node, "SystemMaintenance.Reboot", "Scheduled", not_before=cloud.now() + timedelta(days=21)
    )
    _run(cloud, svc, set(), ticks=4)
    [inc] = svc.store.incidents()
    assert inc.instance_id == node and inc.closed_at is None and inc.isolated_at is None
    assert inc.isolate_by > cloud.now() + timedelta(days=20)  # the NotBefore: isolated as it nears
    # ECS's FullStatus unreadable for a tick: the event is not listed, and that is no cancellation
    fault = cloud.inject_fault("DescribeInstancesFullStatus", code="ServiceUnavailable", status=503)
    _run(cloud, svc, set(), ticks=2)
    cloud.remove_fault(fault)
    assert svc.store.incident(inc.id).closed_at is None
    cloud.ecs.set_event_status(event, "Canceled")
    _run(cloud, svc, set(), ticks=2)
    done = svc.store.incident(inc.id)
    assert done.closed_at is not None and (done.body or {}).get("outcome") == "event_ended"
    touched = {"enter_standby", "reboot", "remove", "exit_standby", "surge"}
    assert not [d for d in svc.store.decisions(kind="isolation") if d.action in touched]
    assert _ids(svc, cloud, "InService").count(node) == 1


def test_incidents_list_shows_when_a_deferred_isolation_falls_due(fake_world, tmp_path, capsys):
    """A maintenance ECS scheduled three weeks ahead: `fleet incidents` (table and --json) says when its
    isolation falls due (``due_at``); before, the list showed only the time left to the NotBefore."""
    from fleet.cli import main

    cloud, svc, _ = fake_world(MAINTENANCE_RULE)
    node = _ids(svc, cloud)[1]
    cloud.add_system_event(
        node, "SystemMaintenance.Reboot", "Scheduled", not_before=cloud.now() + timedelta(days=21)
    )
    _run(cloud, svc, set(), ticks=2)
    [inc] = svc.store.incidents()
    due = datetime.fromisoformat(inc.body["due_at"])
    db = f"sqlite:///{tmp_path / 'fleet.db'}"
    capsys.readouterr()
    assert main(["incidents", "--json", "--database", db]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert datetime.fromisoformat(row["due_at"]) == due
    assert 20 * 86400 < row["due_in_s"] < 21 * 86400
    assert main(["incidents", "--database", db]) == 0
    out = capsys.readouterr().out
    assert "isolation due" in out and due.strftime("%Y-%m-%d %H:%M") in out
