"""`fleet agent`: the node agent on each GPU instance (NVML + vLLM -> CloudMonitor and a local /metrics)."""

from __future__ import annotations

import errno
import ipaddress
import json
import logging
import os
import signal
import stat
import sys
import threading
from typing import Any
from urllib.parse import urlparse

import typer

from fleet.commands._common import console, fail, print_json

DEFAULT_LISTEN = "127.0.0.1:9400"
DEFAULT_KERNEL_LOG = "/dev/kmsg"  # fleet.agent.kmsg.DEFAULT_KERNEL_LOG (not imported: keeps --help fast)
# The agent's own retry per period stays short: its buffer retries across periods (fleet.agent.publish).
AGENT_CLOUD_ATTEMPTS = 2
AGENT_CLOUD_MAX_WAIT_S = 2.0

MAX_PERIOD_S = 3600.0  # one sample an hour: a longer period is a typo (and sleeps past the time_t range)


def register(app: typer.Typer) -> None:
    app.command("agent")(agent)


def agent(
    once: bool = typer.Option(False, "--once", help="Take one sample (one period), print it and exit."),
    json_out: bool = typer.Option(False, "--json", help="Print samples as JSON (one object per period)."),
    period_s: float = typer.Option(15.0, "--period-s", help="Seconds between samples (and the P99 window)."),
    vllm_urls: list[str] = typer.Option(
        ["http://127.0.0.1:8000/metrics"],
        "--vllm-url",
        help="The local vLLM server's Prometheus /metrics; repeat it for several servers on this instance "
        "(one per GPU, each on its own port): their queues and rates are added up.",
    ),
    instance_id: str | None = typer.Option(
        None,
        "--instance-id",
        envvar="FLEET_INSTANCE_ID",
        help="This instance's ECS id (default: asked of the ECS metadata service, 1 s timeout).",
    ),
    region: str | None = typer.Option(
        None, "--region", envvar="FLEET_REGION", help="Region for CloudMonitor (default: from ECS metadata)."
    ),
    account_id: str | None = typer.Option(
        None, "--account-id", envvar="FLEET_ACCOUNT_ID", help="Alibaba Cloud account id (for the namespace)."
    ),
    listen: str = typer.Option(
        DEFAULT_LISTEN, "--listen", help="HOST:PORT of the local Prometheus endpoint; 'off' disables it."
    ),
    no_publish: bool = typer.Option(False, "--no-publish", help="Do not publish to CloudMonitor."),
    max_buffered_points: int = typer.Option(
        20_000,
        "--max-buffered-points",
        help="Points kept for CloudMonitor while it refuses (oldest dropped).",
    ),
    kernel_log: str = typer.Option(
        DEFAULT_KERNEL_LOG,
        "--kernel-log",
        envvar="FLEET_KERNEL_LOG",
        help="Kernel log to read XID errors from beside NVML's events: /dev/kmsg (needs root or CAP_SYSLOG "
        "when kernel.dmesg_restrict=1), or a dmesg / journalctl -k / kern.log text file; 'none' disables.",
    ),
    state_dir: str | None = typer.Option(
        None,
        "--state-dir",
        envvar="STATE_DIRECTORY",
        help="A directory the agent may write (systemd's StateDirectory= sets STATE_DIRECTORY): it keeps "
        "there the GPUs whose fall off the bus it counted, so a restart in the same boot does not count "
        "them again. Default: nothing kept.",
    ),
) -> None:
    """Sample GPU health (NVML) and vLLM metrics every period; publish to CloudMonitor and serve /metrics."""
    from fleet.agent.metadata import fetch_metadata, metadata_base_url

    if not 0 < period_s <= MAX_PERIOD_S:
        fail(f"--period-s must be between 0 and {MAX_PERIOD_S:g} seconds, got {period_s:g}")
    if max_buffered_points < 1:
        fail(f"--max-buffered-points must be >= 1, got {max_buffered_points}")
    for vllm_url in vllm_urls:
        parsed_url = urlparse(vllm_url)
        if parsed_url.scheme not in ("http", "https") or not parsed_url.netloc:
            fail(f"--vllm-url must be an http(s) URL such as http://127.0.0.1:8000/metrics, got {vllm_url!r}")
    if len(set(vllm_urls)) < len(vllm_urls):
        fail("--vllm-url: the same server is given twice (its queue and rates would count double)")
    parsed_listen = _parse_listen(listen)  # checked with --once too, so a typo shows before it is deployed
    kernel_log_path = _parse_kernel_log(kernel_log)
    state_dir = _parse_state_dir(state_dir)
    listen_at = None if once else parsed_listen

    base_url = metadata_base_url()
    if not instance_id:
        instance_id = fetch_metadata("instance-id", base_url)
        if not instance_id:
            fail(
                "no --instance-id given (or FLEET_INSTANCE_ID) and the ECS metadata service "
                f"({base_url}) did not answer; pass --instance-id"
            )
    publish = not no_publish
    if publish and not region:
        region = fetch_metadata("region-id", base_url)
        if not region:
            fail("publishing to CloudMonitor needs --region (or FLEET_REGION); or pass --no-publish")

    _configure_logging(json_out)
    from fleet.agent.clock import SystemClock
    from fleet.agent.nvml import load_nvml
    from fleet.agent.run import Agent, AgentConfig

    publisher = _make_publisher(region, account_id, max_buffered_points) if publish else None
    runner = Agent(
        AgentConfig(
            instance_id=instance_id,
            vllm_url=vllm_urls[0],
            more_vllm_urls=tuple(vllm_urls[1:]),
            period_s=period_s,
            kernel_log=kernel_log_path,
            state_dir=state_dir,
        ),
        nvml=load_nvml(),
        clock=SystemClock(),
        publisher=publisher,
    )

    if once:
        _run_once(runner, json_out)
        return
    _run_loop(runner, json_out, listen_at)


