"""The Grafana dashboards in dashboards/: valid dashboard JSON, and every query names a metric that something
in this fleet actually exposes.

Exposed names come from code, never from a list kept here: the service's ``ServiceMetrics`` registry, the
node agent's Prometheus collector run on a fake GPU and a fake vLLM page, and the exporter series of the
PromQL mapping table (``fleet.service.sources.mappings``) plus the vLLM series the agent reads
(``fleet.agent.vllm``).
Where Debian's ``promtool`` is installed, every expression is also parsed by Prometheus itself.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

from fleet.agent import vllm as agent_vllm
from fleet.agent.clock import ManualAgentClock
from fleet.agent.fake_nvml import FakeGpu, FakeNvml
from fleet.agent.prom import make_registry
from fleet.agent.run import Agent, AgentConfig
from fleet.service.metrics import ServiceMetrics
from fleet.service.sources.mappings import exporter_series, histogram_family

DASHBOARDS = Path(__file__).resolve().parents[2] / "dashboards"
FILES = sorted(DASHBOARDS.glob("*.json"))
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
PANEL_TYPES = {"row", "timeseries", "stat", "bargauge", "table", "gauge", "text", "state-timeline"}
GRAFANA_BUILTINS = {"__rate_interval", "__interval", "__range", "__range_s", "__interval_ms"}
GRID_COLUMNS = 24

# ---- PromQL: the metric names an expression reads ---------------------------------------------------------
_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset",
    "and", "or", "unless", "atan2", "inf", "nan", "Inf", "NaN",
}  # fmt: skip
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"' + r"|'(?:[^'\\]|\\.)*'|`[^`]*`")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"(?<![\w.:$])[a-zA-Z_:][a-zA-Z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """Metric names selected in a PromQL expression (functions, keywords, labels and durations left out)."""
    text = _STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries
    text = _GROUPING.sub(" ", text)
    text = re.sub(r"\$\{?\w+\}?", " 0 ", text)  # Grafana variables stand for values
    names = set()
    for m in _IDENT.finditer(text):
        following = text[m.end() :].lstrip()
        if following.startswith("(") or m.group() in _KEYWORDS:
            continue  # a function or aggregation, or an operator keyword
        names.add(m.group())
    return names


@pytest.mark.parametrize(
    "expr, expected",
    [
        ('sum by (instance_id) (vllm:x{instance_id=~"$instance"})', {"vllm:x"}),
        ("histogram_quantile(0.99, sum by (le) (rate(x_bucket[$__rate_interval])))", {"x_bucket"}),
        ("a / on (gpu) group_left (UUID) b offset 5m", {"a", "b"}),
        ("sum(rate(x_total[5m])) by (code) * 60 > 1e3", {"x_total"}),
        ('vector($slo_ttft_p99_ms) or max(up{job="or"})', {"up"}),
        ("floor((A or B) / 32) % 2", {"A", "B"}),
    ],
)
def test_metric_name_extraction(expr, expected):
    assert metric_names(expr) == expected


# ---- what the fleet exposes -------------------------------------------------------------------------------
def _sample_names(registry: CollectorRegistry) -> set[str]:
    """Sample names a registry's families expose on /metrics (counter: _total, histogram: _bucket, ...)."""
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_sum", "_count", "_created"),
        "summary": ("", "_sum", "_count", "_created"),
        "gauge": ("",),
        "untyped": ("",),
        "info": ("_info",),
    }
    return {f.name + suffix for f in registry.collect() for suffix in suffixes.get(f.type, ("",))}


def _vllm_page(finished: int) -> str:
    """A small vLLM /metrics page after ``finished`` requests of 0.2 s TTFT, 0.04 s TPOT, 1.2 s end to end."""
    lines = [
        f"{agent_vllm.WAITING} 3",
        f"{agent_vllm.RUNNING} 5",
        f"{agent_vllm.KV_CACHE_USAGE[0]} 0.4",
        f"{agent_vllm.REQUEST_SUCCESS} {finished}",
        f"{agent_vllm.GENERATION_TOKENS} {finished * 100}",
        f"{agent_vllm.PREEMPTIONS[0]} 0",
    ]
    for name, latency_s in ((agent_vllm.TTFT[0], 0.2), (agent_vllm.TPOT[0], 0.04), (agent_vllm.E2E[0], 1.2)):
        lines += [f"# TYPE {name} histogram"]
        for bound in (0.05, 0.25, 2.5):
            lines.append(f'{name}_bucket{{le="{bound}"}} {finished if latency_s <= bound else 0}')
        lines += [f'{name}_bucket{{le="+Inf"}} {finished}', f"{name}_count {finished}", f"{name}_sum 1"]
    return "\n".join(lines) + "\n"


def agent_names() -> set[str]:
    """Names the agent's Prometheus endpoint serves after one period on two fake GPUs (one throttled)."""
    gpus = [FakeGpu(), FakeGpu()]
    gpus[1].throttle_reasons = 0x20
    pages = iter([_vllm_page(10), _vllm_page(40)])
    clock = ManualAgentClock()
    agent = Agent(
        AgentConfig(instance_id="i-dash"),
        nvml=FakeNvml(gpus),
        clock=clock,
        vllm_fetch=lambda url: next(pages),
    )
    agent.prime()
    clock.advance(15)
    agent.step()
    return _sample_names(make_registry(agent.prometheus_collector()))


