"""Per-request latency, as serving benchmarks report it (vLLM's benchmark_serving, AIPerf): every
generation of every sequence is a request, with its time to first token (TTFT), its time per
output token after the first (TPOT), its end-to-end latency (E2E) and its speculative block, in
specbench's terms and in vLLM's (vllm_block).

What is measured and what is derived (docs/metrics.md, "Per request"):
  E2E   the generation's wall time, as the row's ar_times_s and sd_times_s hold it
  TTFT  the start's time (prefill and first token), sampled in the same repeat right after the
        generation (the time budget's ar_start and sd_start parts): the device loop gives no
        timestamp inside a generation without a sync that would slow it
  TPOT  (E2E - TTFT) / (N - 1), the mean gap between a request's later tokens

The sequences of a batch start and end together, so they share their repeat's times; their
speculative blocks are their own. The requests of a refilled queue (refill.py) start and end apart
inside one program, which syncs with the host only at its end; each is timed by the rounds it
spanned (refill.Served.spans: admitted after round b, done at round e), all of the queue waiting
from its start as a closed queue's requests do:
  unit    the repeat's wall time / the batched rounds the slots ran (a round's share, its
          refills' prefills spread over the rounds)
  queued  b x unit, the time before its prefill
  TTFT    queued + its prefill: the measured start (the first fill's), or a slot's share of it
  E2E     e x unit
A queue served as requests arrive at a rate (--request-rate: measure/serving.py) is timed one
request at a time on the host's clock instead (its queued, TTFT, TPOT, E2E and token gaps), and
an SLO (--slo ttft=1s,tpot=50ms) makes its goodput: the requests a second that met every bound
(`goodput`). NumPy only.
"""

from __future__ import annotations

import numpy as np

PERCENTILES = (50, 95, 99)
METRICS = ("ttft", "tpot", "e2e", "queued")  # queued: a refilled queue's requests only


def records(res, prompt_ids: list[str]) -> list[dict]:
    """One record per request: each repeat's generation of each sequence (prompt_ids[b] for
    sequence b), AR's and SD's times side by side, and the sequence's speculative block."""
    c, st = res.config, res.stats
    B, N = st.n_seqs if hasattr(st, "n_seqs") else res.batch, c.n_tokens
    queued = getattr(res, "queue", None)  # a refilled queue: its requests start and end apart
    starts = {m: res.part_samples.get(f"{m}_start") or [] for m in ("ar", "sd")}
    walls = {"ar": res.ar_times_s, "sd": res.sd_times_s}
    served = {"ar": getattr(res, "ar_stats", None), "sd": st}
    hists = st.accepted_hist_per_seq if B > 1 else np.asarray(st.accepted_hist)[None, :]
    served_open = getattr(res, "served", None)
    out = []
    for repeat in range(len(res.sd_times_s)):
        for b in range(B):
            record = {"repeat": repeat, "sequence": b, "prompt_id": prompt_ids[b]}
            for m in ("ar", "sd"):
                start = starts[m][repeat] if repeat < len(starts[m]) else None
                if served_open:  # timed one by one as they arrived (serving.Request.times)
                    record |= {f"{m}_{k}": v for k, v in getattr(served_open, m)[repeat][b]._asdict().items()}
                    continue
                if queued:
                    record |= queued_times(m, served[m], b, walls[m][repeat], start, N)
                    continue
                e2e = walls[m][repeat]
                ttft = min(start, e2e) if start is not None else None
                record |= {
                    f"{m}_ttft_s": ttft,
                    f"{m}_tpot_s": None if ttft is None else (e2e - ttft) / max(1, N - 1),
                    f"{m}_e2e_s": e2e,
                }
            arrivals = getattr(res, "token_times", None)
            if arrivals and B == 1:  # the gaps between the tokens' arrivals (generate.token_times)
                record |= {f"{m}_gaps_s": np.diff(arrivals[m][repeat]).tolist() for m in ("ar", "sd")}
            record |= speculative_block(np.asarray(hists[b]), c.K)
            record["speculative_decoding"] = vllm_block(np.asarray(hists[b]), c.K)
            out.append(record)
    return out


def queued_times(m: str, stats, request: int, wall: float, start: float | None, N: int) -> dict:
    """A refilled queue's request `request`, timed by the rounds it spanned (the module's note):
    {m}_queued_s, {m}_ttft_s, {m}_tpot_s, {m}_e2e_s; None where the run left no spans."""
    spans = getattr(stats, "request_spans", None)
    if spans is None or not stats.batch_rounds:
        return {f"{m}_{x}_s": None for x in ("queued", "ttft", "tpot", "e2e")}
    began, ended = (int(v) for v in spans[request])
    unit = wall / stats.batch_rounds
    prefill = 0.0 if start is None else (start if began == 0 else start / (stats.n_slots or 1))
    e2e = ended * unit
    ttft = min(began * unit + prefill, e2e)
    tpot = (e2e - ttft) / max(1, N - 1)
    return {f"{m}_queued_s": began * unit, f"{m}_ttft_s": ttft, f"{m}_tpot_s": tpot, f"{m}_e2e_s": e2e}