def _parse_listen(value: str) -> tuple[str, int] | None:
    if value.strip().lower() in ("off", "none", ""):
        return None
    host, sep, port_text = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        fail(f"--listen must be HOST:PORT such as {DEFAULT_LISTEN} (or 'off'), got {value!r}")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if host != "localhost":
            fail(f"--listen host must be an IP address (such as 127.0.0.1) or localhost, got {host!r}")
    return host, int(port_text)


def _parse_kernel_log(value: str) -> str | None:
    """The kernel log's path, None for 'none'. A file that does not exist yet is accepted (rsyslog may create
    it later; the agent says so in its log), but not one in a directory that does not exist, nor a path
    that can never be a log (a directory, a FIFO: reading one would block)."""
    if value.strip().lower() in ("none", "off"):
        return None
    if not value.strip() or "\0" in value:
        fail(f"--kernel-log must be a path such as {DEFAULT_KERNEL_LOG} (or 'none'), got {value!r}")
    try:
        mode = os.stat(value).st_mode
    except FileNotFoundError:
        parent = os.path.dirname(os.path.abspath(value))
        if not os.path.isdir(parent):
            fail(f"--kernel-log {value!r}: no such directory {parent!r}")
        return value
    except OSError as exc:  # not searchable: the reader reports it at run time, as for an unreadable file
        if exc.errno in (errno.ENOTDIR, errno.ENAMETOOLONG, errno.ELOOP):
            fail(f"--kernel-log {value!r}: {exc.strerror}")
        return value
    if not (stat.S_ISREG(mode) or stat.S_ISCHR(mode)):
        fail(f"--kernel-log must be {DEFAULT_KERNEL_LOG} or a regular log file, got {value!r}")
    return value


def _parse_state_dir(value: str | None) -> str | None:
    """An existing directory; systemd's STATE_DIRECTORY lists several separated by ':' (the first is ours)."""
    if value is None or not value.strip():
        return None
    path = value.split(":")[0]
    if "\0" in path or not os.path.isdir(path):
        fail(f"--state-dir must be an existing directory, got {value!r}")
    return path


def _make_publisher(region: str | None, account_id: str | None, max_buffered_points: int) -> Any:
    from fleet.agent.publish import CmsPublisher
    from fleet.cloud.clients import make_clients
    from fleet.cloud.retry import RetryPolicy

    try:
        clients = make_clients(
            region or "",
            account_id or "",
            retry=RetryPolicy(attempts=AGENT_CLOUD_ATTEMPTS, max_s=AGENT_CLOUD_MAX_WAIT_S),
        )
    except ValueError as exc:  # a malformed FLEET_ALIYUN_ENDPOINT
        fail(str(exc))
    return CmsPublisher(clients.cms, max_buffered_points=max_buffered_points)


