"""The agent's scrape of vLLM's /metrics against pages that are not whole or not sound: cut short, dripped,
duplicated, NaN; what it publishes from them; and the XID it publishes when several come in one period."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from fleet.agent.vllm import ScrapeError, VllmCollector, fetch_metrics_text

from .conftest import FakeVllmState


class _RawServer:
    """A socket server that answers every connection with ``answer(conn)`` (a test writes the bytes)."""

    def __init__(self, answer) -> None:
        self.answer = answer
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/metrics"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                with contextlib.suppress(OSError):
                    self.answer(conn)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def raw_server() -> Iterator[type[_RawServer]]:
    made: list[_RawServer] = []

    def make(answer) -> _RawServer:
        server = _RawServer(answer)
        made.append(server)
        return server

    yield make  # type: ignore[misc]
    for server in made:
        server.close()


def test_a_page_cut_short_of_its_content_length_is_not_read_as_whole(raw_server):
    page = FakeVllmState(waiting=5).render().encode()

    def cut(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(page) + page[: len(page) // 3])

    with pytest.raises(ScrapeError, match=r"ended after \d+ of its \d+ bytes"):
        fetch_metrics_text(raw_server(cut).url)


def test_a_page_dripped_slower_than_the_deadline_is_given_up_on_time(raw_server):
    def drip(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n")
        for _ in range(100):  # 20 bytes every 0.2 s: no read ever times out, the page never ends
            conn.sendall(b"# HELP x padding...\n")
            time.sleep(0.2)

    started = time.monotonic()
    with pytest.raises(ScrapeError, match="took longer than 1 s"):
        fetch_metrics_text(raw_server(drip).url, timeout_s=2.0, deadline_s=1.0)
    assert time.monotonic() - started < 3.0  # it held the agent for nine minutes


def test_a_histogram_the_last_scrape_lacked_publishes_no_lifetime_percentile():
    # a cut page left the e2e histogram out; the next window must not read its lifetime counts as its own
    state = FakeVllmState(running=2)
    state.finish_requests(1000, ttft_s=0.2, tpot_s=0.05, e2e_s=5.0)
    whole = state.render()
    cut = "\n".join(line for line in whole.splitlines() if "e2e_request_latency" not in line) + "\n"
    pages = iter([whole, cut, whole])
    collector = VllmCollector("http://vllm/metrics", fetch=lambda _url: next(pages))
    collector.read(0.0)
    collector.read(15.0)
    reading = collector.read(30.0)  # nothing finished since: no latency, not 1000 requests' lifetime
    assert reading.e2e.p99_ms is None and reading.ttft.p99_ms is None


def test_a_nan_bucket_is_skipped_and_a_series_listed_twice_is_no_page():
    state = FakeVllmState(running=1)
    collector = VllmCollector("http://vllm/metrics", fetch=lambda _url: state.render())
    collector.read(0.0)
    state.finish_requests(100, ttft_s=0.2, tpot_s=0.05, e2e_s=2.0)
    bucket = 'vllm:time_to_first_token_seconds_bucket{le="0.25"'
    nan_page = "\n".join(
        line.rsplit(" ", 1)[0] + " NaN" if line.startswith(bucket) else line
        for line in state.render().splitlines()
    )
    collector._fetch = lambda _url: nan_page + "\n"
    ttft = collector.read(15.0).ttft.p99_ms
    assert ttft is not None and ttft == ttft  # a number, not NaN
    doubled = (
        FakeVllmState(waiting=5).render()
        + 'vllm:num_requests_waiting{model_name="Qwen2.5-7B-Instruct"} 5.0\n'
    )
    reading = VllmCollector("http://vllm/metrics", fetch=lambda _url: doubled).read(0.0)
    assert not reading.up and "listed twice" in (reading.error or "")


def test_the_prefix_cache_hit_ratio_reads_vllm_0_8s_names():
    state = FakeVllmState(running=1)
    old = {"queries": 1000.0, "hits": 100.0}

    def page(_url: str) -> str:
        labels = 'model_name="m"'
        return state.render() + (
            f"vllm:gpu_prefix_cache_queries_total{{{labels}}} {old['queries']}\n"
            f"vllm:gpu_prefix_cache_hits_total{{{labels}}} {old['hits']}\n"
        )

    collector = VllmCollector("http://vllm/metrics", fetch=page)
    collector.read(0.0)
    state.finish_requests(10, ttft_s=0.2, tpot_s=0.05, e2e_s=2.0)
    old.update(queries=3000.0, hits=1100.0)  # 1,000 of 2,000 looked up in the window
    assert collector.read(15.0).prefix_cache_hit_ratio == pytest.approx(0.5)


def test_a_hardware_xid_outranks_an_application_one_logged_after_it_and_no_nan_is_published():
    import math

    from fleet.agent.clock import StampResult
    from fleet.agent.nvml import GpuSnapshot, XidEvent
    from fleet.agent.sample import Sample, instance_values, to_points
    from fleet.agent.vllm import VllmReading

    events = [XidEvent(gpu_index=None, xid=x) for x in (79, 48, 13)]
    sample = Sample(
        instance_id="i-1",
        clock=StampResult(timestamp_ms=1_700_000_000_000, source="wall", wall_skew_s=0.0),
        vllm=VllmReading(up=True, kv_cache_usage_pct=math.inf, num_requests_waiting=math.nan),
        gpu=GpuSnapshot(nvml_ok=False, xid_events=events),
    )
    assert instance_values(sample)["gpu_xid"] == 48.0  # the last hardware XID, not the 13 logged after it
    published = {p.name: p.value for p in to_points(sample)}
    assert "vllm_kv_cache_usage_pct" not in published and "vllm_num_requests_waiting" not in published
    assert all(math.isfinite(v) for v in published.values())


def test_a_metadata_service_that_does_not_speak_http_reads_as_absent(raw_server):
    from fleet.agent.metadata import fetch_metadata

    server = raw_server(lambda conn: conn.sendall(b"GARBAGE\r\n\r\n"))
    assert fetch_metadata("instance-id", base_url=server.url.rsplit("/", 1)[0], timeout_s=1.0) is None
