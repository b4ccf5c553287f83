"""Fixtures for the metric source tests, all on 127.0.0.1.

- ``FakePromApi``: a scripted stand-in for Prometheus' HTTP API (records each query, answers from a function),
  for unit tests of the source's PromQL, matching and error handling.
- ``FakeExporters``: one HTTP server serving a DCGM exporter page (``/dcgm``) and a vLLM ``/metrics`` page
  (``/vllm``) for any number of instances, every series labelled ``instance_id`` as a fleet's scrape config
  would label it. Tests change the values while it runs; the vLLM latency histograms grow in real time at a
  set request rate, every request taking the set latency.
- ``real_prometheus``: Debian's ``/usr/bin/prometheus`` started on a free loopback port with a generated
  config scraping the exporters every second and a temporary storage dir; skipped where the binary is absent.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest
import requests

from fleet.agent.vllm import E2E_BUCKETS_S, TPOT_BUCKETS_S, TTFT_BUCKETS_S
from fleet.testing import FakeAliyunServer

REGION = "cn-chengdu"
ENV = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "test-ak", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "test-secret-value"}
PROMETHEUS_BIN = os.environ.get("FLEET_TEST_PROMETHEUS", "/usr/bin/prometheus")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred: Callable[[], object], timeout_s: float = 20.0, what: str = "condition") -> object:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")


class _QuietServer(ThreadingHTTPServer):
    """A client that hung up (the source stops reading an answer over its size limit) is no error: the
    default prints a traceback to stderr from the server's thread, into whichever test captures it then."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _serve(handler: type[BaseHTTPRequestHandler]) -> tuple[ThreadingHTTPServer, threading.Thread]:
    server = _QuietServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    return server, thread


@pytest.fixture
def aliyun_server() -> Iterator[FakeAliyunServer]:
    """The fake cloud over real HTTP at real time (mock_aliyun's interception would also catch Prometheus)."""
    server = FakeAliyunServer(boot_seconds=1.0).start()
    yield server
    server.stop()


