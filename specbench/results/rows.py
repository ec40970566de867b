"""A measurement as a row: one flat dict in FIELDS' order (schema.py) from a benchmark result,
with the theory and the time budget computed from the same measurements; and a peer's row beside
it. No JAX here."""

from __future__ import annotations

import numpy as np

from specbench.prompts import prompt_hash
from specbench.results import repetition, requests, theory
from specbench.results.budget import (
    best_K_predicted,
    budget,
    budget_ar,
    budget_sd,
    closes,
    measured_over_accounted_err,
)
from specbench.results.schema import SETTINGS, as_row


def drafter_settings(drafter) -> dict:
    """The drafter's settings as row fields (drafters.Drafter, read by attribute)."""
    if drafter is None:
        return {
            "drafter": "model",
            "ngram": None,
            "draft_layers": None,
            "dynamic_K": False,
            "draft_confidence": None,
            "verify": "token",
            "drafts": 1,
            "acceptance": None,
            "draft_vocab": None,
            "tree_nodes": None,
            "eagle_format": None,
            "eagle_taps": None,
            "mtp_format": None,
            "mtp_layers": None,
        }
    return {
        "drafter": drafter.name,
        "draft_cost": drafter.kind.draft_cost.value,
        "ngram": drafter.ngram if "ngram" in drafter.spec.flags else None,
        "draft_layers": drafter.config.n_layer if "draft_layers" in drafter.spec.flags else None,
        "dynamic_K": drafter.confidence is not None,
        "draft_confidence": drafter.confidence,
        "verify": drafter.verify,
        "drafts": drafter.drafts,
        "acceptance": drafter.acceptance,
        "draft_vocab": drafter.vocab,
        "tree_nodes": drafter.tree.size if drafter.tree is not None else None,
        "eagle_format": drafter.head_format,
        "eagle_taps": ",".join(map(str, drafter.reads)) if isinstance(drafter.reads, tuple) else None,
        "mtp_format": drafter.mtp[0].name if drafter.mtp else None,
        "mtp_layers": drafter.mtp[1] if drafter.mtp else None,
    }


def summarize(times: list[float]) -> dict[str, float]:
    """mean, σ (0 for one value), min, max and median of per-repeat seconds."""
    t = np.asarray(times)
    return {
        "mean_s": float(t.mean()),
        "std_s": float(t.std(ddof=1)) if len(t) > 1 else 0.0,
        "min_s": float(t.min()),
        "max_s": float(t.max()),
        "median_s": float(np.median(t)),
    }


def result_row(
    res,
    *,
    draft: str,
    dtype: str,
    prompt_id: str,
    prompt: str | list[str],
    category: str | None = None,
    context: dict,
    decode=None,
    batch_prompt_ids: list[str] | None = None,
) -> dict:
    """One flat row, in FIELDS' order: the context, the measurements, and the theory from the same
    measurements. `res` is a bench.BenchmarkResult.

    For a batch (res.batch = B > 1) `prompt` is the list of the B prompts, and the JSON-only
    prompt, token id and text fields are lists with one entry per sequence; tokens/s count all
    B x N tokens, and every step time is the batch's.
    """
    c, st = res.config, res.stats
    ar, sd = summarize(res.ar_times_s), summarize(res.sd_times_s)
    values = {
        **context,
        "implementation_version": context.get("specbench_version"),
        **_settings(res, draft, dtype),
        "prompt_id": prompt_id,
        "prompt_sha": prompt_hash(prompt if isinstance(prompt, str) else "\n".join(prompt)),
        "category": category,
        **_times(res, ar, sd),
        **_acceptance(st, c.K),
        **_account(res, ar, sd),
        "compile_s": res.compile_s,
        "programs_cached": res.n_cached,
        "other_load": res.load.get("other_load"),
        "under_load": res.load.get("under_load"),
        **{k: v for k, v in res.load.items() if k.startswith("card_")},  # a GPU's clocks (measure/card.py)
        "identical": (res.ar_tokens == res.sd_tokens) if c.warp.temperature == 0 else None,
        "prompt": prompt,
        "ar_token_ids": res.ar_tokens,
        "sd_token_ids": res.sd_tokens,
    }
    recs = requests.records(res, batch_prompt_ids or [prompt_id])
    values |= requests.percentiles(recs) | requests.pooled_acceptance(recs) | {"requests": recs}
    served = getattr(res, "served", None)
    values |= {"request_rate": res.config.request_rate, "slo": requests.slo_text(res.config.slo)}
    values |= requests.goodput(recs, dict(res.config.slo), served)
    values["budget_closed"] = closes(values)
    # one sequence's tokens, or a batch's or a refilled queue's (a queue on one slot too): a list each
    many = bool(res.sd_tokens) and isinstance(res.sd_tokens[0], list)
    values |= repetition.describe(
        res.sd_tokens if many else [res.sd_tokens]
    )  # the text SD's α was measured on
    if many:
        values["batch_prompt_ids"] = batch_prompt_ids
        values["batch_prompts"] = len(set(batch_prompt_ids or []))
        values["accepted_hist_per_seq"] = st.accepted_hist_per_seq.tolist()
    if decode is not None:
        text = (lambda seqs: [decode(ids) for ids in seqs]) if many else decode
        values["ar_text"], values["sd_text"] = text(res.ar_tokens), text(res.sd_tokens)
    return as_row(values)


