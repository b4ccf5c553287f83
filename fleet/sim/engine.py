"""Engines for the simulated instances: the sizing package's stepwise vLLM engine for the group's hardware."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fleet.sim.types import Hardware


class HardwareError(ValueError):
    """The hardware asked for is unknown to the sizing catalog or cannot run the model."""


def price_cny_per_hour(instance_type: str, region: str | None = None) -> float | None:
    """The catalog's pay-as-you-go price of ``instance_type`` (an estimate where the catalog says so)."""
    from sizing import find_instance, price_book

    try:
        price = price_book().price(find_instance(instance_type), region)
    except Exception:  # noqa: BLE001 - an unknown region or type: the caller keeps its default
        return None
    return None if price is None else price.cny_per_hour


def resolve_hardware(
    model: str, instance_type: str, region: str | None = None, max_model_len: int | None = None
) -> Hardware:
    """Hardware for ``model`` on ``instance_type``: its GPU, GPU count (tensor parallel over all of them) and
    price from the sizing catalog; ``max_model_len`` the deployment's (default: the simulator's 8192)."""
    from sizing import SizingInputError, find_instance, find_model

    try:
        inst = find_instance(instance_type)
        find_model(model)
    except SizingInputError as exc:
        raise HardwareError(str(exc)) from None
    price = price_cny_per_hour(instance_type, region)
    return Hardware(
        model=model,
        instance_type=inst.name,
        gpu=inst.gpu,
        gpus_per_instance=inst.gpus,
        tp=inst.gpus,
        price_cny_per_hour=price if price is not None else Hardware().price_cny_per_hour,
        max_model_len=max_model_len or Hardware().max_model_len,
    )


def make_engine_factory(hw: Hardware) -> Callable[[float, int], Any]:
    """A factory of fresh :class:`sizing.InstanceEngine` for ``hw``, clock starting at the given second and
    rejecting arrivals beyond ``max_waiting`` waiting requests. The memory plan and iteration costs are worked
    out once and shared: every instance of the group is the same deployment."""
    from sizing import (
        Deployment,
        InstanceEngine,
        SizingInputError,
        find_gpu,
        find_model,
        perf_for,
        plan_memory,
    )

    try:
        dep = Deployment(find_model(hw.model), find_gpu(hw.gpu), tp=hw.tp, max_model_len=hw.max_model_len)
        plan = plan_memory(dep)
    except SizingInputError as exc:
        raise HardwareError(str(exc)) from None
    if not plan.fits:
        raise HardwareError(f"{hw.model} does not fit on {hw.tp} x {hw.gpu}: {plan.reason}")
    perf = perf_for(dep, plan)

    def factory(start_s: float, max_waiting: int) -> Any:
        return InstanceEngine(dep, max_waiting=max_waiting, start_s=start_s, plan=plan, perf=perf)

    return factory