def speculative_block(hist: np.ndarray, K: int) -> dict:
    """A sequence's rounds from its accepted_hist [K+1], under AIPerf's names and definitions
    (aiperf `SpecDecode*Metric`, docs/metrics.md "Per request"): with j drafts accepted and l drafted
    over its rounds,

        rounds                 verification steps
        acceptance_length      (j + rounds) / rounds: tokens a round gave, the bonus or resampled
                               token counted (AIPerf's Acceptance Length, vLLM's mean_acceptance_length)
        draft_acceptance_rate  j / l, l = K a round (AIPerf's Draft Acceptance Rate, as a fraction)
        accepted_per_verified  (j + rounds) / (l + rounds): tokens emitted over tokens the target
                               verified, a round's bonus in both (AIPerf's Accepted per Verified)
        accepted_hist          entry i: the rounds that accepted exactly i drafts

    Rows written before 2026-11-29 held j / l under accepted_per_verified."""
    rounds = int(hist.sum())
    accepted = int(np.dot(np.arange(len(hist)), hist))
    drafted = K * rounds
    return {
        "rounds": rounds,
        "acceptance_length": (accepted + rounds) / rounds if rounds else None,
        "draft_acceptance_rate": accepted / drafted if drafted else None,
        "accepted_per_verified": (accepted + rounds) / (drafted + rounds) if rounds else None,
        "accepted_hist": hist.tolist(),
    }


def pooled_acceptance(recs: list[dict]) -> dict:
    """Over every request's rounds pooled (AIPerf's run-level figures, each round weighted alike):
    token_weighted_acceptance_length = 1 + sum j / sum rounds (AIPerf's Token-Weighted Acceptance
    Length) and overall_draft_acceptance_rate = sum j / sum l (its Overall Draft Acceptance Rate);
    None where no request ran a round."""
    blocks = [r["speculative_decoding"] for r in recs if r.get("speculative_decoding")]
    steps = sum(b["num_spec_steps"] for b in blocks)
    accepted = sum(b["num_accepted_draft_tokens"] for b in blocks)
    drafted = sum(b["num_draft_tokens"] for b in blocks)
    return {
        "token_weighted_acceptance_length": 1 + accepted / steps if steps else None,
        "overall_draft_acceptance_rate": accepted / drafted if drafted else None,
    }


def vllm_block(hist: np.ndarray, K: int) -> dict:
    """The same sequence's rounds as vLLM reports a request's speculation: the per-request
    `speculative_decoding` block of `--per-request-spec-decode-metrics` (vLLM PR #48915), with the
    definitions of vLLM's v1 spec-decode metrics (vllm/v1/spec_decode/metrics.py):

        num_spec_tokens            K, the drafts a step proposes (the speculative config's)
        num_spec_steps             verification steps (specbench's rounds)
        num_draft_tokens           drafts proposed: K a step
        num_accepted_draft_tokens  drafts accepted
        draft_acceptance_rate      num_accepted_draft_tokens / num_draft_tokens
        mean_acceptance_length     1 + num_accepted_draft_tokens / num_spec_steps (the bonus or
                                   resampled token counted: specbench's acceptance_length)
        acceptance_histogram       entry j: the steps that accepted exactly j drafts (j = 0..K)

    A sequence that ran no step has null rates, as vLLM leaves them unset."""
    steps = int(hist.sum())
    accepted = int(np.dot(np.arange(len(hist)), hist))
    drafted = K * steps
    return {
        "num_spec_tokens": K,
        "num_spec_steps": steps,
        "num_draft_tokens": drafted,
        "num_accepted_draft_tokens": accepted,
        "draft_acceptance_rate": accepted / drafted if drafted else None,
        "mean_acceptance_length": 1 + accepted / steps if steps else None,
        "acceptance_histogram": hist.tolist(),
    }


