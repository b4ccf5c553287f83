"""Fixtures for the agent's tests: a fake vLLM /metrics server on 127.0.0.1 whose counters tests drive, and
no real kernel log."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from fleet.agent.vllm import E2E_BUCKETS_S, TPOT_BUCKETS_S, TTFT_BUCKETS_S


@dataclass
class Histogram:
    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: int = 0
    sum_s: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.bounds)

    def observe(self, value_s: float, times: int = 1) -> None:
        for i, bound in enumerate(self.bounds):
            if value_s <= bound:
                self.counts[i] += times
        self.total += times
        self.sum_s += value_s * times

    def render(self, name: str, labels: str) -> list[str]:
        lines = [f"# HELP {name} latency", f"# TYPE {name} histogram"]
        for bound, count in zip(self.bounds, self.counts, strict=True):
            lines.append(f'{name}_bucket{{le="{bound}",{labels}}} {float(count)}')
        lines.append(f'{name}_bucket{{le="+Inf",{labels}}} {float(self.total)}')
        lines.append(f"{name}_count{{{labels}}} {float(self.total)}")
        lines.append(f"{name}_sum{{{labels}}} {self.sum_s}")
        return lines


@dataclass
class FakeVllmState:
    """What the fake vLLM reports; tests change it between scrapes."""

    waiting: float = 0.0
    running: float = 0.0
    kv_fraction: float = 0.25
    kv_name: str = "vllm:kv_cache_usage_perc"  # V1 name; "vllm:gpu_cache_usage_perc" for V0
    tpot_name: str = "vllm:time_per_output_token_seconds"  # or "vllm:inter_token_latency_seconds"
    success: float = 0.0
    generation_tokens: float = 0.0
    prompt_tokens: float = 0.0
    preemptions: float = 0.0
    prefix_queries: float | None = None  # prompt tokens looked up in the prefix cache (None: not exported)
    prefix_hits: float = 0.0
    status: int = 200
    body_override: str | None = None
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS_S))
    tpot: Histogram = field(default_factory=lambda: Histogram(TPOT_BUCKETS_S))
    e2e: Histogram = field(default_factory=lambda: Histogram(E2E_BUCKETS_S))

    def finish_requests(
        self,
        n: int,
        ttft_s: float,
        tpot_s: float,
        e2e_s: float,
        tokens_each: int = 100,
        prompt_each: int = 500,
    ) -> None:
        """n requests complete with these latencies (and ``prompt_each`` prompt tokens each)."""
        self.ttft.observe(ttft_s, n)
        self.tpot.observe(tpot_s, n * tokens_each)
        self.e2e.observe(e2e_s, n)
        self.success += n
        self.generation_tokens += n * tokens_each
        self.prompt_tokens += n * prompt_each

    def restart(self) -> None:
        """vLLM restarted: every counter and histogram starts from zero."""
        self.ttft, self.tpot, self.e2e = (
            Histogram(TTFT_BUCKETS_S),
            Histogram(TPOT_BUCKETS_S),
            Histogram(E2E_BUCKETS_S),
        )
        self.success = self.generation_tokens = self.prompt_tokens = self.preemptions = 0.0
        if self.prefix_queries is not None:
            self.prefix_queries = self.prefix_hits = 0.0

    def render(self) -> str:
        if self.body_override is not None:
            return self.body_override
        labels = 'model_name="Qwen2.5-7B-Instruct"'
        lines = [
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{{{labels}}} {self.waiting}",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{labels}}} {self.running}",
            f"# TYPE {self.kv_name} gauge",
            f"{self.kv_name}{{{labels}}} {self.kv_fraction}",
            "# TYPE vllm:request_success_total counter",
            f'vllm:request_success_total{{finished_reason="stop",{labels}}} {self.success}',
            f'vllm:request_success_total{{finished_reason="length",{labels}}} 0.0',
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{{{labels}}} {self.generation_tokens}",
            "# TYPE vllm:prompt_tokens_total counter",
            f"vllm:prompt_tokens_total{{{labels}}} {self.prompt_tokens}",
            "# TYPE vllm:num_preemptions_total counter",
            f"vllm:num_preemptions_total{{{labels}}} {self.preemptions}",
        ]
        if self.prefix_queries is not None:
            lines += [
                "# TYPE vllm:prefix_cache_queries counter",
                f"vllm:prefix_cache_queries_total{{{labels}}} {self.prefix_queries}",
                "# TYPE vllm:prefix_cache_hits counter",
                f"vllm:prefix_cache_hits_total{{{labels}}} {self.prefix_hits}",
            ]
        for name, total in (
            ("vllm:request_prompt_tokens", self.prompt_tokens),
            ("vllm:request_generation_tokens", self.generation_tokens),
        ):  # per-request token histograms (observed when a request finishes): only their sum and count matter
            lines += [
                f"# TYPE {name} histogram",
                f'{name}_bucket{{le="+Inf",{labels}}} {self.success}',
                f"{name}_sum{{{labels}}} {total}",
                f"{name}_count{{{labels}}} {self.success}",
            ]
        lines += self.ttft.render("vllm:time_to_first_token_seconds", labels)
        lines += self.tpot.render(self.tpot_name, labels)
        lines += self.e2e.render("vllm:e2e_request_latency_seconds", labels)
        return "\n".join(lines) + "\n"


class FakeVllmServer:
    def __init__(self) -> None:
        self.state = FakeVllmState()
        self.scrapes = 0
        state_ref = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                state_ref.scrapes += 1
                if self.path != "/metrics":
                    self.send_response(404)
                    self.end_headers()
                    return
                body = state_ref.state.render().encode()
                self.send_response(state_ref.state.status)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_port}/metrics"
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture(autouse=True)
def _no_real_kernel_log(monkeypatch):
    # `fleet agent` reads /dev/kmsg by default: tests that run the command give a temp file or nothing.
    monkeypatch.setenv("FLEET_KERNEL_LOG", "none")


@pytest.fixture
def vllm_server() -> Iterator[FakeVllmServer]:
    server = FakeVllmServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def closed_port_url() -> str:
    """A 127.0.0.1 URL where nothing listens (vLLM down)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/metrics"
