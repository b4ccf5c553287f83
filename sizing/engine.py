"""A stepwise continuous-batching engine of one vLLM instance, driven by an external clock.

It reproduces what vLLM's scheduler does each iteration (V1 with chunked prefill; V0-style whole-prompt
prefill steps when chunked prefill is off): every running sequence decodes one token, prefill chunks fill the
rest of ``max_num_batched_tokens``, waiting requests are admitted first-come-first-served while
``max_num_seqs`` and the KV cache allow, and when the KV cache runs out the most recently admitted sequence is
preempted (its KV freed, recomputed later). Iteration times come from :mod:`sizing.perf`.

Speed: between events (an arrival, a prefill, a completion, KV exhaustion, the end of ``advance``) every
iteration is decode-only with the same batch, so its cost is affine in the batch's context, which grows by the
batch size per iteration. The engine jumps over such runs in closed form instead of looping per iteration.

Example::

    >>> from sizing import Deployment, InstanceEngine, find_gpu, find_model
    >>> engine = InstanceEngine(Deployment(find_model("Qwen2.5-7B"), find_gpu("A10"), max_model_len=8192))
    >>> engine.submit("r1", arrival_s=0.0, prompt_tokens=1000, output_tokens=200)
    True
    >>> done = engine.advance(60.0)
    >>> [r.request_id for r in done], engine.num_running, engine.num_waiting
    (['r1'], 0, 0)
    >>> 0.0 < done[0].ttft_s < done[0].e2e_s and done[0].tpot_s > 0
    True
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass

from sizing.errors import SizingInputError
from sizing.memory import Deployment, MemoryPlan, plan_memory
from sizing.perf import PerfModel, perf_for

_INF = float("inf")


@dataclass(frozen=True, slots=True)
class CompletedRequest:
    """One finished (or rejected) request. Times in seconds on the engine's clock."""

    request_id: Hashable
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    first_token_s: float
    finish_s: float
    queue_s: float  # arrival until first scheduled
    ttft_s: float  # arrival until the first output token
    tpot_s: float  # mean time per output token after the first
    e2e_s: float  # arrival until the last token
    preemptions: int = 0
    rejected: bool = False  # refused at arrival: waiting queue full or prompt longer than max_model_len


class _Seq:
    __slots__ = (
        "rid",
        "arrival",
        "prompt",
        "output",
        "need",
        "computed",
        "generated",
        "first_sched",
        "first_token",
        "base",
        "finish_d",
        "order",
        "alive",
        "preemptions",
        "local",
        "cached",
    )

    def __init__(self, rid: Hashable, arrival: float, prompt: int, output: int) -> None:
        self.rid = rid
        self.arrival = arrival
        self.prompt = prompt
        self.output = output
        self.need = (
            prompt  # tokens to compute before the next sample (prompt, or prompt + output after preemption)
        )
        self.computed = 0
        self.generated = 0
        self.first_sched = -1.0
        self.first_token = -1.0
        self.base = 0  # context = base + decode counter while decoding
        self.finish_d = 0
        self.order = 0
        self.alive = False  # in the decoding set
        self.preemptions = 0
        self.local = 0.0  # KV its local (sliding-window or linear) groups hold while running (hybrid models)
        self.cached = 0  # prompt tokens in vLLM's prefix cache: never computed, held in the KV cache


