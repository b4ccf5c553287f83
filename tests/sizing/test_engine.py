"""The stepwise continuous-batching engine of one vLLM instance."""

from __future__ import annotations

import random

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from sizing import Deployment, InstanceEngine, find_gpu, find_model, plan_memory
from sizing.engine import CompletedRequest


def _deployment(**kw) -> Deployment:
    base = dict(model=find_model("Qwen2.5-7B"), gpu=find_gpu("A10"), max_model_len=8192)
    base.update(kw)
    return Deployment(**base)


def _poisson_load(engine: InstanceEngine, rate: float, seconds: float, seed: int = 0) -> int:
    rng = random.Random(seed)
    t, n = 0.0, 0
    while True:
        t += rng.expovariate(rate)
        if t >= seconds:
            return n
        engine.submit(n, t, rng.randint(50, 2000), rng.randint(5, 400))
        n += 1


def _run(engine: InstanceEngine, until: float, step: float = 5.0) -> list[CompletedRequest]:
    out: list[CompletedRequest] = []
    t = 0.0
    while t < until:
        t += step
        out += engine.advance(t)
    return out + engine.advance(until + 1e6)


def test_a_lone_request_takes_its_prefill_then_one_decode_step_per_token():
    engine = InstanceEngine(_deployment())
    engine.submit("a", 1.0, 1000, 101)
    [done] = engine.advance(100.0)
    perf = engine.perf
    assert done.queue_s == 0.0
    assert done.ttft_s == pytest.approx(perf.prefill_s(1000, engine.plan.max_num_batched_tokens), rel=1e-6)
    # 100 decode steps over a context growing from 1000 to 1100 tokens
    expected_tpot = sum(perf.decode_tpot_s(1000 + i) for i in range(100)) / 100
    assert done.tpot_s == pytest.approx(expected_tpot, rel=1e-3)
    assert done.e2e_s == pytest.approx(done.ttft_s + 100 * done.tpot_s, rel=1e-9)


def test_closed_form_jumps_give_the_same_latencies_as_stepping_every_iteration(monkeypatch):
    fast = InstanceEngine(_deployment())
    slow = InstanceEngine(_deployment())
    monkeypatch.setattr(slow, "_try_jump", lambda until_s, done: False)
    _poisson_load(fast, 2.0, 120.0)
    _poisson_load(slow, 2.0, 120.0)
    a = sorted(_run(fast, 120.0), key=lambda r: r.request_id)
    b = sorted(_run(slow, 120.0), key=lambda r: r.request_id)
    assert [r.request_id for r in a] == [r.request_id for r in b]
    for x, y in zip(a, b, strict=True):
        assert x.e2e_s == pytest.approx(y.e2e_s, rel=1e-6, abs=1e-6)
        assert x.ttft_s == pytest.approx(y.ttft_s, rel=1e-6, abs=1e-6)


def test_first_tokens_are_reported_when_sampled_not_when_the_request_ends():
    engine = InstanceEngine(_deployment())
    engine.first_tokens = []
    engine.submit("a", 0.0, 1000, 400)  # a long answer: it ends well after its first token
    assert engine.advance(1.0) == []  # still decoding at 1 s
    [ttft] = engine.first_tokens
    [done] = engine.advance(1000.0)
    assert ttft == pytest.approx(done.ttft_s) and done.finish_s > 1.0
    assert engine.first_tokens == [ttft]  # one report per request, drained by the owner
    quiet = InstanceEngine(_deployment())  # without a list nothing is kept
    quiet.submit("b", 0.0, 1000, 10)
    quiet.advance(100.0)
    assert quiet.first_tokens is None


def test_every_submitted_request_completes_exactly_once():
    engine = InstanceEngine(_deployment())
    n = _poisson_load(engine, 3.0, 300.0, seed=3)
    done = _run(engine, 300.0)
    assert sorted(r.request_id for r in done) == list(range(n))
    assert engine.num_running == engine.num_waiting == engine.num_pending == 0


def test_running_never_exceeds_max_num_seqs_and_the_rest_wait():
    engine = InstanceEngine(_deployment(max_num_seqs=8))
    for i in range(20):
        engine.submit(i, 0.0, 100, 500)
    engine.advance(2.0)
    assert engine.num_running == 8
    assert engine.num_waiting == 12


def test_a_full_kv_cache_preempts_and_still_finishes_everything():
    # 0.12 x 22 GiB leaves room for a few thousand tokens of KV only
    engine = InstanceEngine(
        _deployment(model=find_model("Qwen2.5-0.5B"), gpu_memory_utilization=0.12, max_model_len=4096)
    )
    capacity = engine.plan.kv_cache_tokens
    for i in range(40):
        engine.submit(i, 0.0, 1500, 1500)
    done = _run(engine, 10.0)
    assert len(done) == 40 and not any(r.rejected for r in done)
    assert sum(r.preemptions for r in done) > 0
    assert capacity < 40 * 3000


def test_kv_usage_rises_with_load_and_stays_within_bounds():
    engine = InstanceEngine(_deployment())
    assert engine.kv_usage == 0.0
    for i in range(30):
        engine.submit(i, 0.0, 2000, 1000)
    engine.advance(5.0)
    assert 0.0 < engine.kv_usage <= 1.0