def _settings(res, draft: str, dtype: str) -> dict:
    """What was run: the implementation's choices, the pair, the drafter and the decode settings."""
    c = res.config
    return {
        "implementation": "specbench",
        "dtype": dtype,
        "target_weights": res.target_weights,
        "draft_weights": res.draft_weights,
        "kernels": res.kernels,
        "pallas_backend": getattr(res, "pallas_backend", None),
        "verdict": res.verdict,
        "sampler": res.sampler,
        "xla_loops": res.xla_loops,
        "architecture": res.architecture,
        "mesh": res.mesh,
        "devices": res.devices,
        "draft_device": res.draft_device,
        "draft": draft,
        "target": c.target.name,
        **drafter_settings(c.drafter),
        "K": c.K,
        "draft_pass_rows": c.drafter.kind.pass_rows(c.K) if c.drafter.kind.pass_rows else None,
        "temperature": c.warp.temperature,
        "top_k": c.warp.top_k,
        "top_p": c.warp.top_p,
        "seed": c.seed,
        "n_tokens": c.n_tokens,
        "repeats": c.repeats,
        "warmup": c.warmup,
        "loop": "device" if c.device_loop else "host",
        "batch": res.batch,
        "queue": getattr(res, "queue", None),
    }


def _times(res, ar: dict, sd: dict) -> dict:
    """The wall times of AR and SD, their rates and the speedup, repeat by repeat."""
    speedups = np.asarray(res.ar_times_s) / np.asarray(res.sd_times_s)
    tokens = (getattr(res, "queue", None) or res.batch) * res.config.n_tokens
    return {
        **{f"ar_{k}": v for k, v in ar.items()},
        **{f"sd_{k}": v for k, v in sd.items()},
        "ar_tokens_per_s": tokens / ar["mean_s"],
        "sd_tokens_per_s": tokens / sd["mean_s"],
        "speedup": float(speedups.mean()),
        "speedup_std": float(speedups.std(ddof=1)) if len(speedups) > 1 else 0.0,
        "ar_times_s": res.ar_times_s,
        "sd_times_s": res.sd_times_s,
    }


def _acceptance(st, K: int) -> dict:
    """What the rounds accepted (stats.DecodeStats), and what α predicts of them."""
    drafted = st.drafted_hist
    return {
        "n_rounds": st.n_rounds,
        "tokens_per_round": st.tokens_per_round,
        "r": st.r,
        "alpha": st.alpha,
        "batch_rounds": st.rounds_run,
        "tokens_per_batch_round": st.tokens_per_batch_round,
        "idle_fraction": st.idle_fraction,
        "accept_rate_drafted": st.accept_rate_drafted,
        "tokens_per_round_iid": theory.expected_tokens(st.alpha, K) if st.alpha == st.alpha else None,
        "tokens_per_round_positional": theory.expected_tokens_positional(st.per_position),
        "accepted_hist": st.accepted_hist.tolist(),
        "per_position_acceptance": st.per_position,
        "drafted_hist": drafted.tolist() if drafted is not None else None,
        "mean_drafted": float(np.dot(np.arange(K + 1), drafted) / max(1, st.n_rounds))
        if drafted is not None
        else float(K),
    }


