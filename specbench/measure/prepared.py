"""One configuration of a benchmark, and that configuration made ready to run and time.

`RunConfig` says what is decoded and how often; `Prepared` holds what is made from it once, outside
every clock (the prompts, the cache length that fits them, the drafter's weights), and is what
both the generations (bench.py) and the timers (timing.py) consume.
"""

from __future__ import annotations

import dataclasses

from specbench.model import generate
from specbench.model.decode.drafters import Drafter
from specbench.model.decode.sampling import Warp
from specbench.model.nets.network import Model


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """What one benchmark decodes, and how often."""

    draft: Model | None  # None when the drafter needs no draft model (lookup, layerskip)
    target: Model
    drafter: Drafter
    K: int
    warp: Warp = Warp()
    n_tokens: int = 40
    seed: int = 123
    repeats: int = 5
    warmup: int = 1
    device_loop: bool = True
    peers: tuple = ()  # peers.PeerProcess, timed alternately with specbench's own
    max_len: int | None = None  # the cache's length; None: the shortest that fits (generate.plan)
    slots: int | None = None  # refill: the prompts are a queue served on this many slots (refill.py)
    itl: bool = False  # also time each token's arrival, one host-driven generation a repeat (token_times)
    # refill: also serve the queue as requests arriving at this rate, a second (serving.py)
    request_rate: float | None = None
    slo: tuple = ()  # (("ttft", s), ("tpot", s), ...): what a request meets to count as goodput

    @property
    def weight_formats(self) -> dict:
        """What a row records of each model's weights (quantized.format_of): target_weights, and
        draft_weights where a draft model drafts (else None)."""
        from specbench.model.nets import quantized

        draft = quantized.format_of(self.draft.params) if self.drafter.spec.draft_model else None
        return {"target_weights": quantized.format_of(self.target.params), "draft_weights": draft}

    @property
    def models(self) -> list[Model]:
        return [self.target] + ([self.draft] if self.drafter.spec.draft_model else [])

    @property
    def total_steps(self) -> int:
        """Progress units of run_benchmark: warm-up, then each repeat with its step timings."""
        return self.warmup + self.repeats


@dataclasses.dataclass(frozen=True)
class Prepared:
    """One configuration made ready, once and outside every clock: the prompts, the cache length
    that fits them, and what the drafter drafts with (the dial's: an AR generation). Its methods
    run the two generations; timing.py's timers take it whole."""

    config: RunConfig
    prompts: list[list[int]]
    max_len: int
    draft_params: object

    @classmethod
    def make(cls, config: RunConfig, prompts: list[list[int]]) -> Prepared:
        c = config
        max_len = generate.plan(prompts, c.n_tokens, c.drafter.reach(c.K), c.models, c.max_len)
        one = prompts[0] if len(prompts) == 1 else prompts
        draft_params = generate.prepare_drafter(
            c.drafter, c.draft, c.target, one, c.n_tokens, c.K, c.warp, c.seed, max_len
        )
        return cls(config, prompts, max_len, draft_params)

    def generate(self, method: str):
        """One generation, "ar" or "sd": (tokens [N] for one prompt, [B, N] for a batch, [Q, N] for
        a refilled queue; DecodeStats)."""
        c, one = self.config, self.one
        if c.slots:
            return self.serve(method)
        kw = dict(max_len=self.max_len, device_loop=c.device_loop)
        if method == "ar":
            return generate.autoregressive(c.target, one, c.n_tokens, c.warp, c.seed, **kw)
        drafting = dict(drafter=c.drafter, draft_params=self.draft_params)
        return generate.speculative(c.draft, c.target, one, c.n_tokens, c.K, c.warp, c.seed, **kw, **drafting)

    def serve(self, method: str):
        """The queue served on the refilled slots, "ar" or "sd" (generate.serve)."""
        c, kw = self.config, dict(max_len=self.max_len)
        if method == "ar":
            return generate.serve_autoregressive(
                c.target, self.prompts, c.n_tokens, c.warp, c.seed, c.slots, **kw
            )
        kw |= dict(drafter=c.drafter, draft_params=self.draft_params)
        return generate.serve(c.draft, c.target, self.prompts, c.n_tokens, c.K, c.warp, c.seed, c.slots, **kw)

    def serve_open(self, method: str, arrivals):
        """The queue served as requests arriving at `arrivals` (s), "ar" or "sd", on the slots,
        the host driving them (measure/serving.py): ([serving.Request], the run's seconds)."""
        from specbench.measure import serving

        c = self.config
        slots = generate.open_slots(method, c.drafter, self.draft_params, c.target, c.warp, self.max_len, c.K)
        return serving.serve(
            slots, self.prompts, arrivals, c.slots, c.n_tokens, c.target.config, self.max_len, c.seed
        )

    def token_times(self, method: str):
        """When each new token of the first prompt arrives, "ar" or "sd" (generate.token_times)."""
        c = self.config
        kw = dict(drafter=c.drafter, draft_params=self.draft_params, max_len=self.max_len)
        return generate.token_times(
            method, c.draft, c.target, self.prompts[0], c.n_tokens, c.K, c.warp, c.seed, **kw
        )

    @property
    def timed(self) -> Prepared:
        """What the step and part timers run: the slots' fixed batch (the queue's first B prompts)
        for a refilled queue, else this configuration itself."""
        return (
            dataclasses.replace(self, prompts=self.prompts[: self.config.slots])
            if self.config.slots
            else self
        )

    def peer_generate(self, peer, method: str):
        """A peer's generation of the first prompt, "ar" or "sd", in its own process: (tokens, drafts
        accepted per round or None, seconds timed there); it returns once that process is idle."""
        c = self.config
        if method == "ar":
            return peer.autoregressive(self.prompts[0], c.n_tokens, c.warp, c.seed)
        return peer.speculative(self.prompts[0], c.n_tokens, c.K, c.warp, c.seed)

    @property
    def one(self):
        """The prompts as decoding takes them: one prompt, or the list of a batch."""
        return self.prompts[0] if len(self.prompts) == 1 else self.prompts