def test_half_speed_doubles_a_lone_requests_latency():
    normal = InstanceEngine(_deployment())
    slow = InstanceEngine(_deployment(), speed_factor=0.5)
    for e in (normal, slow):
        e.submit("a", 0.0, 500, 50)
    [a] = normal.advance(100.0)
    [b] = slow.advance(100.0)
    assert b.e2e_s == pytest.approx(2 * a.e2e_s, rel=1e-9)


def test_a_full_waiting_queue_rejects_new_arrivals():
    engine = InstanceEngine(_deployment(max_num_seqs=1), max_waiting=2)
    for i in range(5):
        engine.submit(i, 0.2 * i, 100, 1000)  # request 0 is running before the others arrive
    rejected = [r for r in engine.advance(1.0) if r.rejected]
    assert [r.request_id for r in rejected] == [3, 4]


def test_a_prompt_longer_than_max_model_len_is_refused():
    engine = InstanceEngine(_deployment(max_model_len=2048))
    assert engine.submit("long", 0.0, 4000, 10) is False
    [r] = engine.advance(1.0)
    assert r.rejected and r.request_id == "long"


@pytest.mark.parametrize(("prompt", "output"), [(1500, 1000), (1500, 100), (100, 0), (2048, 10), (3000, 5)])
def test_the_output_an_engine_says_it_produces_is_what_the_request_completes_with(prompt, output):
    # vLLM stops a sequence at max_model_len: the world reports the demand the engine serves from this
    engine = InstanceEngine(_deployment(max_model_len=2048))
    engine.submit("r", 0.0, prompt, output)
    (done,) = engine.advance(1e6)
    assert engine.output_tokens_for(prompt, output) == done.output_tokens
    assert prompt + done.output_tokens <= 2048 or done.rejected


def test_busy_fraction_is_zero_when_idle_and_near_one_when_saturated():
    engine = InstanceEngine(_deployment())
    engine.advance(10.0)
    assert engine.busy_fraction == 0.0
    for i in range(200):
        engine.submit(i, 10.0, 1000, 300)
    engine.advance(20.0)
    assert engine.busy_fraction > 0.95


def test_the_memory_share_is_the_reads_of_the_iterations_stepped_or_jumped(monkeypatch):
    # a lone decode-only request: every step reads the weights and its context, and only that streams memory
    engine = InstanceEngine(_deployment())
    engine.submit("a", 0.0, 16, 2000)
    engine.advance(1.0)  # past its prefill, into decode
    engine.advance(11.0)
    perf = engine.perf
    share = perf.decode_read_s(1, 1000.0) / perf.decode_step_s(1, 1000.0)
    assert engine.busy_fraction == pytest.approx(1.0, abs=0.01)
    assert engine.memory_busy_fraction == pytest.approx(share, rel=0.02) and share < 1.0
    # the closed-form jumps count the same reads as stepping every iteration
    fast, slow = InstanceEngine(_deployment()), InstanceEngine(_deployment())
    monkeypatch.setattr(slow, "_try_jump", lambda until_s, done: False)
    for engine in (fast, slow):
        _poisson_load(engine, 2.0, 60.0)
        engine.advance(60.0)
    assert fast.memory_busy_fraction == pytest.approx(slow.memory_busy_fraction, rel=1e-3)
    # prefill is compute-bound: a saturated engine of long prompts streams memory a small share of its time
    prefill = InstanceEngine(_deployment())
    for i in range(50):
        prefill.submit(i, 0.0, 6000, 1)
    prefill.advance(2.0)
    assert prefill.busy_fraction > 0.95 and prefill.memory_busy_fraction < 0.5


def test_requests_arriving_later_wait_for_their_arrival_time():
    engine = InstanceEngine(_deployment())
    engine.submit("later", 50.0, 100, 10)
    assert engine.advance(40.0) == []
    assert engine.num_pending == 1
    [r] = engine.advance(60.0)
    assert r.first_token_s > 50.0


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 30), st.integers(1, 3000), st.integers(1, 600)), min_size=1, max_size=40),
    st.sampled_from([0.065, 0.08, 0.9]),  # small KV caches force preemption
    st.sampled_from([4, 64, 256]),
    st.booleans(),
)
def test_engine_invariants_hold_for_any_arrivals(reqs, util, max_seqs, chunked):
    dep = _deployment(
        model=find_model("Qwen2.5-0.5B"),
        gpu_memory_utilization=util,
        max_model_len=4096,
        max_num_seqs=max_seqs,
        enable_chunked_prefill=chunked,
    )
    plan = plan_memory(dep)
    assume(plan.fits)
    engine = InstanceEngine(dep, plan=plan)
    accepted = {i for i, (t, p, o) in enumerate(reqs) if engine.submit(i, t, p, o)}
    done: list[CompletedRequest] = []
    for t in range(0, 40, 2):
        done += engine.advance(float(t))
        assert engine.num_running <= max_seqs
        assert 0.0 <= engine.kv_usage <= 1.0
    done += engine.advance(1e7)
    assert sorted(r.request_id for r in done) == list(range(len(reqs)))
    assert {r.request_id for r in done if not r.rejected} == accepted
    floor = engine.perf.decode_tpot_s()
    for r in done:
        if r.rejected:
            continue
        assert 0.0 <= r.queue_s <= r.ttft_s <= r.e2e_s
        assert r.finish_s == pytest.approx(r.arrival_s + r.e2e_s)
        if r.output_tokens > 1 and r.preemptions == 0:
            assert r.tpot_s >= floor * (1 - 1e-9)