def exporter_names() -> set[str]:
    """DCGM and vLLM series: those the PromQL mappings read, and the vLLM series the agent reads."""
    names = set(exporter_series())
    vllm_constants = [v for k, v in vars(agent_vllm).items() if k.isupper() and isinstance(v, (str, tuple))]
    for value in vllm_constants:
        for name in (value,) if isinstance(value, str) else value:
            if isinstance(name, str) and name.startswith("vllm:"):
                names.add(name)
                # the agent names histograms by family; Prometheus stores their _bucket/_sum/_count series
                names.update({f"{name}_bucket", f"{name}_sum", f"{name}_count"})
    for series in list(names):
        family = histogram_family(series)
        if family:
            names.update({f"{family}_sum", f"{family}_count"})
    return names


@pytest.fixture(scope="module")
def exposed() -> set[str]:
    return _sample_names(ServiceMetrics().registry) | agent_names() | exporter_names()


# ---- the dashboards ---------------------------------------------------------------------------------------
def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _panels(dashboard: dict) -> list[dict]:
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out += panel.get("panels", [])  # a collapsed row keeps its panels inside
    return out


def _queries(dashboard: dict) -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable."""
    out = [
        (f"panel {p['id']} {p['title']!r} target {t['refId']}", t["expr"])
        for p in _panels(dashboard)
        for t in p.get("targets", [])
    ]
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", query)
            out.append((f"variable {var['name']}", m.group(1) if m else query))
    return out


def test_there_are_the_fleet_and_service_dashboards():
    assert {p.name for p in FILES} >= {"fleet.json", "service.json"}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_dashboard_has_grafana_top_level_structure(path):
    d = _load(path)
    assert d["title"] and d["uid"] and isinstance(d["schemaVersion"], int)
    assert isinstance(d["panels"], list) and d["panels"]
    assert {"from", "to"} <= set(d["time"])


def test_dashboard_uids_are_unique():
    uids = [_load(p)["uid"] for p in FILES]
    assert len(uids) == len(set(uids))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_datasource_is_a_prometheus_variable(path):
    [var] = [v for v in _load(path)["templating"]["list"] if v["name"] == "datasource"]
    assert var["type"] == "datasource" and var["query"] == "prometheus"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_panel_ids_are_unique(path):
    ids = [p["id"] for p in _panels(_load(path))]
    assert all(isinstance(i, int) for i in ids) and len(ids) == len(set(ids))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_panels_have_type_title_and_fit_the_grid(path):
    for p in _panels(_load(path)):
        assert p["type"] in PANEL_TYPES, p["title"]
        assert p["title"].strip()
        g = p["gridPos"]
        assert all(isinstance(g[k], int) and g[k] >= 0 for k in ("h", "w", "x", "y")), p["title"]
        assert g["w"] >= 1 and g["x"] + g["w"] <= GRID_COLUMNS, p["title"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_panels_do_not_overlap(path):
    cells: dict[tuple[int, int], str] = {}
    for p in _panels(_load(path)):
        g = p["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = p["title"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_query_panel_has_targets_on_the_datasource_variable(path):
    for p in _panels(_load(path)):
        if p["type"] in ("row", "text"):
            continue
        assert p["datasource"] == DATASOURCE, p["title"]
        assert p["targets"], p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["expr"].strip() and t.get("datasource", DATASOURCE) == DATASOURCE, p["title"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_query_variables_use_the_datasource_variable(path):
    for var in _load(path)["templating"]["list"]:
        if var["type"] == "query":
            assert var["datasource"] == DATASOURCE, var["name"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_variable_a_query_uses_is_defined(path):
    d = _load(path)
    defined = {v["name"] for v in d["templating"]["list"]} | GRAFANA_BUILTINS
    for where, expr in _queries(d):
        for name in re.findall(r"\$\{?(\w+)\}?", expr):
            assert name in defined, f"{path.name} {where}: ${name} is not a dashboard variable"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_query_names_an_exposed_metric(path, exposed):
    unknown = []
    for where, expr in _queries(_load(path)):
        names = metric_names(expr)
        if not names and "vector(" not in expr:
            unknown.append(f"{where}: no metric in {expr!r}")
        unknown += [f"{where}: {name}" for name in sorted(names - exposed)]
    assert not unknown, f"{path.name}: metrics nothing in the fleet exposes:\n" + "\n".join(unknown)


def test_the_fleet_dashboard_covers_what_ops_look_at_first():
    exprs = " ".join(e for _, e in _queries(_load(DASHBOARDS / "fleet.json")))
    for name in (
        "fleet_group_desired_capacity",
        "fleet_group_in_service",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:time_per_output_token_seconds_bucket",
        "vllm:num_requests_waiting",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        "fleet_incidents",
        "fleet_incident_respond_by_seconds",
        "fleet_incident_isolate_by_seconds",
    ):
        assert name in exprs, name


def test_the_service_dashboard_covers_the_service_metrics():
    exprs = " ".join(e for _, e in _queries(_load(DASHBOARDS / "service.json")))
    for name in (
        "fleet_ticks_total",
        "fleet_decisions_total",
        "fleet_actions_total",
        "fleet_cloud_api_errors_total",
        "fleet_metric_staleness_seconds",
        "fleet_tick_duration_seconds_bucket",
    ):
        assert name in exprs, name


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian's prometheus) not installed")
def test_every_query_parses_as_promql(tmp_path):
    values = {"__rate_interval": "1m", "__range": "1h", "__interval": "15s"}
    rules = []
    for path in FILES:
        for i, (_where, expr) in enumerate(_queries(_load(path))):
            # variables become what Grafana would put there: durations, numbers, or an all-matching regex
            text = re.sub(r"\$\{?(\w+)\}?", lambda m: values.get(m.group(1), "1"), expr)
            text = text.replace('=~"1"', '=~".*"')
            rules.append({"record": f"dashboard:{path.stem}:{i}", "expr": text})
    rules_file = tmp_path / "rules.yml"
    rules_file.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    result = subprocess.run(
        ["promtool", "check", "rules", str(rules_file)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
