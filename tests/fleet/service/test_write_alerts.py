"""Scale writes that keep failing page the notification channels: once when the run starts (3 writes and
5 minutes), again only after 2 hours of it, and once when a write goes through again; against the fake
cloud's RAM denial and injected throttling, through the notifier's own delivery."""

from __future__ import annotations

import io

import requests
import urllib3

from fleet.service.notify import Channel, Notifier
from fleet.service.settings import ServiceSettings
from fleet.service.write_alerts import FAILING, RECOVERED, STILL_FAILING, event_key

# against the in-process fake: no request budget to wait on (as the simulator runs)
SETTINGS = ServiceSettings(call_rate_limit=False)
# 2 InService, a warm floor of 3: every tick wants one more, so every tick writes (or tries to)
WANTS_MORE = """\
    min_size: 1
    max_size: 10
    warm_floor: 3
    cold_start_s: 60
"""


class _Accepting:
    """A transport for the notifier that accepts every post (mock_aliyun intercepts all of ``requests``)."""

    def __init__(self):
        self.bodies: list[dict] = []

    def post(self, url, json, timeout, **kwargs):
        self.bodies.append(json)
        resp = requests.Response()
        resp.status_code = 200
        resp.raw = urllib3.HTTPResponse(body=io.BytesIO(b"{}"), preload_content=False)
        return resp


def _world(fake_world, **kwargs):
    transport = _Accepting()
    notifier = Notifier([Channel("webhook", "http://127.0.0.1:9/hook")], backoff_s=0.01, session=transport)
    cloud, svc, gid = fake_world(WANTS_MORE, in_service=2, notifier=notifier, settings=SETTINGS, **kwargs)
    return cloud, svc, gid, notifier, transport


def _ticks(cloud, svc, notifier, n, step_s=60):
    for _ in range(n):
        svc.tick(cloud.now())
        cloud.advance(step_s)
    notifier.flush(5)


def _grant(cloud):
    """The denial lifted for the service (its role granted the permission); the Deny stays on record for
    another caller, as the conftest's RAM check reads the denials of a denied permission as the test's own."""
    cloud.clear_ram()
    cloud.deny("ess:ScaleWithAdjustment", access_key_id="id-someone-else")


def _pages(transport):
    return [b for b in transport.bodies if b["kind"] == "scale_failure"]


def test_a_ram_denied_scale_write_pages_once_when_it_persists_then_once_it_succeeds(fake_world):
    cloud, svc, _, notifier, transport = _world(fake_world)
    cloud.deny("ess:ScaleWithAdjustment")
    _ticks(cloud, svc, notifier, 5)  # 0..4 min: five failed writes, not yet 5 minutes
    assert _pages(transport) == []
    _ticks(cloud, svc, notifier, 1)  # the write at 5 min
    [page] = _pages(transport)
    assert page["severity"] == "critical" and page["group"] == "chat"
    assert "scale writes failing for 5 min" in page["title"]
    assert "ess:ScaleWithAdjustment" in page["text"]  # the missing permission, from the error
    assert page["fields"]["failed_writes"] == 6 and page["fields"]["target"] == 3
    _ticks(cloud, svc, notifier, 5, step_s=600)  # most of an hour more of it: no page at every tick
    assert len(_pages(transport)) == 1
    _grant(cloud)
    _ticks(cloud, svc, notifier, 3)
    pages = _pages(transport)
    assert len(pages) == 2 and pages[1]["severity"] == "info"
    assert "succeed again" in pages[1]["title"]
    kinds = [e.kind for e in svc.store.incident_events(event_key("chat"))]
    assert kinds == [FAILING, RECOVERED]


def test_a_run_that_lasts_hours_is_paged_again_every_two_hours_not_every_tick(fake_world):
    cloud, svc, _, notifier, transport = _world(fake_world)
    cloud.deny("ess:ScaleWithAdjustment")
    _ticks(cloud, svc, notifier, 6, step_s=60)  # paged at 5 min
    _ticks(cloud, svc, notifier, 5, step_s=3700)  # four more hours, a write an hour
    titles = [p["title"] for p in _pages(transport)]
    assert len(titles) == 3, titles
    assert all("still failing" in t for t in titles[1:])
    kinds = [e.kind for e in svc.store.incident_events(event_key("chat"))]
    assert kinds == [FAILING, STILL_FAILING, STILL_FAILING]


def test_one_throttled_write_never_pages(fake_world):
    cloud, svc, _, notifier, transport = _world(fake_world)
    # the adapter's 3 attempts all throttled: one failed tick, then the next write goes through
    cloud.inject_fault("ScaleWithAdjustment", code="Throttling.User", count=3)
    _ticks(cloud, svc, notifier, 10)
    failed = [d for d in svc.store.decisions(kind="scale") if d.outcome == "error"]
    assert failed, "the throttled write should have failed once"
    assert _pages(transport) == []
    assert svc.store.incident_events(event_key("chat")) == []


def test_throttling_that_persists_pages_the_same_way(fake_world):
    cloud, svc, _, notifier, transport = _world(fake_world)
    cloud.inject_fault("ScaleWithAdjustment", code="ServiceUnavailable", status=503)
    _ticks(cloud, svc, notifier, 6)
    [page] = _pages(transport)
    assert "ServiceUnavailable" in page["text"]


def test_a_restarted_leader_does_not_page_a_run_again_and_still_announces_its_end(fake_world):
    cloud, svc, _, notifier, transport = _world(fake_world)
    cloud.deny("ess:ScaleWithAdjustment")
    _ticks(cloud, svc, notifier, 6)
    assert len(_pages(transport)) == 1
    svc.close()
    notes = _Accepting()
    again = Notifier([Channel("webhook", "http://127.0.0.1:9/hook")], session=notes)
    _, svc2, _ = fake_world(WANTS_MORE, in_service=2, notifier=again, settings=SETTINGS)
    cloud.advance(60)  # the old lease lapses
    _ticks(cloud, svc2, again, 10)
    assert _pages(notes) == []  # the same run: not paged again
    _grant(cloud)
    _ticks(cloud, svc2, again, 2)
    [end] = _pages(notes)
    assert "succeed again" in end["title"]