# ---- a scripted Prometheus HTTP API ------------------------------------------------------------------------
class FakePromApi:
    """Answers ``/api/v1/query`` and ``/query_range`` with ``answer(endpoint, form) -> (status, body)``, or
    ``(status, body, headers)``; ``authorizations`` keeps each request's Authorization header."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.authorizations: list[str | None] = []
        self.answer: Callable[[str, dict[str, str]], tuple] = lambda e, f: (200, vector([]))
        self.send_length = True  # False: no Content-Length, the body ends when the connection closes
        self.trickle: tuple[int, float] | None = None  # (bytes, seconds): the body that many bytes at a time
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("content-length", 0))
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                endpoint = self.path.rsplit("/", 1)[-1]
                api.requests.append((endpoint, form))
                api.authorizations.append(self.headers.get("authorization"))
                status, body, *headers = api.answer(endpoint, form)
                raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                for name, value in (headers[0] if headers else {}).items():
                    self.send_header(name, value)
                if api.send_length:
                    self.send_header("content-length", str(len(raw)))
                else:
                    self.close_connection = True
                self.end_headers()
                # a client may stop reading (an answer over its size limit)
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    if api.trickle is None:
                        self.wfile.write(raw)
                        return
                    size, pause = api.trickle
                    for at in range(0, len(raw), size):
                        self.wfile.write(raw[at : at + size])
                        self.wfile.flush()
                        time.sleep(pause)

            def log_message(self, *args: object) -> None:
                pass

        self.server, self._thread = _serve(Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def queries(self, endpoint: str = "query") -> list[str]:
        return [form["query"] for e, form in self.requests if e == endpoint]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def vector(rows: list[tuple[dict[str, str], float | str]], at: float = 1_700_000_000.0) -> dict:
    """A successful instant-vector answer."""
    return {
        "status": "success",
        "data": {"resultType": "vector", "result": [{"metric": m, "value": [at, str(v)]} for m, v in rows]},
    }


def matrix(rows: list[tuple[dict[str, str], list[tuple[float, float]]]]) -> dict:
    """A successful range-vector answer."""
    return {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [{"metric": m, "values": [[t, str(v)] for t, v in pts]} for m, pts in rows],
        },
    }


@pytest.fixture
def prom_api() -> Iterator[FakePromApi]:
    api = FakePromApi()
    yield api
    api.close()


# ---- fake DCGM exporter and vLLM /metrics ------------------------------------------------------------------
@dataclass
class VllmState:
    waiting: float = 0.0
    running: float = 0.0
    kv_usage: float = 0.0  # fraction, as vLLM reports it
    kv_metric: str = "vllm:kv_cache_usage_perc"
    rate_per_s: float = 0.0  # finished requests per second
    ttft_s: float = 0.2
    tpot_s: float = 0.04
    e2e_s: float = 1.2
    counted: float = 0.0  # requests counted so far
    last: float = field(default_factory=time.monotonic)


class FakeExporters:
    """``/dcgm`` and ``/vllm`` pages for many instances; ``gpus[(instance, gpu)]``: DCGM field -> value."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.gpus: dict[tuple[str, int], dict[str, float]] = {}
        # vLLM per (instance, data-parallel engine): None is a server whose series carry no engine label
        self.vllm: dict[tuple[str, str | None], VllmState] = {}
        exporters = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                path = self.path.split("?")[0]
                if path == "/dcgm":
                    text = exporters.dcgm_page()
                elif path == "/vllm":
                    text = exporters.vllm_page()
                else:
                    self.send_error(404)
                    return
                raw = text.encode()
                self.send_response(200)
                self.send_header("content-type", "text/plain; version=0.0.4")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: object) -> None:
                pass

        self.server, self._thread = _serve(Handler)
        self.address = f"127.0.0.1:{self.server.server_port}"

    # -- state --------------------------------------------------------------------------------------------
    def set_gpu(self, instance_id: str, index: int, **fields: float) -> None:
        with self.lock:
            self.gpus.setdefault((instance_id, index), {}).update(fields)

    def set_vllm(self, instance_id: str, engine: str | None = None, **values: object) -> None:
        """The instance's vLLM values; with ``engine``, those of one data-parallel engine (its series labelled
        ``engine="..."``, as vLLM labels each engine's with ``--data-parallel-size``)."""
        with self.lock:
            state = self.vllm.setdefault((instance_id, engine), VllmState())
            self._advance(state)
            for k, v in values.items():
                setattr(state, k, v)

    def drop(self, instance_id: str) -> None:
        """The instance's exporters vanish (node gone): its series get Prometheus staleness markers."""
        with self.lock:
            for key in [k for k in self.vllm if k[0] == instance_id]:
                del self.vllm[key]
            for key in [k for k in self.gpus if k[0] == instance_id]:
                del self.gpus[key]

    @staticmethod
    def _advance(state: VllmState) -> None:
        now = time.monotonic()
        state.counted += state.rate_per_s * (now - state.last)
        state.last = now

    # -- pages --------------------------------------------------------------------------------------------
    def dcgm_page(self) -> str:
        with self.lock:
            by_field: dict[str, list[str]] = {}
            for (iid, index), fields in sorted(self.gpus.items()):
                labels = (
                    f'gpu="{index}",UUID="GPU-{iid}-{index}",device="nvidia{index}",'
                    f'modelName="NVIDIA A10",Hostname="{iid}",instance_id="{iid}"'
                )
                for name, value in fields.items():
                    by_field.setdefault(name, []).append(f"{name}{{{labels}}} {value}")
        lines = []
        for name, rows in sorted(by_field.items()):
            lines += [f"# HELP {name} dcgm field", f"# TYPE {name} gauge", *rows]
        return "\n".join(lines) + "\n"

    def vllm_page(self) -> str:
        lines: list[str] = []
        with self.lock:
            for (iid, engine), st in sorted(self.vllm.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
                self._advance(st)
                labels = f'model_name="qwen2.5-7b",instance_id="{iid}"'
                if engine is not None:
                    labels += f',engine="{engine}"'
                lines += [
                    f"vllm:num_requests_waiting{{{labels}}} {st.waiting}",
                    f"vllm:num_requests_running{{{labels}}} {st.running}",
                    f"{st.kv_metric}{{{labels}}} {st.kv_usage}",
                ]
                count = float(int(st.counted))
                # progress counters: each finished request had 100 prompt and 20 output tokens
                lines += [
                    f'vllm:request_success_total{{{labels},finished_reason="stop"}} {count}',
                    f"vllm:prompt_tokens_total{{{labels}}} {100 * count}",
                    f"vllm:generation_tokens_total{{{labels}}} {20 * count}",
                ]
                for name, bounds, latency in (
                    ("vllm:time_to_first_token_seconds", TTFT_BUCKETS_S, st.ttft_s),
                    ("vllm:time_per_output_token_seconds", TPOT_BUCKETS_S, st.tpot_s),
                    ("vllm:e2e_request_latency_seconds", E2E_BUCKETS_S, st.e2e_s),
                ):
                    for bound in bounds:
                        lines.append(
                            f'{name}_bucket{{{labels},le="{bound}"}} {count if latency <= bound else 0.0}'
                        )
                    lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {count}')
                    lines.append(f"{name}_count{{{labels}}} {count}")
                    lines.append(f"{name}_sum{{{labels}}} {count * latency}")
        return "\n".join(lines) + "\n"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def expected_quantile_ms(bounds: tuple[float, ...], latency_s: float, q: float) -> float:
    """What histogram_quantile gives when every observation is ``latency_s``: linear within its bucket."""
    upper = next(b for b in bounds if latency_s <= b)
    lower = max((b for b in bounds if b < upper), default=0.0)
    return 1000 * (lower + (upper - lower) * q)


# ---- a real Prometheus -------------------------------------------------------------------------------------
@dataclass
class RealPrometheus:
    url: str
    process: subprocess.Popen
    log_path: Path

    def query(self, promql: str) -> list[dict]:
        resp = requests.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=5)
        return resp.json()["data"]["result"]

    def has(self, promql: str) -> bool:
        try:
            return bool(self.query(promql))
        except (requests.RequestException, KeyError, ValueError):
            return False