def _configure_logging(json_out: bool) -> None:
    # Logs go to stderr; stdout stays for samples so that `--json` output is machine-readable.
    logging.basicConfig(
        level=logging.INFO if not json_out else logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def _run_once(runner: Any, json_out: bool) -> None:
    stop = threading.Event()
    samples: list[Any] = []
    runner.run(stop, max_samples=1, on_sample=samples.append)
    if not samples:
        fail("sampling failed (see the log above)", code=1)
    _print_sample(samples[0], json_out, pretty=True)


def _run_loop(runner: Any, json_out: bool, listen_at: tuple[str, int] | None) -> None:
    from fleet.agent.prom import make_registry, serve

    server = None
    if listen_at is not None:
        host, port = listen_at
        try:
            server, _ = serve(make_registry(runner.prometheus_collector()), host, port)
        except OSError as exc:
            fail(f"cannot listen on {host}:{port} for /metrics: {exc.strerror or exc}")
        logging.getLogger("fleet.agent").info("serving /metrics on %s:%d", host, server.server_port)

    stop = threading.Event()

    def _stop(signum: int, _frame: Any) -> None:
        logging.getLogger("fleet.agent").info("signal %d: finishing the current period and exiting", signum)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
    try:
        runner.run(stop, on_sample=lambda s: _print_sample(s, json_out, pretty=False) if json_out else None)
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()


def _print_sample(sample: Any, json_out: bool, *, pretty: bool) -> None:
    from fleet.agent.sample import sample_to_json

    data = sample_to_json(sample)
    if json_out:
        if pretty:
            print_json(data)
        else:
            sys.stdout.write(json.dumps(data, separators=(",", ":"), default=str) + "\n")
            sys.stdout.flush()
        return
    _print_human(data)


def _print_human(data: dict[str, Any]) -> None:
    from rich.table import Table

    nvml = data["nvml"]
    vllm = data["vllm"]
    console.print(f"instance [bold]{data['instance_id']}[/] at {data['time'] or 'no trusted time'}")
    console.print(
        f"NVML: {'ok' if nvml['ok'] else 'DOWN (' + str(nvml['error']) + ')'}; "
        f"vLLM: {'up' if vllm['up'] else 'DOWN (' + str(vllm['error']) + ')'}; "
        f"XIDs from: {', '.join(nvml['xid_sources']) or 'none'}"
    )
    if data["gpus"]:
        table = Table(
            "gpu", "util %", "mem %", "mem bw %", "temp C", "SM clock", "power W", "throttle", "xid"
        )
        for gpu in data["gpus"]:
            if gpu["lost"]:
                table.add_row(
                    str(gpu["index"]), "[red]LOST[/]", "", "", "", "", "", "", str(gpu["last_xid"] or "")
                )
                continue
            table.add_row(
                str(gpu["index"]),
                _fmt(gpu["util_pct"]),
                _fmt(gpu["mem_used_pct"]),
                _fmt(gpu["mem_bw_util_pct"]),
                _fmt(gpu["temperature_c"]),
                f"{_fmt(gpu['sm_clock_mhz'])}/{_fmt(gpu['sm_clock_max_mhz'])}",
                f"{_fmt(gpu['power_w'])}/{_fmt(gpu['power_limit_w'])}",
                ",".join(gpu["throttle_reason_names"]) or "-",
                str(gpu["last_xid"] or ""),
            )
        console.print(table)
    metrics = Table("metric", "value")
    for name, value in sorted(data["metrics"].items()):
        metrics.add_row(name, _fmt(value, 2))
    console.print(metrics)
    publish = data["publish"]
    if publish["enabled"]:
        console.print(
            f"CloudMonitor: sent {publish['sent_points']} points, {publish['buffered_points']} buffered"
            + (f", last error: {publish['last_error']}" if publish["last_error"] else "")
        )


def _fmt(value: Any, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)
