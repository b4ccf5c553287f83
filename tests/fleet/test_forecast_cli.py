"""`fleet forecast`, run in-process through fleet.cli.main, from a history file and from the store."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from fleet.cli import main

SIM_CONFIG = str(Path(__file__).resolve().parents[2] / "examples" / "sim" / "fleet.yaml")
END = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)


def _history(path: Path, days: float = 2) -> Path:
    lines = ["at,request_rate_rps,prompt_tokens,output_tokens"]
    n = int(days * 1440)
    for m in range(n):
        t = END - timedelta(minutes=n - m)
        h = t.hour + t.minute / 60
        rate = 4 + 8 * max(0.0, math.sin((h - 6) / 24 * 2 * math.pi))
        lines.append(f"{t.isoformat()},{rate:.3f},900,220")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_json_forecast_from_a_history_file(tmp_path, capsys):
    hist = _history(tmp_path / "d.csv")
    svg = tmp_path / "f.svg"
    rc = main(
        [
            "forecast",
            "--config",
            SIM_CONFIG,
            "--group",
            "chat-14b",
            "--history",
            str(hist),
            "--hours",
            "6",
            "--json",
            "--plot",
            str(svg),
        ]
    )
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["method"] == "seasonal" and len(out["hours"]) == 6
    assert out["capacity_per_instance_rps"] > 0
    hour = out["hours"][0]
    assert hour["forecast_lower_rps"] <= hour["forecast_rps"] <= hour["forecast_upper_rps"]
    assert hour["planned_instances"] >= hour["learned_floor"] >= 2
    assert svg.read_text().startswith("<svg")


def test_hours_whose_yesterday_is_not_in_the_history_have_no_forecast(tmp_path, capsys):
    hist = _history(tmp_path / "d.csv", days=0.3)  # 16:48 to 24:00: nothing about tomorrow's first 6 hours
    args = ["forecast", "--config", SIM_CONFIG, "--group", "chat-14b", "--history", str(hist), "--hours", "6"]
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["hours"] == [] and out["method"] == "level_trend"


def test_a_history_that_ended_minutes_ago_has_no_forecast_over_the_horizon_not_zero(tmp_path, capsys):
    # the service was down (or the metrics out) for the last 20 minutes: no recent level, so no forecast for
    # the next minutes, which the service's own predictive scaling treats as unknown; the hours still have one
    hist = _history(tmp_path / "d.csv")
    args = ["forecast", "--config", SIM_CONFIG, "--group", "chat-14b", "--history", str(hist), "--hours", "2"]
    late = ["--at", (END + timedelta(minutes=20)).isoformat()]
    assert main([*args, *late, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["level_rps"] is None and out["forecast_rps"] is None and out["forecast_upper_rps"] is None
    assert len(out["hours"]) == 2 and out["hours"][0]["forecast_rps"] > 0
    assert main([*args, *late]) == 0
    text = capsys.readouterr().out
    assert "no forecast" in text and "forecast 0.00" not in text
    assert main([*args, "--json"]) == 0  # just after the file's newest row: a level and a forecast
    out = json.loads(capsys.readouterr().out)
    assert out["level_rps"] > 0 and out["forecast_upper_rps"] >= out["forecast_rps"] > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--group", "nope"], "no group 'nope'"),
        (["--group", "chat-14b", "--hours", "0"], "--hours"),
        (["--group", "chat-14b", "--at", "yesterday"], "--at"),
        (["--group", "chat-14b", "--plot", "x.png"], "--plot"),
        (["--group", "chat-14b", "--history", "missing.csv"], "not found"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, args, message):
    rc = main(["forecast", "--config", SIM_CONFIG, *args])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err


def test_a_group_with_predictive_scaling_off_says_so_and_how_to_turn_it_on(tmp_path, capsys):
    cfg = tmp_path / "fleet.yaml"
    cfg.write_text(
        "region: cn-hangzhou\naccount_id: '1'\ngroups:\n"
        "  - {name: chat-7b, scaling_group_id: asg-1, min_size: 1, max_size: 6}\n"
    )
    assert main(["forecast", "--config", str(cfg), "--group", "chat-7b"]) == 2
    err = capsys.readouterr().err
    assert "predictive scaling off" in err and "records no demand" in err and "forecast-only" in err
    assert "Traceback" not in err


def test_a_bad_history_row_names_the_row(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("at,request_rate_rps\n2026-12-01T00:00:00Z,1\n2026-12-01T00:01:00Z,-3\n")
    assert main(["forecast", "--config", SIM_CONFIG, "--group", "chat-14b", "--history", str(bad)]) == 2
    # it said "row 2" of the rows after the header: the file's line 3
    assert "bad.csv: line 3: request_rate_rps must be a number >= 0" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # Excel's byte-order mark was glued to "at": "the CSV header must name at and ... (no at)"
        (
            "\ufeffat,request_rate_rps\r\n2026-12-01T00:00:00Z,1\r\n2026-12-01T00:01:00Z,x\r\n",
            "line 3: could not",
        ),
        ("", "h.csv: the file is empty"),  # it said "no rows"
        (" \n", "h.csv: the file is empty"),
        ("at,request_rate_rps\n", "h.csv: no rows"),
    ],
)
def test_a_history_file_as_saved_is_read_or_named_in_one_line(tmp_path, capsys, text, message):
    path = tmp_path / "h.csv"
    path.write_text(text, encoding="utf-8", newline="")
    assert main(["forecast", "--config", SIM_CONFIG, "--group", "chat-14b", "--history", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("2026-12-01T00:01:00Z,3,nan,200", "line 3: prompt_tokens must be a number from 1 to 16,777,216"),
        ("2026-12-01T00:01:00Z,3,-5,200", "line 3: prompt_tokens must be a number from 1 to 16,777,216"),
        ("2026-12-01T00:01:00Z,3,800,inf", "line 3: output_tokens must be a number from 1 to 16,777,216"),
        ("2026-12-01T00:01:00Z,3,800,1e9", "line 3: output_tokens must be a number from 1 to 16,777,216"),
        # one such minute set the mean of the same hour the next day: a 300-digit forecast
        ("2026-12-01T00:01:00Z,1e308,800,200", "line 3: request_rate_rps 1e+308 is beyond what any scaling"),
        ("2026-12-01T00:01:00Z,3e7,800,200", "(at most 2e+07: 2000 instances x 10000 req/s)"),
        ("9999-12-31T23:59:00Z,3,800,200", "line 3: at 9999-12-31T23:59:00+00:00 is outside 1970..8999"),
        ("0001-01-01T00:00:00Z,3,800,200", "line 3: at 0001-01-01T00:00:00+00:00 is outside 1970..8999"),
    ],
)
def test_token_counts_and_instants_out_of_range_are_refused_not_clamped(tmp_path, capsys, row, message):
    bad = tmp_path / "bad.csv"
    bad.write_text(
        f"at,request_rate_rps,prompt_tokens,output_tokens\n2026-12-01T00:00:00Z,3,800,200\n{row}\n"
    )
    assert main(["forecast", "--config", SIM_CONFIG, "--group", "chat-14b", "--history", str(bad)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_deeply_nested_json_history_and_an_instant_out_of_range_are_one_line(tmp_path, capsys):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 5000 + "]" * 5000)
    assert main(["forecast", "--config", SIM_CONFIG, "--group", "chat-14b", "--history", str(deep)]) == 2
    assert "nested too deeply" in capsys.readouterr().err
    hist = _history(tmp_path / "d.csv", days=0.3)
    for at in ("0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z"):
        args = ["forecast", "--config", SIM_CONFIG, "--group", "chat-14b", "--history", str(hist), "--at", at]
        assert main(args) == 2
        err = capsys.readouterr().err
        assert "is outside 1970..8999" in err and "Traceback" not in err


def test_from_the_store(tmp_path, capsys):
    from fleet.service.demand import DemandLog, DemandReading
    from fleet.service.store import open_store

    url = f"sqlite:///{tmp_path / 'f.db'}"
    store = open_store(url)
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    DemandLog(store, {"chat-14b": 7 * 86400}).write(
        "chat-14b", [DemandReading(now - timedelta(minutes=k), 3.0, 900, 200) for k in range(1, 1500)]
    )
    store.close()
    assert main(["forecast", "--config", SIM_CONFIG, "--group", "chat-14b", "--database", url, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["method"] == "seasonal" and out["level_rps"] == pytest.approx(3.0)


def test_a_missing_sqlite_store_is_refused_not_created(tmp_path, capsys):
    db = tmp_path / "nothing-here.db"
    args = ["forecast", "--config", SIM_CONFIG, "--group", "chat-14b", "--database", f"sqlite:///{db}"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and len(err.strip().splitlines()) == 1
    assert not db.exists()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"at": "2026-12-01T00:00:00Z", "request_rate', "not CSV or a JSON list"),
        ('{"at": "2026-12-01T00:00:00Z", "request_rate_rps": 3}', "must be a list of rows, got dict"),
        ("[1, 2]", "row 1: not an object with at and request_rate_rps"),
        ("time,rate\n2026-12-01T00:00:00Z,3\n", "the CSV header must name at and request_rate_rps"),
    ],
)
def test_a_history_file_of_the_wrong_shape_says_what_is_wrong(tmp_path, capsys, text, message):
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    assert main(["forecast", "--config", SIM_CONFIG, "--group", "chat-14b", "--history", str(bad)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_forecast_at_a_past_instant_reads_the_history_up_to_it_from_the_store(tmp_path, capsys):
    """--at 20 days ago: the rows are the day and more before it (not the last days before now, which
    left it with nothing), and no row after it counts."""
    from fleet.service.demand import DemandLog, DemandReading
    from fleet.service.store import open_store

    url = f"sqlite:///{tmp_path / 'f.db'}"
    store = open_store(url)
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    at = now - timedelta(days=20)
    dlog = DemandLog(store, {"chat-14b": 7 * 86400})
    dlog.write("chat-14b", [DemandReading(at - timedelta(minutes=k), 3.0, 900, 200) for k in range(0, 1500)])
    # after --at: a level it must not know
    dlog.write("chat-14b", [DemandReading(at + timedelta(minutes=k), 50.0, 900, 200) for k in range(1, 60)])
    store.close()
    args = ["forecast", "--config", SIM_CONFIG, "--group", "chat-14b", "--database", url, "--json"]
    assert main([*args, "--at", (at + timedelta(seconds=30)).isoformat()]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["method"] == "seasonal" and out["level_rps"] == pytest.approx(3.0)
