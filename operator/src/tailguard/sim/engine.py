"""One vLLM replica as a continuous-batching engine, advanced in time, with vLLM's own metrics.

Feed it requests with :meth:`Engine.add_request` and move it forward with :meth:`Engine.advance_to`;
read what a scrape of ``/metrics`` would show with :meth:`Engine.snapshot`. It knows nothing about
fleets, routers or autoscalers, so a stand-alone process can give one pod a vLLM voice with it.

The scheduler follows vLLM's V1 engine in outline: every step decodes one token for each running
request and fills the rest of ``max-num-batched-tokens`` with prefill chunks, first for requests
already running, then for waiting ones (first come, first served) while fewer than
``max-num-seqs`` run and the KV cache has room. When a decode finds the cache full, the newest
running request is preempted and recomputed later. A step that ends a prefill emits the first token.

Runs of pure decode steps (no prefill, nothing admitted) are advanced in one go: the batch is the
same in every step and the context grows by one token per sequence, so the time of ``k`` steps is
a closed-form sum. That keeps a simulated hour of a busy replica in the tens of thousands of
Python operations rather than millions.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tailguard.contract.vllm import E2E_BUCKETS_S, TPOT_BUCKETS_S, TTFT_BUCKETS_S
from tailguard.sim.profiles import EngineProfile

#: Called when a request leaves the engine: ``(request_id, ttft_s, tpot_s, finish_s)``. ``ttft_s``
#: is ``inf`` for a request aborted before its first token, ``tpot_s`` is ``inf`` for one aborted
#: while decoding and ``nan`` for a request of a single output token (TPOT is undefined).
FinishCallback = Callable[[int, float, float, float], None]


class Histogram:
    """A Prometheus histogram: per-bucket counts (the last one is ``+Inf``), sum and count."""

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float, n: int = 1) -> None:
        """Record ``n`` observations of ``value`` (``le`` semantics: a value on a bound is in it)."""
        self.counts[bisect_left(self.bounds, value)] += n
        self.sum += value * n
        self.count += n

    def cumulative(self) -> tuple[tuple[float, int], ...]:
        """``(upper_bound, cumulative_count)`` pairs as exposed on ``/metrics``, ending with ``+Inf``."""
        out = []
        running = 0
        for bound, count in zip((*self.bounds, math.inf), self.counts, strict=True):
            running += count
            out.append((bound, running))
        return tuple(out)


@dataclass(frozen=True)
class EngineSnapshot:
    """What one scrape of the replica's ``/metrics`` shows (counters are cumulative)."""

    time: float
    running: int
    waiting: int
    kv_cache_usage: float
    requests_finished: int
    requests_aborted: int
    prompt_tokens: int
    generation_tokens: int
    preemptions: int
    ttft: tuple[tuple[float, int], ...]
    ttft_sum: float
    tpot: tuple[tuple[float, int], ...]
    tpot_sum: float
    itl: tuple[tuple[float, int], ...]
    itl_sum: float
    e2e: tuple[tuple[float, int], ...]
    e2e_sum: float
    queue: tuple[tuple[float, int], ...]
    queue_sum: float
    prefill: tuple[tuple[float, int], ...] = ()
    prefill_sum: float = 0.0


class _Request:
    __slots__ = (
        "arrival",
        "computed",
        "finish_step",
        "first_token",
        "gen_base",
        "join_step",
        "output",
        "prompt",
        "rid",
        "scheduled",
        "scheduled_at",
        "target",
    )

    def __init__(self, rid: int, arrival: float, prompt: int, output: int) -> None:
        self.rid = rid
        self.arrival = arrival
        self.prompt = prompt
        self.output = output
        self.computed = 0  # tokens of the current prefill already in the KV cache
        self.target = prompt  # tokens to prefill (prompt, or prompt + generated after a preemption)
        self.first_token = -1.0
        self.gen_base = 0  # tokens generated before joining the decode set
        self.join_step = 0  # decode-step counter when it joined the decode set
        self.finish_step = 0
        self.scheduled = False  # left the waiting queue at least once (queue time recorded)
        self.scheduled_at = -1.0  # start of the step that first scheduled it