def _account(res, ar: dict, sd: dict) -> dict:
    """The step times, the theory from them, and the time budget: what the parts explain."""
    c, st = res.config, res.stats
    K = c.K
    speedup = float(np.mean(np.asarray(res.ar_times_s) / np.asarray(res.sd_times_s)))
    seed_theory = theory.speedup_from_r(st.r, K, res.t_draft_s, res.t_target_s)
    # a batch waits for its slowest sequence: what it yields per round it runs (one sequence: tokens/round)
    refined = theory.refined_speedup(
        st.tokens_per_batch_round, K, res.t_draft_s, res.t_target_s, res.t_verify_s
    )
    return {
        "t_draft_s": res.t_draft_s,
        "t_target_s": res.t_target_s,
        "t_verify_s": res.t_verify_s,
        "t_comm_target_s": res.t_comm_target_s,
        "t_comm_verify_s": res.t_comm_verify_s,
        "t_round_s": res.t_round_s,
        "t_overhead_s": res.t_round_s - K * res.t_draft_s - res.t_verify_s,
        "t_overhead_err_s": res.t_overhead_err_s,
        "t_ar_token_s": res.t_ar_token_s,
        "theory_speedup": seed_theory,
        "refined_speedup": refined,
        # stragglers hold a batch back: the rounds it runs, not each sequence's own, cost time
        "round_model_speedup": st.tokens_per_batch_round * res.t_ar_token_s / res.t_round_s,
        "measured_over_theory": speedup / seed_theory,
        "measured_over_refined": speedup / refined,
        **budget(res, ar["median_s"], sd["median_s"]),
        # medians on both sides, as the residuals have them: one slow repeat moves neither
        "measured_over_accounted": (ar["median_s"] / sd["median_s"]) / (budget_ar(res) / budget_sd(res)),
        "measured_over_accounted_err": measured_over_accounted_err(res),
        "best_K_predicted": best_K_predicted(res, st.alpha),
    }


def peer_row(row: dict, peer, decode=None, difference: str | None = None) -> dict:
    """A peer's row (peers.PeerResult) beside specbench's `row` of the same run: the same context
    and settings, the peer's own times, tokens and (where it tells) acceptance, and its times over
    specbench's on the same method. `difference`: where its T = 0 tokens leave specbench's."""
    ar, sd = summarize(peer.ar_times_s), summarize(peer.sd_times_s)
    speedups = np.asarray(peer.ar_times_s) / np.asarray(peer.sd_times_s)
    N, greedy = row["n_tokens"], row["temperature"] == 0
    values = {
        **{k: row[k] for k in SETTINGS if k in row},
        "implementation": peer.name,
        "implementation_version": peer.version,
        **{f"ar_{k}": v for k, v in ar.items()},
        **{f"sd_{k}": v for k, v in sd.items()},
        "ar_tokens_per_s": N / ar["mean_s"],
        "sd_tokens_per_s": N / sd["mean_s"],
        "speedup": float(speedups.mean()),
        "speedup_std": float(speedups.std(ddof=1)) if len(speedups) > 1 else 0.0,
        "ar_over_specbench": ar["mean_s"] / row["ar_mean_s"],
        "sd_over_specbench": sd["mean_s"] / row["sd_mean_s"],
        "identical": peer.ar_tokens == peer.sd_tokens if greedy else None,
        "same_as_specbench": peer.ar_tokens == peer.sd_tokens == row["ar_token_ids"] if greedy else None,
        "first_difference": difference,
        "other_load": row.get("other_load"),  # measured in the same window as specbench's row
        "under_load": row.get("under_load"),
        "prompt": row["prompt"],
        "ar_times_s": peer.ar_times_s,
        "sd_times_s": peer.sd_times_s,
        "ar_token_ids": peer.ar_tokens,
        "sd_token_ids": peer.sd_tokens,
    }
    if peer.accepted:  # the drafts each round kept: tested ones are those kept plus one rejection
        K, kept = row["K"], np.asarray(peer.accepted)
        values |= {
            "n_rounds": len(kept),
            "tokens_per_round": float((kept + 1).mean()),
            "alpha": float(kept.sum() / np.minimum(kept + 1, K).sum()),
        }
    if decode is not None:
        values["ar_text"], values["sd_text"] = decode(peer.ar_tokens), decode(peer.sd_tokens)
    return as_row(values)