def percentiles(recs: list[dict]) -> dict:
    """p50, p95 and p99 of each metric over the requests, for AR and SD: ar_ttft_p50_s, ..."""
    out = {}
    for m in ("ar", "sd"):
        for metric in METRICS:
            values = np.asarray([r.get(f"{m}_{metric}_s") for r in recs], float)
            values = values[np.isfinite(values)]
            for p in PERCENTILES:
                out[f"{m}_{metric}_p{p}_s"] = float(np.percentile(values, p)) if values.size else None
        gaps = np.asarray([g for r in recs for g in r.get(f"{m}_gaps_s") or []], float)
        for p in PERCENTILES:  # inter-token latency: every gap of every request, pooled
            out[f"{m}_itl_p{p}_s"] = float(np.percentile(gaps, p)) if gaps.size else None
    return out


def goodput(recs: list[dict], slo: dict[str, float], served: dict) -> dict:
    """Served under arrivals, for AR and SD: the requests a second served ({m}_served_rps), those
    that met every bound of `slo` ({"ttft": s, "tpot": s, "e2e": s, "queued": s}) a second
    ({m}_goodput_rps, DistServe's goodput) and their share ({m}_slo_attainment), over the runs'
    seconds (`served`'s {m}_run_s: first arrival to last token, summed over the repeats; None: a
    closed queue's row, all None). Without an SLO every request counts."""
    out = {}
    for m in ("ar", "sd"):
        seconds = float(sum(getattr(served, f"{m}_run_s", None) or []))
        met = [all((r.get(f"{m}_{x}_s") or 0.0) <= bound for x, bound in slo.items()) for r in recs]
        share = float(np.mean(met)) if met and seconds else None
        out |= {
            f"{m}_served_rps": len(recs) / seconds if seconds else None,
            f"{m}_goodput_rps": sum(met) / seconds if seconds else None,
            f"{m}_slo_attainment": share,
        }
    return out


def parse_slo(text: str) -> dict[str, float]:
    """--slo "ttft=1s,tpot=50ms" -> {"ttft": 1.0, "tpot": 0.05}: bounds on METRICS, in s or ms;
    ValueError naming what is wrong."""
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, value = part.partition("=")
        name, value = name.strip().lower(), value.strip().lower()
        if name not in METRICS:
            raise ValueError(f"{name!r} is not one of {', '.join(METRICS)} (as ttft=1s,tpot=50ms)")
        if value and not value.endswith("s"):
            raise ValueError(
                f"{part!r}: give the unit, s or ms (as {name}=50ms; vLLM's --goodput reads a bare number "
                "as ms, so specbench reads none)"
            )
        scale = 1e-3 if value.endswith("ms") else 1.0
        try:
            bound = float(value.removesuffix("ms").removesuffix("s")) * scale
        except ValueError:
            raise ValueError(f"{part!r}: a time in s or ms, as {name}=50ms") from None
        if not 0 < bound < float("inf"):
            raise ValueError(f"{part!r}: a bound is a positive time")
        if name in out:
            raise ValueError(f"{name} is bounded twice")
        out[name] = bound
    if not out:
        raise ValueError("name at least one bound, as ttft=1s,tpot=50ms")
    return out


def slo_text(slo) -> str | None:
    """How a row writes an SLO's bounds ((metric, s) pairs): "ttft=1s,tpot=0.05s", or None."""
    return ",".join(f"{k}={v:g}s" for k, v in slo) or None


def pooled(rows: list[dict]) -> list[dict]:
    """Every request of the rows (results/requests.py), pooled: one configuration's over a suite."""
    return [r for row in rows for r in row.get("requests") or []]


def reading(rows: list[dict]) -> str:
    """Per request over the suite: SD's TPOT and TTFT against AR's, at p50 and p95."""
    recs = pooled(rows)
    if not recs:
        return "These rows hold no per-request records (written before specbench recorded them)."
    got = lambda m, x: [r[f"{m}_{x}_s"] for r in recs if r.get(f"{m}_{x}_s") is not None]
    ms = lambda m, x, p: float(np.percentile(got(m, x) or [float("nan")], p)) * 1e3
    tpot = {(m, p): ms(m, "tpot", p) for m in ("ar", "sd") for p in (50, 95)}
    ttft = {m: ms(m, "ttft", 50) for m in ("ar", "sd")}
    at_or_below = "at or below" if tpot["sd", 95] <= tpot["ar", 95] else "above"
    return (
        f"Over the suite's {len(recs)} requests, SD's time per output token was {tpot['sd', 50]:.2f} ms "
        f"at p50 against AR's {tpot['ar', 50]:.2f} ms, and {tpot['sd', 95]:.2f} against "
        f"{tpot['ar', 95]:.2f} ms at p95: {at_or_below} AR's. Its first token came at "
        f"{ttft['sd']:.2f} ms against {ttft['ar']:.2f} ms (p50): SD's start also prefills the draft. "
        "TTFT is the start sampled in the same repeat; TPOT is the rest of the wall time over N − 1 tokens."
    )
