"""Requests served as they arrive (an open loop), timed one by one: the host's clock drives
model/decode/open_loop.py's programs, as vLLM's `benchmark_serving` and SGLang's bench_serving
send requests at a rate.

Arrivals are a Poisson process of `rate` requests a second (exponential gaps, from the seed), the
first at 0. The loop, each pass: every request that has arrived takes a free slot (its prefill and
first token: `admit`, then one sync), then the active slots run one batched round (`advance`, then
one sync, reading each slot's position); with no request active it sleeps until the next arrives.
A request is timed on this clock:

    queued  admitted - arrived        (waited for a slot; admissions happen between rounds)
    TTFT    first token - arrived     (its prefill ran after the round it arrived in)
    TPOT    (done - first token) / (N - 1)
    E2E     done - arrived
    gaps    between the syncs at which its tokens arrived (a round gives several at once)

What the host loop costs: one dispatch and one sync a round and an admission, which a device loop
(refill.py) does not pay; the ratio of the two on the same queue is in docs/batches.md.
"""

from __future__ import annotations

import dataclasses
import time
from typing import NamedTuple

import jax
import numpy as np

from specbench.model.decode import batched
from specbench.model.nets import network


def poisson_arrivals(rate: float, n: int, seed: int) -> np.ndarray:
    """n arrival times (s) of a Poisson process of `rate` a second, the first at 0. A rate whose
    arrivals the clock cannot hold (cli/asked/checks.check_arrivals bounds it first) is a ValueError."""
    if n <= 1:
        return np.zeros(n)
    if not (rate > 0 and np.isfinite(1.0 / rate)):
        raise ValueError(f"a rate of {rate:g}/s has no finite arrivals")
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, n)
    times = np.concatenate([[0.0], np.cumsum(gaps[1:])])
    if not np.isfinite(times[-1]):
        raise ValueError(f"a rate of {rate:g}/s has no finite arrivals")
    return times


class Times(NamedTuple):
    """One request's times as the row schema takes them (results/requests.py: {m}_queued_s, ...)."""

    queued_s: float
    ttft_s: float
    tpot_s: float
    e2e_s: float
    gaps_s: list  # between the syncs at which its tokens arrived


class Served(NamedTuple):
    """Every repeat's requests served open-loop, AR's and SD's (bench.open_loop_runs): per repeat,
    each request's Times in request order, and the seconds the run took."""

    ar: list  # [repeat][request] Times
    sd: list
    ar_run_s: list  # [repeat] s: first arrival to last token
    sd_run_s: list


class Request(NamedTuple):
    """One request as the loop served it: its times (s from the run's start) and its tokens."""

    arrived: float
    admitted: float
    first: float
    done: float
    arrivals: list  # when its tokens arrived: one time per token
    tokens: np.ndarray  # [N] int32

    def times(self, n_tokens: int) -> Times:
        """queued, TTFT, TPOT, E2E (s) and the gaps between its tokens' arrivals."""
        return Times(
            self.admitted - self.arrived,
            self.first - self.arrived,
            (self.done - self.first) / max(1, n_tokens - 1),
            self.done - self.arrived,
            np.diff(self.arrivals).tolist(),
        )


@dataclasses.dataclass
class Serving:
    """A request while the loop serves it (None: not yet): when it was admitted, when its first
    token came, when each of its tokens arrived, when it was done, and its tokens."""

    admitted: float | None = None
    first: float | None = None
    arrivals: list = dataclasses.field(default_factory=list)
    done: float | None = None
    tokens: np.ndarray | None = None


def serve(slots, prompts: list[list[int]], arrivals, B: int, n_tokens: int, config, max_len, seed):
    """Serve the prompts as requests arriving at `arrivals` (s, ascending) on B slots (generate.
    open_slots); request i draws from keys(seed, Q)[i]. Returns ([Request] in request order, the
    seconds the whole run took). The slots' first fill (compiling where it is the first call) runs
    before the clock."""
    Q = len(prompts)
    # on the host: a device array indexed by a Python int compiles a gather for every queue's shape
    bufs, n_prompts = (np.asarray(a) for a in batched.prompt_buffers(prompts, max_len))
    keys = np.asarray(batched.keys(seed, Q))
    first = np.minimum(np.arange(B), Q - 1)
    state = slots.empty(bufs[first], n_prompts[first], keys[first])
    begin = np.asarray(network.decoder_prompt_length(config, np.asarray(n_prompts)), int) + np.zeros(Q, int)
    ends = begin + n_tokens
    holding, nxt, left = [-1] * B, 0, Q
    served = [Serving() for _ in range(Q)]
    jax.block_until_ready(state)
    t0 = time.perf_counter()
    clock = lambda: time.perf_counter() - t0
    while left:
        now, admitted = clock(), []
        for i in range(B):
            if holding[i] < 0 and nxt < Q and arrivals[nxt] <= now:
                state = slots.admit(state, i, bufs[nxt], n_prompts[nxt], keys[nxt])
                holding[i], served[nxt].admitted = nxt, now
                admitted.append(nxt)
                nxt += 1
        if admitted:
            jax.block_until_ready(state.n)  # the admissions' one sync: their first tokens are there
            for r in admitted:
                served[r].first = clock()
                served[r].arrivals = [served[r].first]
        active = np.asarray([r >= 0 for r in holding])
        if not active.any():
            time.sleep(max(0.0, arrivals[nxt] - clock()))
            continue
        state = slots.advance(state, active)
        n = np.asarray(state.n)  # the round's one sync
        t = clock()
        for i in np.flatnonzero(active):
            r = holding[i]
            got = min(int(n[i]) - begin[r], n_tokens)
            served[r].arrivals += [t] * (got - len(served[r].arrivals))
            if got >= n_tokens:
                served[r].done, served[r].tokens = t, np.asarray(state.tokens)[i, begin[r] : ends[r]]
                holding[i], left = -1, left - 1
    out = [
        Request(float(arrivals[r]), s.admitted, s.first, s.done, s.arrivals, s.tokens)
        for r, s in enumerate(served)
    ]
    return out, clock()
