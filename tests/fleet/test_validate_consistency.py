"""`fleet validate` refuses or warns of configs that load but misbehave (issue 21.6)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from fleet.cli import main
from fleet.config import ConfigError, load_config
from policies import Snapshot, decide

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "fleet.yaml"
SPIKE = ROOT / "examples" / "snapshots" / "queue-spike.json"


def write(tmp_path: Path, groups: str) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text("region: cn-chengdu\naccount_id: '1234567890'\ngroups:\n" + groups)
    return path


def problems(tmp_path: Path, groups: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, groups), env={})
    return info.value.problems


@pytest.mark.parametrize("key", ["scaling_group_id: asg-1", "scaling_group_name: chat-prod"])
def test_two_groups_on_one_scaling_group_are_refused(tmp_path, key):
    found = problems(
        tmp_path,
        f"  - {{name: a, {key}, min_size: 1, max_size: 4}}\n"
        f"  - {{name: b, {key}, min_size: 1, max_size: 4}}\n",
    )
    assert len(found) == 1 and "two groups drive one scaling group" in found[0] and "a, b" in found[0]


def test_groups_on_different_scaling_groups_load(tmp_path):
    cfg = load_config(
        write(
            tmp_path,
            "  - {name: a, scaling_group_id: asg-1, min_size: 1, max_size: 4}\n"
            "  - {name: b, scaling_group_id: asg-2, min_size: 1, max_size: 4}\n",
        ),
        env={},
    )
    assert [g.name for g in cfg.groups] == ["a", "b"]


FLAP = """  - name: g
    min_size: 1
    max_size: 4
    scale_out: [{{metric: queue_waiting_per_instance, above: 2, for: 30s}}]
    scale_in: [{{metric: queue_waiting_per_instance, below: {below}, for: 10m}}]
"""


def test_a_scale_in_threshold_above_the_scale_out_one_is_refused(tmp_path):
    found = problems(tmp_path, FLAP.format(below=3))
    assert len(found) == 1 and "flapping" in found[0] and "queue_waiting_per_instance" in found[0]


def test_an_equal_scale_in_threshold_is_a_warning(tmp_path):
    cfg = load_config(write(tmp_path, FLAP.format(below=2)), env={})
    assert any("no dead band" in w for w in cfg.warnings())
    cfg = load_config(write(tmp_path, FLAP.format(below=0.5)), env={})
    assert not any("dead band" in w for w in cfg.warnings())


def test_validate_cli_refuses_flapping_in_one_line(tmp_path, capsys):
    assert main(["validate", "--config", str(write(tmp_path, FLAP.format(below=3)))]) == 2
    err = capsys.readouterr().err.strip()
    assert "flapping" in err and len(err.splitlines()) == 1


CUSTOM_RULES = """  - name: g
    min_size: 1
    max_size: 4
    isolation:
      rules:
        - {{name: gpu_overheat, metric: gpu_temperature_c, above: 85, for: 2m, action: reboot}}
{extra}"""


def test_a_custom_rule_list_without_the_xid_and_event_rules_is_warned(tmp_path):
    warnings = load_config(write(tmp_path, CUSTOM_RULES.format(extra="")), env={}).warnings()
    (warning,) = [w for w in warnings if "isolation.rules" in w]
    assert "xid_hardware" in warning and "ecs_system_failure" in warning and "ecs_maintenance" in warning
    assert "engine_down" in warning and "agent_silent" in warning


def test_a_custom_rule_list_that_keeps_them_is_not_warned(tmp_path):
    extra = (
        "        - {name: xid_hardware, xids: [48, 63, 64, 74, 79, 92, 94, 95], action: replace}\n"
        "        - {name: events, events: ['SystemFailure.*', 'SystemMaintenance.*'], action: replace}\n"
        "        - {name: vllm_gone, metric: vllm_up, below: 0.5, for: 3m, action: replace}\n"
        "        - {name: mute, metric: vllm_up, absent_for: 15m, action: reboot}\n"
    )
    warnings = load_config(write(tmp_path, CUSTOM_RULES.format(extra=extra)), env={}).warnings()
    assert not any("isolation.rules" in w for w in warnings)


def test_the_default_rules_are_not_warned(tmp_path):
    warnings = load_config(write(tmp_path, "  - {name: g, min_size: 1, max_size: 4}\n"), env={}).warnings()
    assert not any("isolation.rules" in w for w in warnings)


def test_the_example_sizes_its_queue_spike_by_throughput():
    # six instances with 5 waiting and 24 running each: about eight instances of work, not fifteen
    cfg = load_config(EXAMPLE, env={})
    snap = Snapshot.model_validate_json(SPIKE.read_text())
    group = snap.groups[0]
    waiting = sum(i.metrics["queue_waiting"].value for i in group.instances)
    in_flight = waiting + sum(i.metrics["requests_running"].value for i in group.instances)
    work = math.ceil(in_flight / 24)
    target = decide(snap, cfg, None, snap.taken_at).group("chat-7b").serving_target
    assert 6 < target <= work + 1, (target, work)