class Engine:
    """A continuous-batching vLLM replica. Times are seconds on the caller's clock."""

    def __init__(
        self,
        profile: EngineProfile,
        *,
        max_num_seqs: int | None = None,
        max_num_batched_tokens: int | None = None,
        kv_capacity_tokens: int | None = None,
        start_time: float = 0.0,
        on_finish: FinishCallback | None = None,
        ttft_buckets_s: tuple[float, ...] = TTFT_BUCKETS_S,
        tpot_buckets_s: tuple[float, ...] = TPOT_BUCKETS_S,
    ) -> None:
        self.profile = profile
        self.max_num_seqs = max_num_seqs or profile.max_num_seqs
        self.max_num_batched_tokens = max(
            max_num_batched_tokens or profile.max_num_batched_tokens, self.max_num_seqs
        )
        self.kv_capacity = kv_capacity_tokens or profile.kv_capacity_tokens
        self.on_finish = on_finish
        self.clock = start_time
        self._waiting: deque[_Request] = deque()
        self._prefilling: list[_Request] = []
        self._decoding: dict[int, _Request] = {}
        self._finish_heap: list[tuple[int, int]] = []
        self._step = 0
        self._decode_context = 0  # KV tokens of the decode set
        self._kv_used = 0  # KV tokens of everything running
        self.requests_finished = 0
        self.requests_aborted = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.preemptions = 0
        self.steps = 0
        self.busy_time = 0.0
        #: End of the last engine step (the clock also moves while idle).
        self.busy_until = start_time
        # The SLO histograms' bounds: vLLM's defaults, or what --custom-histogram-buckets set.
        self.ttft = Histogram(ttft_buckets_s)
        self.tpot = Histogram(tpot_buckets_s)
        self.itl = Histogram(tpot_buckets_s)
        self.e2e = Histogram(E2E_BUCKETS_S)
        self.queue = Histogram(E2E_BUCKETS_S)
        self.prefill = Histogram(E2E_BUCKETS_S)

    # -- what a scrape shows -------------------------------------------------------------------

    @property
    def num_running(self) -> int:
        return len(self._decoding) + len(self._prefilling)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def kv_cache_usage(self) -> float:
        return min(1.0, self._kv_used / self.kv_capacity)

    @property
    def idle(self) -> bool:
        return not (self._decoding or self._prefilling or self._waiting)

    def progress(self, rid: int) -> tuple[float, int] | None:
        """(first-token time or -1, output tokens generated so far) of a request in the engine; None
        once it finished or was aborted (or for an unknown id). For serving tokens as they come."""
        req = self._decoding.get(rid)
        if req is not None:
            return req.first_token, req.gen_base + (self._step - req.join_step)
        for req in (*self._prefilling, *self._waiting):
            if req.rid == rid:
                return req.first_token, max(0, req.target - req.prompt) if req.first_token >= 0 else 0
        return None

    def snapshot(self) -> EngineSnapshot:
        """The metrics as a scrape at the engine's current clock would read them."""
        return EngineSnapshot(
            time=self.clock,
            running=self.num_running,
            waiting=self.num_waiting,
            kv_cache_usage=self.kv_cache_usage,
            requests_finished=self.requests_finished,
            requests_aborted=self.requests_aborted,
            prompt_tokens=self.prompt_tokens,
            generation_tokens=self.generation_tokens,
            preemptions=self.preemptions,
            ttft=self.ttft.cumulative(),
            ttft_sum=self.ttft.sum,
            tpot=self.tpot.cumulative(),
            tpot_sum=self.tpot.sum,
            itl=self.itl.cumulative(),
            itl_sum=self.itl.sum,
            e2e=self.e2e.cumulative(),
            e2e_sum=self.e2e.sum,
            queue=self.queue.cumulative(),
            queue_sum=self.queue.sum,
            prefill=self.prefill.cumulative(),
            prefill_sum=self.prefill.sum,
        )

    # -- input ---------------------------------------------------------------------------------

    def add_request(self, rid: int, arrival: float, prompt_tokens: int, output_tokens: int) -> None:
        """Queue a request that arrived at ``arrival`` (advance the engine to it first).

        A request that can never fit (longer than the model length or the whole KV cache) is
        rejected at once, as vLLM does with a 400, and reported as aborted.
        """
        prompt = max(1, int(prompt_tokens))
        output = max(1, int(output_tokens))
        if self.clock < arrival and self.idle:
            self.clock = arrival
        if prompt + output > self.profile.max_model_len or prompt + output > self.kv_capacity:
            self.requests_aborted += 1
            if self.on_finish is not None:
                self.on_finish(rid, math.inf, math.inf, arrival)
            return
        self._waiting.append(_Request(rid, arrival, prompt, output))

    def abort_all(self) -> int:
        """Abort every request in the engine (a pod killed after its drain timeout); returns how many."""
        aborted = [*self._waiting, *self._prefilling, *self._decoding.values()]
        self._waiting.clear()
        self._prefilling.clear()
        self._decoding.clear()
        self._finish_heap.clear()
        self._decode_context = 0
        self._kv_used = 0
        for req in aborted:
            self.requests_aborted += 1
            if self.on_finish is not None:
                ttft = req.first_token - req.arrival if req.first_token >= 0 else math.inf
                self.on_finish(req.rid, ttft, math.inf, self.clock)
        return len(aborted)

    # -- time ----------------------------------------------------------------------------------

    def advance_to(self, t: float) -> None:
        """Run every step that starts before ``t``; the clock ends at or after ``t``."""
        while self.clock < t:
            if not self._decoding and not self._prefilling:
                if not self._waiting:
                    self.clock = t
                    return
                self._mixed_step()
                continue
            if self._prefilling or (self._waiting and self._can_admit()):
                self._mixed_step()
            else:
                self._decode_run(t)

    def run_until_idle(self, limit: float = math.inf) -> None:
        """Run until nothing is left (or the clock passes ``limit``)."""
        while not self.idle and self.clock < limit:
            self.advance_to(min(limit, self.clock + 60.0))

    def _can_admit(self) -> bool:
        if self.num_running >= self.max_num_seqs:
            return False
        head = self._waiting[0]
        budget = self.max_num_batched_tokens - len(self._decoding)
        chunk = min(head.target - head.computed, budget)
        return chunk > 0 and self._kv_used + len(self._decoding) + chunk <= self.kv_capacity

    def _make_room(self, needed: int) -> None:
        """Preempt the newest running requests until ``needed`` more KV tokens fit."""
        while self._kv_used + needed > self.kv_capacity and self._decoding:
            rid = next(reversed(self._decoding))
            req = self._decoding.pop(rid)
            generated = req.gen_base + (self._step - req.join_step)
            context = req.prompt + generated
            self._decode_context -= context
            self._kv_used -= context
            needed -= 1
            req.computed = 0
            req.target = context
            self._waiting.appendleft(req)
            self.preemptions += 1

    def _decode_run(self, t: float) -> None:
        """Advance ``k ≥ 1`` identical decode steps: up to the next finish, a full cache, or ``t``."""
        batch = len(self._decoding)
        if self._kv_used + batch > self.kv_capacity:
            self._make_room(batch)
            return
        heap = self._finish_heap
        while heap and self._decoding.get(heap[0][1]) is None:
            heapq.heappop(heap)
        k = heap[0][0] - self._step if heap else 1
        k = max(1, min(k, (self.kv_capacity - self._kv_used) // batch))
        p = self.profile
        over = batch - p.knee_tokens
        fixed = p.base_step_s + p.per_seq_s * batch + (p.per_token_s * over if over > 0 else 0.0)
        c = p.per_context_token_s
        # Step j lasts fixed + c*(S0 + batch*j) (j from 0): count the steps that start before t.
        first = fixed + c * (self._decode_context + batch)
        grow = c * batch
        span = t - self.clock
        if k > 1:
            if grow > 0:
                # start_j = j*first + grow*j*(j-1)/2 < span
                qa, qb = grow / 2.0, first - grow / 2.0
                root = (-qb + math.sqrt(qb * qb + 4.0 * qa * span)) / (2.0 * qa)
            else:
                root = span / first
            starts = math.ceil(root) if root > 0 else 1
            k = max(1, min(k, starts))
        duration = k * first + grow * k * (k - 1) / 2.0
        mean_step = duration / k
        self.clock += duration
        self.busy_until = self.clock
        self.busy_time += duration
        self.steps += k
        self._step += k
        self._decode_context += batch * k
        self._kv_used += batch * k
        self.generation_tokens += batch * k
        self.itl.observe(mean_step, batch * k)
        self._finish_due()

    def _mixed_step(self) -> None:
        """One step with prefill work: decodes, running prefill chunks, then admissions."""
        decoding = self._decoding
        batch = len(decoding)
        if batch and self._kv_used + batch > self.kv_capacity:
            self._make_room(batch)
            batch = len(decoding)
        budget = self.max_num_batched_tokens - batch
        tokens = batch
        seqs = batch
        context = self._decode_context + batch
        done: list[_Request] = []

        def schedule_chunk(req: _Request) -> bool:
            """Put the next chunk of ``req``'s prefill in this step if it fits the token budget and
            the KV cache; False when it does not (and nothing after it is tried)."""
            nonlocal budget, tokens, seqs, context
            chunk = min(req.target - req.computed, budget)
            if self._kv_used + batch + chunk > self.kv_capacity:
                return False
            req.computed += chunk
            self._kv_used += chunk
            budget -= chunk
            tokens += chunk
            seqs += 1
            context += req.computed
            if req.computed >= req.target:
                done.append(req)
            return True

        for req in self._prefilling:
            if budget <= 0 or not schedule_chunk(req):
                break
        admitted_at = self.clock
        waiting = self._waiting
        while waiting and budget > 0 and batch + len(self._prefilling) < self.max_num_seqs:
            req = waiting[0]
            if not schedule_chunk(req):
                break
            waiting.popleft()
            if not req.scheduled:
                req.scheduled = True
                req.scheduled_at = admitted_at
                self.queue.observe(admitted_at - req.arrival)
            self._prefilling.append(req)
        duration = self.profile.step_time(seqs, tokens, context)
        self.clock += duration
        self.busy_until = self.clock
        self.busy_time += duration
        self.steps += 1
        if batch:
            self._step += 1
            self._decode_context += batch
            self._kv_used += batch
            self.generation_tokens += batch
            self.itl.observe(duration, batch)
        end = self.clock
        if done:
            finished = set(map(id, done))
            self._prefilling = [r for r in self._prefilling if id(r) not in finished]
            for req in done:
                self._end_prefill(req, end)
        self._finish_due()

    def _end_prefill(self, req: _Request, end: float) -> None:
        if req.first_token < 0:
            req.first_token = end
            self.ttft.observe(end - req.arrival)
            # vLLM's prefill time: from the step that first scheduled it to its first token.
            self.prefill.observe(end - req.scheduled_at)
            self.prompt_tokens += req.prompt
            generated = 1
        else:  # a recomputed request: prompt and earlier output are back, and one more token
            generated = req.target - req.prompt + 1
        self.generation_tokens += 1
        self._kv_used -= req.computed
        if generated >= req.output:
            self._finish(req, end)
            return
        req.gen_base = generated
        req.join_step = self._step
        req.finish_step = self._step + (req.output - generated)
        context = req.prompt + generated
        self._decode_context += context
        self._kv_used += context
        self._decoding[req.rid] = req
        heapq.heappush(self._finish_heap, (req.finish_step, req.rid))

    def _finish_due(self) -> None:
        heap = self._finish_heap
        decoding = self._decoding
        step = self._step
        end = self.clock
        while heap and heap[0][0] <= step:
            _, rid = heapq.heappop(heap)
            req = decoding.get(rid)
            if req is None or req.finish_step > step:
                continue
            del decoding[rid]
            context = req.prompt + req.output
            self._decode_context -= context
            self._kv_used -= context
            self._finish(req, end)

    def _finish(self, req: _Request, end: float) -> None:
        self.requests_finished += 1
        e2e = end - req.arrival
        self.e2e.observe(e2e)
        if req.output > 1:
            tpot = (end - req.first_token) / (req.output - 1)
            self.tpot.observe(tpot)
        else:
            tpot = math.nan
        if self.on_finish is not None:
            self.on_finish(req.rid, req.first_token - req.arrival, tpot, end)
