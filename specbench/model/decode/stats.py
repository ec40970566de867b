"""What one generation did: counts of rounds, drafts and acceptances, and the metrics built from
them (tokens per round, r, alpha). NumPy only: the device's RoundCounts (decoding.py) arrive here
as host arrays.

Speculative sampling's metrics: Chen et al. (2023, arXiv:2302.01318) for r, Leviathan et al.
(2023, arXiv:2211.17192) for alpha.
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass
class DecodeStats:
    """Counts from one generation, summed over its n_seqs sequences. AR is the case K = 0."""

    K: int
    n_generated: int  # new tokens returned, all sequences together (exactly N each)
    n_rounds: int  # speculative rounds (the first token comes from the prefill, not a round)
    accepted_hist: np.ndarray  # [K+1]: rounds in which 0, 1, ..., K drafts were accepted
    evaluated: np.ndarray  # [K]: rounds in which draft position i was tested
    accepted: np.ndarray  # [K]: rounds in which draft position i was accepted
    rounds: list[dict] | None = None  # per round (host loop with record=True): drafts, n_accepted, emitted
    drafted_hist: np.ndarray | None = None  # [K+1]: rounds in which 0, 1, ..., K drafts were proposed
    n_seqs: int = 1
    batch_rounds: int | None = None  # rounds the batch ran: its slowest sequence's (one sequence: n_rounds)
    idle_slots: int = 0  # (sequence, round) slots in which a finished sequence waited for the others
    accepted_hist_per_seq: np.ndarray | None = None  # [B, K+1]: accepted_hist of each sequence of a batch
    n_slots: int | None = None  # slots a refilled queue ran on (refill.py); None: one slot a sequence
    starts: float = 1.0  # batched starts' worth: a refilled queue's requests / its slots
    request_spans: np.ndarray | None = None  # [Q, 2]: a refilled request's first and last batched round

    @classmethod
    def autoregressive(cls, n_tokens: int, n_seqs: int = 1) -> DecodeStats:
        """AR: one token per target step after the prefill, for each of n_seqs sequences."""
        none = np.zeros(0, np.int64)
        steps = n_tokens - 1
        return cls(
            K=0,
            n_generated=n_seqs * n_tokens,
            n_rounds=n_seqs * steps,
            accepted_hist=np.array([n_seqs * steps]),
            evaluated=none,
            accepted=none,
            n_seqs=n_seqs,
            batch_rounds=steps if n_seqs > 1 else None,
        )

    @classmethod
    def from_counts(cls, K: int, n_tokens: int, counts, rounds: list[dict] | None = None) -> DecodeStats:
        """From decoding.RoundCounts (host arrays) of one sequence, or of a batch ([B] leading)."""
        per_seq = np.atleast_1d(np.asarray(counts.rounds))
        B = len(per_seq)
        total = lambda x: np.asarray(x).reshape(B, -1).sum(axis=0)
        return cls(
            K=K,
            n_generated=B * n_tokens,
            n_rounds=int(per_seq.sum()),
            accepted_hist=total(counts.accepted_hist),
            evaluated=total(counts.evaluated),
            accepted=total(counts.accepted),
            rounds=rounds,
            drafted_hist=total(counts.drafted_hist),
            n_seqs=B,
            batch_rounds=int(per_seq.max()) if B > 1 else None,
            idle_slots=int(B * per_seq.max() - per_seq.sum()),
            accepted_hist_per_seq=np.asarray(counts.accepted_hist).reshape(B, -1) if B > 1 else None,
        )

    @property
    def tokens_per_round(self) -> float:
        """New tokens per target forward after the prefill, the resampled/bonus token included; AR: 1."""
        return (self.n_generated - self.n_seqs) / self.n_rounds if self.n_rounds else 1.0

    @property
    def rounds_run(self) -> int:
        """Rounds the decoding ran: a batch's batch_rounds, one sequence's n_rounds."""
        return self.n_rounds if self.batch_rounds is None else self.batch_rounds

    @property
    def tokens_per_batch_round(self) -> float:
        """New tokens per sequence per round the batch ran: tokens_per_round less what stragglers
        cost, since the batch runs until its slowest sequence is done."""
        slots = (self.n_slots or self.n_seqs) * self.rounds_run
        return (self.n_generated - self.n_seqs) / slots if slots else 1.0

    @property
    def idle_fraction(self) -> float:
        """idle_slots / (slots x rounds the batch ran): the share of batch slots wasted."""
        slots = (self.n_slots or self.n_seqs) * self.rounds_run
        return self.idle_slots / slots if slots else 0.0

    @property
    def r(self) -> float:
        """tokens_per_round / (K+1): the r of Chen et al. (2023), section 3."""
        return self.tokens_per_round / (self.K + 1)

    @property
    def alpha(self) -> float:
        """accepted / (accepted + rejections): MLE of Leviathan et al.'s per-token acceptance rate."""
        n_acc, n_eval = int(self.accepted.sum()), int(self.evaluated.sum())
        return n_acc / n_eval if n_eval else float("nan")

    @property
    def accept_rate_drafted(self) -> float:
        """accepted / (K * rounds): the "acceptance rate" of vLLM and llama.cpp, for comparison."""
        return (
            int(self.accepted.sum()) / (self.K * self.n_rounds) if self.K and self.n_rounds else float("nan")
        )

    @property
    def per_position(self) -> list[float]:
        """Acceptance of draft position i given that it was tested."""
        return [a / e if e else float("nan") for a, e in zip(self.accepted.tolist(), self.evaluated.tolist())]