class InstanceEngine:
    """One vLLM instance under an external clock.

    ``submit`` requests (arrival times may lie in the future), then ``advance(until_s)`` runs every scheduler
    iteration that starts before ``until_s`` and returns the requests that completed. Set ``speed_factor``
    below 1.0 to slow the GPU (a throttled card runs every iteration ``1 / speed_factor`` times longer).
    """

    def __init__(
        self,
        deployment: Deployment,
        *,
        max_waiting: int | None = None,
        speed_factor: float = 1.0,
        start_s: float = 0.0,
        plan: MemoryPlan | None = None,
        perf: PerfModel | None = None,
    ) -> None:
        self.deployment = deployment
        self.plan = plan or plan_memory(deployment)
        if not self.plan.fits:
            raise SizingInputError(
                f"{deployment.model.name} on {deployment.tp} x {deployment.gpu.name}: {self.plan.reason}"
            )
        self.perf = perf or perf_for(deployment, self.plan)
        self.max_waiting = max_waiting
        self.speed_factor = speed_factor
        self._max_seqs = self.plan.max_num_seqs
        self._budget = self.plan.max_num_batched_tokens
        self._chunked = self.plan.chunked_prefill
        self._max_len = self.plan.max_model_len
        self._kv_capacity = float(self.plan.kv_context_tokens)
        # A hybrid model's local groups (sizing.memory.LocalAttention): each running sequence holds up to the
        # window there (or one block of linear-attention state), in the full-attention groups' tokens,
        # charged whole while it runs; its decode steps read that window (or state) in the local layers.
        self._local = local = self.plan.local
        self._local_read = local.read_per_held if local else 0.0
        self._local_sum = 0.0
        self._block = local.block_size if local else deployment.block_size
        self._slack = self._block / 2.0  # a sequence's last block is half empty on average
        self._prefix_caching = self.plan.prefix_caching
        self._now = start_s
        self._last_until = start_s
        self._busy_total = 0.0
        self._busy_fraction = 0.0
        # the part of the busy time the iterations spent streaming memory (weights and KV cache): what DCGM's
        # DRAM-active ratio reads, high on bandwidth-bound decode, low on compute-bound prefill
        self._memory_total = 0.0
        self._memory_fraction = 0.0
        self._affine_read: dict[int, float] = {}
        self._pending: list[tuple[float, int, _Seq]] = []
        self._submitted = 0
        self._waiting: deque[_Seq] = deque()
        self._running: dict[int, _Seq] = {}  # admission order -> seq; the last one is preempted first
        self._prefilling: list[_Seq] = []
        self._heap: list[tuple[int, int, _Seq]] = []  # (finish decode count, order, seq) of decoding seqs
        self._order = 0
        self._d = 0  # decode iterations so far
        self._n_dec = 0
        self._base_sum = 0  # sum of base over decoding seqs: their context is _base_sum + _n_dec * _d
        self._prefill_kv = 0  # KV tokens held by prefilling seqs
        self._affine: dict[tuple[int, bool], tuple[float, float]] = {}  # (sequences, past the sparse knee)
        # When a list: each request's TTFT (s) is appended the moment its first token is sampled, as vLLM
        # observes its time_to_first_token histogram then (not at the request's end); the owner drains it.
        self.first_tokens: list[float] | None = None

    # ----------------------------------------------------------------------------------------- public API
    @property
    def now(self) -> float:
        """The engine's clock: the end of the last iteration run (or the last ``advance`` target if idle)."""
        return self._now

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_pending(self) -> int:
        """Submitted requests whose arrival time the engine has not reached yet."""
        return len(self._pending)

    @property
    def kv_usage(self) -> float:
        """Share of the KV cache in use, 0..1 (vLLM's ``kv_cache_usage_perc`` / ``gpu_cache_usage_perc``)."""
        return min(1.0, self._kv_used() / self._kv_capacity) if self._kv_capacity else 0.0

    @property
    def busy_fraction(self) -> float:
        """Share of the last ``advance`` window the GPU spent running iterations (0..1)."""
        return self._busy_fraction

    utilization = busy_fraction

    @property
    def memory_busy_fraction(self) -> float:
        """Share of the last ``advance`` window the memory interface spent streaming weights and KV (0..1)."""
        return self._memory_fraction

    def submit(
        self,
        request_id: Hashable,
        arrival_s: float,
        prompt_tokens: int,
        output_tokens: int,
        cached_tokens: int = 0,
    ) -> bool:
        """Queue a request arriving at ``arrival_s``. Returns False when it can never run
        (rejected at arrival: prompt longer than max_model_len); output is capped at max_model_len, like
        vLLM's max_tokens check. ``cached_tokens`` of its prompt are found in the prefix cache when it is
        scheduled (whole blocks, never the last token): not computed, but held in the KV cache like the rest
        (a block shared with another running request is counted for each); none where the plan has no prefix
        caching (``MemoryPlan.prefix_caching``)."""
        prompt = max(1, int(prompt_tokens))
        seq = _Seq(request_id, float(arrival_s), prompt, self.output_tokens_for(prompt, output_tokens))
        seq.cached = max(0, int(cached_tokens))  # an output of 0 marks "reject at arrival"
        self._submitted += 1
        heapq.heappush(self._pending, (seq.arrival, self._submitted, seq))
        return seq.output > 0

    def output_tokens_for(self, prompt_tokens: int, output_tokens: int) -> int:
        """The output tokens this engine produces for a request of these sizes: at least one, and no more than
        ``max_model_len`` leaves after the prompt (vLLM stops a sequence there); 0 for a prompt it rejects at
        arrival (one that fills ``max_model_len`` by itself)."""
        prompt = max(1, int(prompt_tokens))
        if prompt >= self._max_len:
            return 0
        return min(max(1, int(output_tokens)), self._max_len - prompt)

    def advance(self, until_s: float) -> list[CompletedRequest]:
        """Run every iteration that starts before ``until_s``; return the requests completed meanwhile."""
        done: list[CompletedRequest] = []
        window_start = self._last_until
        busy_start = self._busy_total
        memory_start = self._memory_total
        pending = self._pending
        while True:
            if pending and pending[0][0] <= self._now:
                self._admit_arrivals(done)
            if not self._running and not self._waiting:
                nxt = self._pending[0][0] if self._pending else _INF
                if nxt >= until_s:
                    self._now = max(self._now, until_s)
                    break
                self._now = max(self._now, nxt)
                continue
            if self._now >= until_s:
                break
            if not self._try_jump(until_s, done):
                self._step(done)
        span = until_s - window_start
        self._busy_fraction = min(1.0, (self._busy_total - busy_start) / span) if span > 0 else 0.0
        self._memory_fraction = min(1.0, (self._memory_total - memory_start) / span) if span > 0 else 0.0
        self._last_until = max(self._last_until, until_s)
        return done

    # ---------------------------------------------------------------------------------------- internals
    def _kv_used(self) -> float:
        decode_ctx = self._base_sum + self._n_dec * self._d
        return decode_ctx + self._prefill_kv + self._slack * len(self._running) + self._local_sum

    def _local_of(self, seq: _Seq) -> float:
        return self._local.local_tokens(seq.prompt + seq.output) if self._local else 0.0

    def _cached_of(self, seq: _Seq) -> int:
        """Prompt tokens of ``seq`` found in the prefix cache at admission: whole blocks short of its last
        token, which vLLM always computes for the logits (``max_cache_hit_length = prompt - 1``)."""
        if not seq.cached or not self._prefix_caching:
            return 0
        return min(seq.cached, seq.need - 1) // self._block * self._block

    def _leave(self, seq: _Seq) -> None:
        """A running sequence leaves (finished or preempted): what its local groups held is freed."""
        self._local_sum = self._local_sum - seq.local if self._running else 0.0
        seq.local = 0.0

    def _admit_arrivals(self, done: list[CompletedRequest]) -> None:
        pending, now = self._pending, self._now
        while pending and pending[0][0] <= now:
            seq = heapq.heappop(pending)[2]
            if seq.output == 0 or (self.max_waiting is not None and len(self._waiting) >= self.max_waiting):
                done.append(
                    CompletedRequest(
                        seq.rid,
                        seq.arrival,
                        seq.prompt,
                        0,
                        seq.arrival,
                        seq.arrival,
                        0.0,
                        0.0,
                        0.0,
                        0.0,
                        0,
                        True,
                    )
                )
                continue
            self._waiting.append(seq)

    def _finish(self, seq: _Seq, done: list[CompletedRequest]) -> None:
        end = self._now
        ttft = seq.first_token - seq.arrival
        tpot = (end - seq.first_token) / (seq.output - 1) if seq.output > 1 else 0.0
        done.append(
            CompletedRequest(
                seq.rid,
                seq.arrival,
                seq.prompt,
                seq.output,
                seq.first_token,
                end,
                seq.first_sched - seq.arrival,
                ttft,
                tpot,
                end - seq.arrival,
                seq.preemptions,
            )
        )

    def _remove_decoding(self, seq: _Seq) -> None:
        seq.alive = False
        self._n_dec -= 1
        self._base_sum -= seq.base

    def _preempt_last(self) -> bool:
        """Free the most recently admitted running sequence (vLLM's recompute preemption)."""
        if not self._running:
            return False
        _, seq = self._running.popitem()
        self._leave(seq)
        if seq.alive:
            seq.generated += self._d - (seq.finish_d - (seq.output - seq.generated))
            self._remove_decoding(seq)
            seq.need = seq.prompt + seq.generated
        else:
            self._prefilling.remove(seq)
            self._prefill_kv -= seq.computed
        seq.computed = 0
        seq.preemptions += 1
        self._waiting.appendleft(seq)
        return True

    def _try_jump(self, until_s: float, done: list[CompletedRequest]) -> bool:
        """Run k >= 2 identical decode-only iterations in closed form; False when the next one is not."""
        n = self._n_dec
        if n == 0 or self._prefilling:
            return False
        running = len(self._running)
        c0 = self._base_sum + n * self._d
        free = self._kv_capacity - c0 - self._prefill_kv - self._slack * running - self._local_sum
        can_admit = running < self._max_seqs
        if can_admit and self._waiting:
            first = self._waiting[0]
            hit = self._cached_of(first)
            chunk = min(first.need - hit, self._budget) if self._chunked else first.need - hit
            if n + chunk + self._slack + self._local_of(first) + hit <= free:
                return False  # the next iteration admits someone
        heap = self._heap
        while heap:
            top = heap[0]
            seq = top[2]
            if seq.alive and seq.order == top[1]:
                break
            heapq.heappop(heap)
        k = heap[0][0] - self._d if heap else 1 << 30
        kv_k = int(free // n)
        if kv_k < k:
            k = kv_k
        c_read = c0 + self._local_sum * self._local_read
        k, above = self._sparse_limit(n, c_read, k)
        if k < 2:
            return False
        horizon = until_s
        if can_admit and self._pending and self._pending[0][0] < horizon:
            horizon = self._pending[0][0]
        ab = self._affine.get((n, above))
        if ab is None:
            ab = self._affine[(n, above)] = self.perf.decode_affine(n, c_read)
        a, b = ab
        speed = self.speed_factor
        target = (horizon - self._now) * speed
        if target <= 0:
            return False
        half_bn = b * n / 2.0
        cost = k * a + b * k * c_read + half_bn * k * (k - 1)
        if cost > target:
            # smallest k with k*a + b*(k*c + n*k*(k-1)/2) >= target: the iteration that crosses the horizon
            qb = a + b * c_read - half_bn
            if half_bn > 0:
                kt = math.ceil((-qb + math.sqrt(qb * qb + 4 * half_bn * target)) / (2 * half_bn) - 1e-9)
            else:
                kt = math.ceil(target / qb - 1e-9)
            if kt < k:
                k = kt
            if k < 2:
                return False
            cost = k * a + b * k * c_read + half_bn * k * (k - 1)
        memory = self._jump_memory(n, k, b * k * c_read + half_bn * k * (k - 1))
        cost /= speed
        self._now += cost
        self._busy_total += cost
        self._memory_total += min(cost, memory / speed)
        self._d += k
        self._complete_decodes(done)
        return True

    def _sparse_limit(self, n: int, c_read: float, k: int) -> tuple[int, bool]:
        """``k`` cut so ``k`` iterations of ``n`` sequences from ``c_read`` of context stay on one side of
        sparse attention's knee (where the cost bends), and whether they are past it."""
        knee = self.perf.sparse_knee(n)
        if c_read >= knee:
            return k, True
        if c_read + n * (k - 1) > knee:
            k = int((knee - c_read) // n) + 1
        return k, False

    def _jump_memory(self, n: int, k: int, context_cost: float) -> float:
        """The memory-streaming part of ``k`` decode iterations of ``n`` sequences whose context costs
        ``context_cost`` in all: the weights each reads, and that context where they are bandwidth-bound."""
        read = self._affine_read.get(n)
        if read is None:
            read = self._affine_read[n] = self.perf.decode_read_s(n, 0.0)
        return k * read + context_cost if read > 0 else 0.0

    def _complete_decodes(self, done: list[CompletedRequest]) -> None:
        heap, d = self._heap, self._d
        while heap and heap[0][0] <= d:
            entry = heapq.heappop(heap)
            seq = entry[2]
            if not (seq.alive and seq.order == entry[1]):
                continue
            seq.generated = seq.output
            self._remove_decoding(seq)
            del self._running[seq.order]
            self._leave(seq)
            self._finish(seq, done)

    def _step(self, done: list[CompletedRequest]) -> None:
        """One scheduler iteration, scheduled the way vLLM's scheduler does."""
        cap = self._kv_capacity
        used = self._make_decode_room(cap)
        chunks: list[tuple[_Seq, int]] = []
        # V0 without chunked prefill runs prompts in their own iterations
        prefill_only = not self._chunked and bool(self._waiting) and len(self._running) < self._max_seqs
        n_dec = 0 if prefill_only else self._n_dec
        budget = self._budget - n_dec
        kv_free = cap - used - n_dec
        if not prefill_only:
            budget, kv_free = self._continue_prefills(chunks, budget, kv_free)
        self._admit_waiting(chunks, budget, kv_free)
        if prefill_only and not chunks:
            n_dec = self._n_dec
        if not chunks and n_dec == 0:
            self._unblock(done)
            return
        dt, read = self._iteration_s(n_dec, chunks)
        self._now += dt
        self._busy_total += dt
        self._memory_total += min(dt, read)
        if n_dec:
            self._d += 1
            self._complete_decodes(done)
        self._advance_prefills(chunks, done)

    def _make_decode_room(self, cap: float) -> float:
        """Decodes first: each running decoding sequence needs one more KV slot; preempt until they fit. The
        KV cache in use after."""
        used = self._kv_used()
        if self._n_dec and used + self._n_dec > cap:
            while self._n_dec and self._kv_used() + self._n_dec > cap:
                if not self._preempt_last():
                    break
            used = self._kv_used()
        return used

    def _continue_prefills(
        self, chunks: list[tuple[_Seq, int]], budget: int, kv_free: float
    ) -> tuple[int, float]:
        """The next chunk of each partly prefilled prompt, in order, while the token budget and KV cache
        last; the budget and free KV left."""
        for seq in self._prefilling:
            if budget <= 0:
                break
            c = min(seq.need - seq.computed, budget, int(kv_free))
            if c <= 0:
                break
            chunks.append((seq, c))
            budget -= c
            kv_free -= c
        return budget, kv_free

    def _admit_waiting(self, chunks: list[tuple[_Seq, int]], budget: int, kv_free: float) -> None:
        """New prompts from the head of the queue while the budget, the KV cache and max_num_seqs allow."""
        while self._waiting and budget > 0 and len(self._running) < self._max_seqs:
            seq = self._waiting[0]
            hit = self._cached_of(seq)
            c = min(seq.need - hit, budget)
            if not self._chunked and c < seq.need - hit:
                break
            local = self._local_of(seq)
            if c + hit + self._slack + local > kv_free:
                break
            self._waiting.popleft()
            self._order += 1
            seq.order = self._order
            self._running[seq.order] = seq
            seq.local = local
            self._local_sum += local
            seq.computed = hit  # found in the prefix cache: held, never computed
            self._prefill_kv += hit
            self._prefilling.append(seq)
            if seq.first_sched < 0:
                seq.first_sched = self._now
            chunks.append((seq, c))
            budget -= c
            kv_free -= c + hit + self._slack + local

    def _unblock(self, done: list[CompletedRequest]) -> None:
        """Nothing could be scheduled: partial prefills hold the KV cache. Free the newest, as vLLM does;
        with nothing running, the head of the queue can never fit and is refused."""
        if self._preempt_last() or not self._waiting:
            return
        seq = self._waiting.popleft()
        done.append(
            CompletedRequest(
                seq.rid,
                seq.arrival,
                seq.prompt,
                0,
                self._now,
                self._now,
                self._now - seq.arrival,
                0.0,
                0.0,
                self._now - seq.arrival,
                seq.preemptions,
                True,
            )
        )

    def _iteration_s(self, n_dec: int, chunks: list[tuple[_Seq, int]]) -> tuple[float, float]:
        """The iteration's time from the performance model (its tokens, context and attention pairs), and the
        part of it the memory spends streaming the weights and the context's KV."""
        tokens = n_dec
        ctx = float(self._base_sum + self._n_dec * self._d) if n_dec else 0.0
        pairs = ctx
        if n_dec and self._local_sum:
            ctx += self._local_sum * self._local_read  # the local layers read their windows or states
        sampled = n_dec
        for seq, c in chunks:
            tokens += c
            ctx += seq.computed
            pairs += c * (seq.computed + (c + 1) / 2.0)
            if seq.computed + c >= seq.need:
                sampled += 1
        step, read = self.perf.step_parts(tokens, ctx, pairs, sampled)
        speed = self.speed_factor
        return step / speed, read / speed

    def _advance_prefills(self, chunks: list[tuple[_Seq, int]], done: list[CompletedRequest]) -> None:
        """Apply the iteration's prefill chunks; a prompt done samples its first token and starts decoding."""
        for seq, c in chunks:
            seq.computed += c
            self._prefill_kv += c
            if seq.computed < seq.need:
                continue
            # prefill done: this iteration sampled a token
            self._prefilling.remove(seq)
            self._prefill_kv -= seq.computed
            seq.generated += 1
            if seq.first_token < 0:
                seq.first_token = self._now
                if self.first_tokens is not None:
                    self.first_tokens.append(self._now - seq.arrival)
            if seq.generated >= seq.output:
                del self._running[seq.order]
                self._leave(seq)
                self._finish(seq, done)
                continue
            seq.base = seq.computed - self._d
            seq.finish_d = self._d + (seq.output - seq.generated)
            seq.alive = True
            self._n_dec += 1
            self._base_sum += seq.base
            heapq.heappush(self._heap, (seq.finish_d, seq.order, seq))
