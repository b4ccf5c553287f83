"""`fleet agent` through the CLI: one JSON sample, one-line errors, metadata only when needed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from fleet.cli import main

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def _no_ambient_identity(monkeypatch, closed_port_url):
    # Never let a test reach the real metadata address, and never pick up a developer's environment.
    monkeypatch.setenv(
        "FLEET_ECS_METADATA_URL", closed_port_url.removesuffix("/metrics") + "/latest/meta-data/"
    )
    for name in ("FLEET_INSTANCE_ID", "FLEET_REGION", "FLEET_ACCOUNT_ID"):
        monkeypatch.delenv(name, raising=False)


class MetadataServer(str):
    """The base URL of a local stand-in for the ECS metadata service; ``hits`` lists the paths asked."""

    hits: list[str]


@pytest.fixture
def metadata_server() -> Iterator[MetadataServer]:
    items = {
        "/latest/meta-data/instance-id": "i-frommetadata01",
        "/latest/meta-data/region-id": "cn-hangzhou",
    }

    hits: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            hits.append(self.path)
            body = items.get(self.path)
            self.send_response(200 if body else 404)
            self.end_headers()
            if body:
                self.wfile.write(body.encode())

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        url = MetadataServer(f"http://127.0.0.1:{httpd.server_port}/latest/meta-data/")
        url.hits = hits
        yield url
    finally:
        httpd.shutdown()
        httpd.server_close()


def run_once(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["agent", "--once", "--period-s", "0.05", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_once_json_prints_one_sample(capsys, vllm_server):
    vllm_server.state.waiting = 4
    code, out, _ = run_once(
        capsys, "--json", "--no-publish", "--instance-id", "i-1", "--vllm-url", vllm_server.url
    )
    assert code == 0
    sample = json.loads(out)
    assert sample["instance_id"] == "i-1"
    assert sample["metrics"]["vllm_num_requests_waiting"] == 4.0
    assert sample["metrics"]["vllm_up"] == 1.0
    assert "gpu_nvml_up" in sample["metrics"] and sample["vllm"]["window_s"] > 0


def test_once_human_output_names_the_instance(capsys, vllm_server):
    code, out, _ = run_once(capsys, "--no-publish", "--instance-id", "i-human", "--vllm-url", vllm_server.url)
    assert code == 0 and "i-human" in out and "vllm_num_requests_waiting" in out


def test_instance_id_comes_from_metadata_when_not_given(capsys, monkeypatch, vllm_server, metadata_server):
    monkeypatch.setenv("FLEET_ECS_METADATA_URL", metadata_server)
    code, out, _ = run_once(capsys, "--json", "--no-publish", "--vllm-url", vllm_server.url)
    assert code == 0 and json.loads(out)["instance_id"] == "i-frommetadata01"


def test_metadata_is_not_asked_when_the_instance_id_is_given(
    capsys, monkeypatch, vllm_server, metadata_server
):
    monkeypatch.setenv("FLEET_ECS_METADATA_URL", metadata_server)
    code, out, _ = run_once(
        capsys, "--json", "--no-publish", "--instance-id", "i-given", "--vllm-url", vllm_server.url
    )
    assert code == 0 and json.loads(out)["instance_id"] == "i-given"
    assert metadata_server.hits == []


def test_no_instance_id_and_no_metadata_is_one_line_exit_2(capsys, vllm_server):
    code, out, err = run_once(capsys, "--no-publish", "--vllm-url", vllm_server.url)
    assert code == 2 and out == ""
    assert "--instance-id" in err and len(err.strip().splitlines()) == 1


def test_publishing_without_a_region_is_exit_2(capsys, vllm_server):
    code, _, err = run_once(capsys, "--instance-id", "i-1", "--vllm-url", vllm_server.url)
    assert code == 2 and "--region" in err


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--period-s", "0"], "--period-s"),
        (["--period-s", "inf"], "--period-s must be between 0 and 3600"),
        (["--period-s", "1e12"], "--period-s must be between 0 and 3600"),
        (["--period-s", "nan"], "--period-s"),
        (["--vllm-url", "ftp://x/metrics"], "--vllm-url"),
        (["--max-buffered-points", "0"], "--max-buffered-points"),
    ],
)
def test_bad_option_values_are_one_line_exit_2(capsys, args, named):
    code = main(["agent", "--once", "--no-publish", "--instance-id", "i-1", *args])
    out, err = capsys.readouterr()
    assert code == 2 and named in err and "Traceback" not in err


def test_bad_listen_address_is_exit_2(capsys):
    code = main(["agent", "--no-publish", "--instance-id", "i-1", "--listen", "nowhere"])
    assert code == 2 and "--listen" in capsys.readouterr().err


def test_bad_listen_address_is_exit_2_with_once_too(capsys):
    code = main(["agent", "--once", "--no-publish", "--instance-id", "i-1", "--listen", "127.0.0.1:99999"])
    assert code == 2 and "--listen" in capsys.readouterr().err


@pytest.mark.slow
def test_loop_serves_metrics_and_exits_on_sigterm(vllm_server, tmp_path):
    vllm_server.state.waiting = 6
    env = {**os.environ, "FLEET_ECS_METADATA_URL": "http://127.0.0.1:9/latest/meta-data/"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fleet.cli",
            "agent",
            "--no-publish",
            "--instance-id",
            "i-loop",
            "--vllm-url",
            vllm_server.url,
            "--listen",
            "127.0.0.1:0",
            "--period-s",
            "0.2",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        port = None
        deadline = time.monotonic() + 30
        while port is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if "serving /metrics on" in line:
                port = int(line.rsplit(":", 1)[1])
        assert port is not None, "the agent never said where it serves /metrics"
        text = ""
        while "vllm_num_requests_waiting{" not in text and time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                text = resp.read().decode()
            time.sleep(0.1)
        assert 'vllm_num_requests_waiting{instance_id="i-loop"} 6.0' in text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_several_vllm_urls_are_read_together_and_a_repeat_is_refused(capsys, vllm_server):
    from conftest import FakeVllmServer

    other = FakeVllmServer()
    other.start()
    try:
        vllm_server.state.waiting, other.state.waiting = 4, 5
        urls = ["--vllm-url", vllm_server.url, "--vllm-url", other.url]
        code, out, _ = run_once(capsys, "--json", "--no-publish", "--instance-id", "i-2", *urls)
        assert code == 0 and json.loads(out)["metrics"]["vllm_num_requests_waiting"] == 9.0
    finally:
        other.stop()
    twice = ["--vllm-url", vllm_server.url, "--vllm-url", vllm_server.url]
    code, _, err = run_once(capsys, "--no-publish", "--instance-id", "i-2", *twice)
    assert code == 2 and "the same server is given twice" in " ".join(err.split())
