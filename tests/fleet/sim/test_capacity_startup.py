"""The modelled scale-out to serving of a fresh and a restarted instance (economical mode, issue 17)."""

from __future__ import annotations

import pytest

from fleet.sim.capacity_startup import (
    StartupFigures,
    checkpoint_bytes,
    essd_pl1_mb_s,
    model_startup,
)


def test_essd_pl1_throughput_grows_with_size_up_to_its_cap() -> None:
    assert essd_pl1_mb_s(200) == 220.0
    assert essd_pl1_mb_s(40) == 140.0
    assert essd_pl1_mb_s(2000) == 350.0


def test_checkpoint_size_comes_from_the_sizing_catalog() -> None:
    # Qwen2.5-14B: 14.77 B parameters in bf16.
    assert checkpoint_bytes("Qwen2.5-14B") / 1e9 == pytest.approx(29.5, abs=0.1)
    assert checkpoint_bytes("Qwen2.5-7B") < checkpoint_bytes("Qwen2.5-14B")


def test_fresh_downloads_at_the_slower_of_network_and_disk_and_restart_reads_the_disk() -> None:
    w = 30e9
    st = model_startup(w, StartupFigures(network_gbit_s=16.0, disk_mb_s=300.0, page_cache_gb_s=3.0))
    assert st.fresh["download"] == pytest.approx(100.0)  # disk-bound: 30 GB at 300 MB/s
    assert st.fresh["load"] == pytest.approx(10.0)  # from the page cache the download filled
    assert st.restart["load"] == pytest.approx(100.0)  # the disk again: the page cache died with the stop
    assert "download" not in st.restart and "ecs_create_boot" not in st.restart
    slow_net = model_startup(w, StartupFigures(network_gbit_s=0.8, disk_mb_s=300.0))
    assert slow_net.fresh["download"] == pytest.approx(300.0)  # network-bound: 100 MB/s
    assert slow_net.restart_s == pytest.approx(st.restart_s)  # a restart does not download


def test_the_parts_add_up_and_a_faster_disk_shortens_both_paths() -> None:
    w = checkpoint_bytes("Qwen2.5-14B")
    base = model_startup(w)
    assert base.fresh_s == pytest.approx(sum(base.fresh.values()))
    assert base.ratio == pytest.approx(base.restart_s / base.fresh_s)
    fast = model_startup(w, StartupFigures(disk_mb_s=2000.0))
    assert fast.fresh_s < base.fresh_s and fast.restart_s < base.restart_s


def test_bad_weights_are_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        model_startup(0.0)