def prometheus_missing_reason() -> str | None:
    if not (os.path.isfile(PROMETHEUS_BIN) and os.access(PROMETHEUS_BIN, os.X_OK)) and not shutil.which(
        PROMETHEUS_BIN
    ):
        return (
            f"Prometheus binary {PROMETHEUS_BIN} not found: install Debian's package "
            "(apt-get install prometheus) or set FLEET_TEST_PROMETHEUS"
        )
    return None


@pytest.fixture(scope="session")
def exporters() -> Iterator[FakeExporters]:
    ex = FakeExporters()
    yield ex
    ex.close()


@pytest.fixture(scope="session")
def real_prometheus(
    exporters: FakeExporters, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RealPrometheus]:
    reason = prometheus_missing_reason()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("prometheus")
    port = free_port()
    config = tmp / "prometheus.yml"
    # honor_labels: the pages carry instance_id themselves (in a fleet, relabeling per target attaches it)
    config.write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - {{job_name: dcgm, metrics_path: /dcgm, honor_labels: true, "
        f"static_configs: [{{targets: ['{exporters.address}']}}]}}\n"
        f"  - {{job_name: vllm, metrics_path: /vllm, honor_labels: true, "
        f"static_configs: [{{targets: ['{exporters.address}']}}]}}\n"
    )
    log_path = tmp / "prometheus.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                PROMETHEUS_BIN,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--storage.tsdb.retention.time=1h",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=tmp,
        )
    prom = RealPrometheus(url=f"http://127.0.0.1:{port}", process=proc, log_path=log_path)

    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"prometheus exited ({proc.returncode}): {log_path.read_text()[-2000:]}")
        try:
            return requests.get(f"{prom.url}/-/ready", timeout=1).status_code == 200
        except requests.RequestException:
            return False

    try:
        wait_for(ready, 30, "prometheus to be ready")
        yield prom
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
