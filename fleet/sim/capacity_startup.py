"""Scale-out to serving, modelled from the model's weights: a fresh instance against a stopped one that
economical mode starts again (issue 17).

A **fresh** instance is created from the group's image (GPU driver and vLLM installed: the terraform
module's ``image_id``), so it has no weights yet:

    ECS create + boot  +  weights download  +  load into the GPUs  +  vLLM warm-up

The download lands on the instance's own system disk (the module's ``system_disk_size_gib``, "room for the
image and model weights"), so it runs at the slower of the instance's network and the disk's write
throughput; the weights are then read from the page cache the download just filled.

A **restarted** instance (economical mode, ``ScalingPolicy: recycle``) kept its disk and so its weights, but
the page cache died with the stop:

    ECS start  +  weights read from the disk into the GPUs  +  vLLM warm-up

The figures (each overridable):

* the weights: the checkpoint's bytes from the sizing catalog (``weight_bytes_per_rank`` at TP 1, the
  checkpoint's own dtype): Qwen2.5-14B in bf16 is 29.5 GB;
* the disk: ESSD PL1 (the module's ``cloud_essd`` system disk at its default level), whose per-disk
  throughput is ``min(120 + 0.5 x GiB, 350)`` MB/s (Alibaba Cloud, "ESSD AutoPL disks": the baseline of an
  AutoPL disk is that of a PL1 ESSD of the same size); 200 GiB (the module's default) gives 220 MB/s;
* the network: 16 Gbit/s, an estimate for a 32-vCPU GPU type (OSS itself offers up to 100 Gbit/s per account
  inside a region, "Use up to 100 Gbit/s of bandwidth over an internal network"); with the default disk it
  does not bind;
* ECS create + boot: 60 s, the simulator's ECS boot (``SimOptions.boot_s``; an EC2 launch to a booted OS
  takes about 40 s, depot.dev "Making EC2 boot time 8x faster", 2024); ECS start of a stopped instance: 45 s,
  an estimate (no disk to create from the image; the host is allocated again, which is also why a start can
  fail for stock);
* loading from the page cache into the GPUs: 3.5 GB/s, an estimate (a few GB/s over PCIe 4.0; the disk, not
  this, is what binds);
* warm-up: 30 s (vLLM's memory profiling, torch.compile from its cache and CUDA graph capture: tens of seconds
  in the public logs), an estimate.

With these the restart is bound by the same disk as the fresh instance's download, so economical mode saves
the ECS creation but reads the weights back at the rate they were written: it is not "half a fresh
instance" unless the download is slower than the disk (weights from a public hub) or the disk is faster
than its baseline (provisioned AutoPL, PL2/PL3).
"""

from __future__ import annotations

from dataclasses import dataclass

MB = 1e6
GB = 1e9


def essd_pl1_mb_s(size_gib: float) -> float:
    """Per-disk throughput of an ESSD PL1 of ``size_gib`` (MB/s): ``min(120 + 0.5 x GiB, 350)``."""
    return min(120.0 + 0.5 * size_gib, 350.0)


@dataclass(frozen=True)
class StartupFigures:
    ecs_create_boot_s: float = 60.0
    ecs_start_s: float = 45.0
    network_gbit_s: float = 16.0
    disk_gib: float = 200.0
    disk_mb_s: float | None = None  # None: an ESSD PL1 of disk_gib
    page_cache_gb_s: float = 3.5
    warmup_s: float = 30.0

    def disk_rate_mb_s(self) -> float:
        return essd_pl1_mb_s(self.disk_gib) if self.disk_mb_s is None else self.disk_mb_s


@dataclass(frozen=True)
class Startup:
    """Both paths, each as its parts in seconds."""

    weights_gb: float
    fresh: dict[str, float]
    restart: dict[str, float]

    @property
    def fresh_s(self) -> float:
        return sum(self.fresh.values())

    @property
    def restart_s(self) -> float:
        return sum(self.restart.values())

    @property
    def ratio(self) -> float:
        return self.restart_s / self.fresh_s


def model_startup(weights_bytes: float, figures: StartupFigures | None = None) -> Startup:
    """Scale-out to serving of a fresh and of a restarted instance for ``weights_bytes`` of weights."""
    f = figures or StartupFigures()
    if weights_bytes <= 0:
        raise ValueError(f"weights_bytes must be positive, got {weights_bytes}")
    disk = f.disk_rate_mb_s() * MB
    download = min(f.network_gbit_s * GB / 8.0, disk)
    fresh = {
        "ecs_create_boot": f.ecs_create_boot_s,
        "download": weights_bytes / download,
        "load": weights_bytes / (f.page_cache_gb_s * GB),
        "warmup": f.warmup_s,
    }
    restart = {
        "ecs_start": f.ecs_start_s,
        "load": weights_bytes / disk,
        "warmup": f.warmup_s,
    }
    return Startup(weights_bytes / GB, fresh, restart)


def checkpoint_bytes(model: str) -> float:
    """The model's checkpoint size from the sizing catalog (all ranks, the checkpoint's own dtype)."""
    from sizing.catalog import find_model
    from sizing.memory import weight_bytes_per_rank

    shape = find_model(model)
    return weight_bytes_per_rank(shape, shape.quantization or shape.dtype, 1)
