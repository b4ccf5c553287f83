"""GPU instance types the fake knows, from the official instance-family page.

Source: ../shared/reference/aliyun-api.md section 4 (vCPU / RAM GiB / GPUs per type). GPU memory per GPU is
the nominal size of the card named there (A10 24 GB, T4 16 GB, V100 16/32 GB, A100 40/80 GB, A30 24 GB, L20 48
GB, gn8v 96 GB). GPUSpec strings follow the ``"NVIDIA A10"`` form that DescribeInstances prints."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InstanceType:
    type_id: str
    family: str
    cpu_cores: int
    memory_gib: float
    gpu_amount: int
    gpu_spec: str
    gpu_memory_gib: float  # per GPU

    def as_api(self) -> dict[str, object]:
        return {
            "InstanceTypeId": self.type_id,
            "InstanceTypeFamily": self.family,
            "CpuCoreCount": self.cpu_cores,
            "MemorySize": self.memory_gib,
            "GPUAmount": self.gpu_amount,
            "GPUSpec": self.gpu_spec,
            "GPUMemorySize": self.gpu_memory_gib,
            "InstanceCategory": "Compute-optimized with GPU",
            "InstanceTypeCategory": "GPU",
        }


# family: (gpu spec, GiB per GPU, [(suffix, vcpu, ram GiB, gpus)]); the type is ecs.<family>-<suffix>, or
# ecs.<suffix> when the suffix starts with "=".
_FAMILIES: dict[str, tuple[str, float, list[tuple[str, int, float, int]]]] = {
    "gn7i": (
        "NVIDIA A10",
        24.0,
        [
            ("c8g1.2xlarge", 8, 30, 1),
            ("c16g1.4xlarge", 16, 60, 1),
            ("c32g1.8xlarge", 32, 188, 1),
            ("c48g1.12xlarge", 48, 310, 1),
            ("c56g1.14xlarge", 56, 346, 1),
            ("c32g1.16xlarge", 64, 376, 2),
            ("c32g1.32xlarge", 128, 752, 4),
            ("2x.8xlarge", 32, 128, 2),
            ("4x.8xlarge", 32, 128, 4),
            ("4x.16xlarge", 64, 256, 4),
            ("8x.16xlarge", 64, 256, 8),
            ("8x.32xlarge", 128, 512, 8),
        ],
    ),
    "gn6i": (
        "NVIDIA T4",
        16.0,
        [
            ("c4g1.xlarge", 4, 15, 1),
            ("c8g1.2xlarge", 8, 31, 1),
            ("c16g1.4xlarge", 16, 62, 1),
            ("c24g1.6xlarge", 24, 93, 1),
            ("c40g1.10xlarge", 40, 155, 1),
            ("c24g1.12xlarge", 48, 186, 2),
            ("c24g1.24xlarge", 96, 372, 4),
        ],
    ),
    "gn6v": (
        "NVIDIA V100",
        16.0,
        [("c8g1.2xlarge", 8, 32, 1), ("c8g1.8xlarge", 32, 128, 4), ("c8g1.16xlarge", 64, 256, 8)],
    ),
    "gn6e": (
        "NVIDIA V100",
        32.0,
        [("c12g1.3xlarge", 12, 92, 1), ("c12g1.12xlarge", 48, 368, 4), ("c12g1.24xlarge", 96, 736, 8)],
    ),
    "gn7": (
        "NVIDIA A100",
        40.0,
        [("c12g1.3xlarge", 12, 94, 1), ("c13g1.13xlarge", 52, 378, 4), ("c13g1.26xlarge", 104, 756, 8)],
    ),
    "gn7e": (
        "NVIDIA A100 80G",
        80.0,
        [
            ("c16g1.4xlarge", 16, 125, 1),
            ("c16g1.8xlarge", 32, 250, 2),
            ("c16g1.16xlarge", 64, 500, 4),
            ("c16g1.32xlarge", 128, 1000, 8),
        ],
    ),
    "gn7s": (
        "NVIDIA A30",
        24.0,
        [("c8g1.2xlarge", 8, 60, 1), ("c16g1.4xlarge", 16, 120, 1), ("c32g1.32xlarge", 128, 1000, 4)],
    ),
    "gn8is": (
        "NVIDIA L20",
        48.0,
        [
            ("=gn8is.2xlarge", 8, 64, 1),
            ("=gn8is.4xlarge", 16, 128, 1),
            ("=gn8is-2x.8xlarge", 32, 256, 2),
            ("=gn8is-4x.16xlarge", 64, 512, 4),
            ("=gn8is-8x.32xlarge", 128, 1024, 8),
        ],
    ),
    "gn8v": (
        "NVIDIA H20",
        96.0,
        [
            ("=gn8v.4xlarge", 16, 96, 1),
            ("=gn8v.6xlarge", 24, 128, 1),
            ("=gn8v-2x.8xlarge", 32, 192, 2),
            ("=gn8v-4x.8xlarge", 32, 384, 4),
            ("=gn8v-2x.12xlarge", 48, 256, 2),
            ("=gn8v-8x.16xlarge", 64, 768, 8),
            ("=gn8v-4x.24xlarge", 96, 512, 4),
            ("=gn8v-8x.48xlarge", 192, 1024, 8),
        ],
    ),
    "ebmgn7e": ("NVIDIA A100 80G", 80.0, [("=ebmgn7e.32xlarge", 128, 1024, 8)]),
    "ebmgn7": ("NVIDIA A100", 40.0, [("=ebmgn7.26xlarge", 104, 768, 8)]),
    "ebmgn7i": ("NVIDIA A10", 24.0, [("=ebmgn7i.32xlarge", 128, 768, 4)]),
    "ebmgn8v": ("NVIDIA H20", 96.0, [("=ebmgn8v.48xlarge", 192, 1024, 8)]),
    "ebmgn8is": ("NVIDIA L20", 48.0, [("=ebmgn8is.32xlarge", 128, 1024, 8)]),
}


def _build() -> dict[str, InstanceType]:
    table: dict[str, InstanceType] = {}
    for family, (spec, gpu_mem_gib, types) in _FAMILIES.items():
        for suffix, vcpu, ram_gib, gpus in types:
            name = suffix[1:] if suffix.startswith("=") else f"{family}-{suffix}"
            type_id = f"ecs.{name}"
            table[type_id] = InstanceType(
                type_id, f"ecs.{family}", vcpu, float(ram_gib), gpus, spec, gpu_mem_gib
            )
    return table


INSTANCE_TYPES: dict[str, InstanceType] = _build()

# A type the fake accepts but does not list (a CPU type, e.g. for attached helper instances).
_GENERIC = InstanceType("ecs.g7.xlarge", "ecs.g7", 4, 16.0, 0, "", 0.0)


def lookup(type_id: str) -> InstanceType:
    """The known GPU type, or a GPU-less placeholder with the requested id for anything else."""
    known = INSTANCE_TYPES.get(type_id)
    if known is not None:
        return known
    family = type_id.rsplit("-", 1)[0] if "-" in type_id else type_id.rsplit(".", 1)[0]
    return InstanceType(type_id, family, _GENERIC.cpu_cores, _GENERIC.memory_gib, 0, "", 0.0)
