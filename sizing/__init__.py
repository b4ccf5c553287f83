"""What to buy and how to run it: pure sizing of vLLM deployments on Alibaba Cloud GPUs.

Pure: no I/O beyond the package's own data files, no clock. The shell (``fleet size``) reads files and passes
their contents in.
"""

from sizing.calibration import Calibration, apply_calibration, calibration_from_dict
from sizing.catalog import (
    GPU,
    InstanceType,
    ModelShape,
    PriceBook,
    find_gpu,
    find_instance,
    find_model,
    load_gpus,
    load_instances,
    load_models,
    model_from_hf_config,
    price_book,
)
from sizing.engine import CompletedRequest, InstanceEngine
from sizing.errors import SizingInputError
from sizing.latency import KneeSweep, LatencyReport, Workload, knee_sweep, simulate
from sizing.memory import Deployment, MemoryPlan, plan_memory
from sizing.perf import PerfModel, perf_for, perf_model
from sizing.search import SLO, Candidate, SearchResult, Settings, search
from sizing.traces import TraceError, TraceRequest, parse_columns

__all__ = [
    "GPU",
    "Calibration",
    "apply_calibration",
    "calibration_from_dict",
    "SLO",
    "Candidate",
    "CompletedRequest",
    "KneeSweep",
    "LatencyReport",
    "SearchResult",
    "Settings",
    "TraceError",
    "TraceRequest",
    "Workload",
    "knee_sweep",
    "search",
    "simulate",
    "Deployment",
    "InstanceEngine",
    "InstanceType",
    "MemoryPlan",
    "ModelShape",
    "PerfModel",
    "PriceBook",
    "SizingInputError",
    "find_gpu",
    "find_instance",
    "find_model",
    "load_gpus",
    "load_instances",
    "load_models",
    "model_from_hf_config",
    "perf_for",
    "perf_model",
    "parse_columns",
    "plan_memory",
    "price_book",
]
