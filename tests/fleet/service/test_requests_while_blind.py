"""Operator requests while ESS cannot be read: they wait, the operator is told so and why, and they are
applied once ESS answers again (against the fake, ESS's reads failing)."""

from __future__ import annotations

import json

from fleet.cli import main

RULES = """\
min_size: 1
max_size: 20
warm_floor: 3
cold_start_s: 60
isolation:
  rules:
    - {metric: gpu_temperature_c, above: 85, for: 2m, action: reboot}
"""
ESS_READS = ("DescribeScalingGroups", "DescribeScalingInstances")


def _ids(svc, cloud):
    return [i.instance_id for i in svc.observer.observe(cloud.now()).groups["chat"].instances]


def _ticks(cloud, svc, n, step_s=15):
    for _ in range(n):
        svc.tick(cloud.now())
        cloud.advance(step_s)


def _ess_down(cloud):
    return [cloud.inject_fault(a, code="ServiceUnavailable", status=503) for a in ESS_READS]


def _out(capsys):
    return " ".join(capsys.readouterr().out.split())


def test_an_isolation_asked_during_a_long_ess_outage_waits_says_why_and_is_applied_once_ess_answers(
    fake_world, tmp_path, capsys
):
    cloud, svc, _ = fake_world(RULES)
    node = _ids(svc, cloud)[0]
    _ticks(cloud, svc, 2)  # ESS answers: the instance list is kept
    faults = _ess_down(cloud)
    _ticks(cloud, svc, 1)
    assert svc.last_observation.groups["chat"].blind
    db = f"sqlite:///{tmp_path / 'fleet.db'}"
    capsys.readouterr()
    assert main(["isolate", node, "--reason", "fan noise", "--by", "alice", "--database", db]) == 0
    said = _out(capsys)
    assert "queued" in said and "ESS" in said and "chat" in said  # why it waits, at once
    _ticks(cloud, svc, 8, step_s=900)  # two hours of outage: past an hour
    [req] = svc.store.requests()
    assert req.handled_at is None, req.outcome  # still queued: never expired as not applicable
    assert main(["status", "--json", "--database", db]) == 0
    [queued] = json.loads(capsys.readouterr().out)["requests"]
    assert queued["id"] == req.id and queued["kind"] == "isolate" and queued["instance_id"] == node
    assert "ESS" in queued["waiting"] and "chat" in queued["waiting"]
    assert main(["status", "--database", db]) == 0
    text = _out(capsys)
    assert f"request {req.id}" in text and "isolate" in text and "waiting" in text
    for fault in faults:
        cloud.remove_fault(fault)
    _ticks(cloud, svc, 2)
    [req] = svc.store.requests()
    assert req.outcome == "applied"
    [inc] = svc.store.incidents()
    assert inc.instance_id == node and inc.cause == "manual: fan noise"
    assert main(["status", "--json", "--database", db]) == 0
    assert json.loads(capsys.readouterr().out)["requests"] == []


def test_an_ack_during_an_ess_outage_stops_the_respond_clock_at_once(fake_world, tmp_path, capsys):
    """A human acknowledges an incident detected while ESS is down: the policy takes the ack (it needs no
    ESS), so no respond-by breach is announced for an incident a human answered."""
    cloud, svc, _ = fake_world(RULES)
    ids = _ids(svc, cloud)
    _ticks(cloud, svc, 2)
    _ess_down(cloud)
    for _ in range(10):  # past the rule's two minutes: detected while blind
        for iid in ids:
            temp = 91.0 if iid == ids[0] else 60.0
            cloud.publish_metric(
                "acs_ecs_dashboard", "instance_gpu_gpu_temperature", {"instanceId": iid}, temp
            )
        _ticks(cloud, svc, 1)
    [inc] = svc.store.incidents()
    db = f"sqlite:///{tmp_path / 'fleet.db'}"
    assert main(["incidents", "ack", inc.id, "--by", "alice", "--database", db]) == 0
    for _ in range(80):  # 20 minutes: past the 15-minute respond clock
        for iid in ids:
            temp = 91.0 if iid == ids[0] else 60.0
            cloud.publish_metric(
                "acs_ecs_dashboard", "instance_gpu_gpu_temperature", {"instanceId": iid}, temp
            )
        _ticks(cloud, svc, 1)
    kinds = [e.kind for e in svc.store.incident_events(inc.id)]
    assert "sla_respond_breached" not in kinds, kinds
    [req] = svc.store.requests()
    assert req.outcome == "applied"
    history = svc.last_tick.plan.history.groups["chat"]
    [policy_inc] = [i for i in history.incidents if i.incident_id == inc.id]
    assert policy_inc.acknowledged_by == "human:alice"
