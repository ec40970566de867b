"""What a report's numbers say, in plain words: one short reading per section, generated from
the rows (no JAX). Each reading states what was measured and compares it with what the theory
predicted from the same run's parts."""

from __future__ import annotations

import numpy as np

from specbench import prompts
from specbench.results import repetition, theory


def x(value: float) -> str:
    return f"{value:.2f}×"


def paid(rows: list[dict], things: str) -> str:
    """'every one of the 6 prompt categories' / 'none of …' / '5 of the 6 …': where speculation paid."""
    n = sum(r["speedup"] > 1 for r in rows)
    share = "every one" if n == len(rows) else "none" if n == 0 else f"{n}"
    return f"{share} of the {len(rows)} {things}"


def categories(rows: list[dict]) -> str:
    best, worst = max(rows, key=lambda r: r["speedup"]), min(rows, key=lambda r: r["speedup"])
    ratio = [r["measured_over_accounted"] for r in rows if r.get("measured_over_accounted")]
    spread = f" Measured ÷ accounted ranged {min(ratio):.2f}–{max(ratio):.2f}." if ratio else ""
    looping = [r["prompt_id"] for r in rows if (r.get("repetition") or 0) >= repetition.HIGH]
    loops = (
        f" On {', '.join(looping)} the text SD wrote repeats itself (half its tokens or more repeat a "
        f"{repetition.N}-gram): a draft that has learnt the loop predicts it, so α there overstates "
        "what it buys on varied text."
        if looping
        else ""
    )
    return (
        f"Speculation paid on {paid(rows, 'prompts')}. The most on "
        f"{best['prompt_id']} ({x(best['speedup'])}, α {best['alpha']:.2f}), the least on "
        f"{worst['prompt_id']} ({x(worst['speedup'])}, α {worst['alpha']:.2f}): the speedup follows "
        f"how often the draft agrees with the target.{loops}{spread}"
    )


def by_category(rows: list[dict]) -> list[dict]:
    """The prompt suite's rows by category, in the manner of Spec-Bench's per-category table:
    prompts, mean, lowest and highest speedup, mean α and mean repeated share; all of them last."""

    def summary(name: str, group: list[dict]) -> dict:
        s = [r["speedup"] for r in group]
        mean = lambda f: float(np.mean([r[f] for r in group if r.get(f) is not None] or [np.nan]))
        return {
            "category": name,
            "prompts": len(group),
            "speedup": float(np.mean(s)),
            "lowest": min(s),
            "highest": max(s),
            "alpha": mean("alpha"),
            "repetition": mean("repetition"),
        }

    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(r.get("category") or prompts.BUILTIN.category(r["prompt_id"]), []).append(r)
    return [summary(c, g) for c, g in groups.items()] + [summary("all", rows)]


def suite(rows: list[dict]) -> str:
    """The report's headline: the speedup over the prompt suite, its mean and range, and the
    categories at either end; never one prompt's figure alone."""
    table = by_category(rows)
    everything, cats = table[-1], sorted(table[:-1], key=lambda c: c["speedup"])
    r0 = rows[0]
    setting = f"K = {r0['K']}, T = {r0['temperature']:g}"
    mean = everything["speedup"]
    ran = f"{x(mean)} faster than" if mean >= 1 else f"slower than ({x(mean)} the speed of)"
    text = (
        f"Over {everything['prompts']} prompts ({setting}), speculative decoding ran {ran} "
        f"autoregressive on average, from {x(everything['lowest'])} to {x(everything['highest'])}"
    )
    if len(cats) > 1:
        text += (
            f"; by category from {x(cats[0]['speedup'])} ({cats[0]['category']}) to "
            f"{x(cats[-1]['speedup'])} ({cats[-1]['category']})"
        )
    return text + "."


def category_table(rows: list[dict]) -> dict:
    """by_category as a page table."""
    pct = lambda v: "" if v != v else f"{v:.0%}"  # NaN: no row had the field
    return {
        "caption": "By category (Spec-Bench's layout): the speedup's mean and range over its prompts",
        "headers": ["category", "prompts", "mean speedup", "lowest", "highest", "mean α", "repeated"],
        "rows": [
            [c["category"], str(c["prompts"]), x(c["speedup"]), x(c["lowest"]), x(c["highest"])]
            + [f"{c['alpha']:.3f}", pct(c["repetition"])]
            for c in by_category(rows)
        ],
    }


def histogram_table(rows: list[dict]) -> dict:
    """Each prompt's distribution of accepted drafts per round (its accepted_hist as shares of its
    rounds): how often a round kept 0, 1, ..., K drafts, as vLLM and gpt-fast show it."""
    K = max(len(r.get("accepted_hist") or []) for r in rows) - 1
    out = []
    for r in rows:
        hist = np.asarray(r.get("accepted_hist") or [], dtype=float)
        if hist.sum() > 0:
            shares = [f"{v:.0%}" for v in hist / hist.sum()] + [""] * (K + 1 - len(hist))
            out.append([r["prompt_id"], str(int(hist.sum())), *shares])
    return {
        "caption": "Accepted drafts per round: the share of each prompt's rounds that kept 0, 1, …, K drafts",
        "headers": ["prompt", "rounds", *[f"{k} kept" for k in range(K + 1)]],
        "rows": out,
    }


def K_sweep(rows: list[dict]) -> str:
    rows = sorted(rows, key=lambda r: r["K"])
    best = max(rows, key=lambda r: r["speedup"])
    Ks = [r["K"] for r in rows]
    predicted = sorted({r["best_K_predicted"] for r in rows if r.get("best_K_predicted")})
    agree = (
        "as the parts predicted"
        if predicted and best["K"] in predicted
        else f"the parts predicted K = {', '.join(map(str, predicted))}"
        if predicted
        else "no prediction was possible"
    )
    n = sum(r["speedup"] > 1 for r in rows)
    where = "every K" if n == len(rows) else f"{n} of the {len(rows)} K tried,"
    return (
        f"Speculation paid at {where} from {Ks[0]} to {Ks[-1]}; the best was K = {best['K']} "
        f"({x(best['speedup'])}), {agree}."
    )


def temperature(rows: list[dict]) -> str:
    def name(r):
        return f"T = {r['temperature']:g}" + (f", top-p {r['top_p']:g}" if r.get("top_p") else "")

    parts = [f"{name(r)}: {x(r['speedup'])} (α {r['alpha']:.2f})" for r in rows]
    greedy = [r for r in rows if r["temperature"] == 0]
    sampled = [r for r in rows if r["temperature"] > 0]
    tail = ""
    if greedy and sampled:
        g, s = greedy[0], min(sampled, key=lambda r: r["alpha"])
        verb = "lowered" if s["alpha"] < g["alpha"] else "raised"
        tail = (
            f" Sampling {verb} α from {g['alpha']:.2f} to {s['alpha']:.2f}: a sampled draft token "
            "is accepted with probability min(1, q/p), not only when it is the target's argmax."
        )
    return "; ".join(parts) + "." + tail


def drafters(rows: list[dict]) -> str:
    ranked = sorted(rows, key=lambda r: -r["speedup"])
    label = lambda r: r["drafter"] + (" (dynamic K)" if r.get("dynamic_K") else "")
    parts = [f"{label(r)} {x(r['speedup'])}" for r in ranked]
    return f"On the same prompt, fastest first: {', '.join(parts)}."


def method_label(row: dict) -> str:
    """'token', 'block' or 'token × 2 drafts': how a row's rounds were drafted and judged."""
    drafts = row.get("drafts") or 1
    return row.get("verify", "token") + (f" × {drafts} drafts" if drafts > 1 else "")


def verification(rows: list[dict]) -> str:
    """Token against block, and k drafts, on the same prompt at T = 1."""
    label = method_label
    parts = [
        f"{label(r)} {x(r['speedup'])} ({r['tokens_per_round']:.2f} tokens/round, verify "
        f"{r['t_verify_s'] * 1e3:.2f} ms)"
        for r in rows
    ]
    return (
        "Same prompt, seed and pair: " + ", ".join(parts) + ". Block verification accepts at least as many "
        "tokens per round in expectation as token by token at the same cost; k drafts raise the tokens "
        "per round and pay for k draft sequences and a verify of k (K + 1) tokens; gbv also ranks the "
        "draft's tokens by q/p at every depth, a sort that is slow on a CPU. One generation's "
        "tokens per round varies with its random stream: compare over several prompts before concluding."
    )


def tree_label(row: dict) -> str:
    """'tiny-draft chain', 'tiny-draft tree 2,2,1' or '... (traversal)': a trees row's shape."""
    name = row["draft"] if row.get("tree_nodes") else f"{row['draft']} chain"
    return name + (" (traversal)" if row.get("verify") == "traversal" else "")


def trees(rows: list[dict]) -> str:
    """Each drafter's tree against its chain of the same depth: tokens per round bought, and what
    the larger verify step costs."""
    parts = [
        f"{tree_label(r)} {x(r['speedup'])} ({r['tokens_per_round']:.2f} tokens/round, verify "
        f"{r['t_verify_s'] * 1e3:.2f} ms)"
        for r in rows
    ]
    traversal = any(r.get("verify") == "traversal" for r in rows)
    return (
        "Same prompt, seed and depth: " + ", ".join(parts) + ". A tree offers several candidates per "
        "position, so in expectation it accepts at least as many tokens per round as a chain of its "
        "depth; it pays for a verify step over all its nodes and a drafting step per level over the "
        "tree so far. "
        + (
            "Traversal verification judges the same tree from its leaves and keeps paths a walk from "
            "the root drops. "
            if traversal
            else ""
        )
        + "One generation's tokens per round varies with its random stream: docs/drafters.md compares "
        "them over the prompt suite."
    )


def dial(rows: list[dict]) -> str:
    """Measured speedup against the dial's acceptance, beside Leviathan's curve at c = 0."""
    rows = sorted(rows, key=lambda r: r["acceptance"])
    ratio = float(np.median([r["t_target_s"] / r["t_verify_s"] for r in rows]))
    worst = max(abs(r["alpha"] - r["acceptance"]) for r in rows)
    a1 = rows[-1]
    return (
        f"The dial sets α exactly (measured within {worst:.3f} of a at every setting), drafts for free "
        f"and verifies for real, so the curve isolates the verify step: at a = {a1['acceptance']:g} the "
        f"speedup is {x(a1['speedup'])}, against {theory.expected_tokens(a1['acceptance'], a1['K']):.2f} "
        f"tokens per round. The line is Leviathan et al.'s speedup at c = 0 with this run's verify cost, "
        f"E[tokens](α, K) × t_target / t_verify (t_target / t_verify = {ratio:.2f}); the gap beneath it "
        "is the round's other work (accept/reject, bookkeeping)."
    )


def batch(rows: list[dict]) -> str:
    """Speedup and throughput against batch size, for distinct prompts and for one prompt
    repeated where both were measured, and whether idle slots explain where speculation stops."""
    texts, ends = [], {}
    for key, c in theory.batch_curves(rows).items():
        mix = key[-1]
        Bs, s = c["batch"], c["speedup"]
        b = theory.crossover(Bs, s)
        where = (
            f"it crosses 1 near B ≈ {b:.1f}"
            if b is not None
            else f"it stays above 1 up to B = {Bs[-1]}"
            if s[-1] >= 1
            else f"it is below 1 from B = {Bs[0]} on"
        )
        name = {
            None: "",
            "mixed": "With distinct prompts, t",
            "repeated": "With one prompt repeated, t",
            "refilled": "With the slots refilled from a queue, t",
        }[mix]
        throughput = c["sd_tokens_per_s"][-1] / c["sd_tokens_per_s"][0]
        texts.append(
            f"{name or 'T'}he speedup goes from {x(s[0])} at B = {Bs[0]} to {x(s[-1])} at B = {Bs[-1]}; "
            f"{where}; SD's throughput grew {x(throughput)}, and {c['idle_fraction'][-1]:.0%} of the "
            f"largest batch's slot-rounds were idle."
        )
        # where it stops paying: its crossing; past the last B where it never crosses; 0 if never paid
        ends[mix] = (b if b is not None else Bs[-1] + 1 if s[-1] >= 1 else 0, c["idle_fraction"][-1])
    if "mixed" in ends and "refilled" in ends:
        largest = max(r.get("batch", 1) for r in rows)
        stop = lambda b: f"beyond B = {largest}" if b > largest else f"B ≈ {b:.1f}" if b else "B = 1"
        fixed, refilled = stop(ends["mixed"][0]), stop(ends["refilled"][0])
        texts.append(
            "Refilling finished slots from a queue (as servers do) moves where speculation stops paying "
            f"from {fixed} in fixed batches to {refilled}: a fixed batch idles while its slowest "
            "sequence finishes."
        )
    if "mixed" in ends and "repeated" in ends:
        (b_mixed, idle_mixed), (b_same, idle_same) = ends["mixed"], ends["repeated"]
        texts.append(
            "One prompt repeated is an upper bound: every sequence accepts the same drafts in the same "
            "rounds, so none waits for another."
        )
        if b_mixed < b_same and idle_mixed > idle_same:
            texts.append(
                "Distinct prompts stop paying sooner than one prompt repeated, and leave "
                f"{idle_mixed:.0%} of slot-rounds idle against {idle_same:.0%}: sequences that finish "
                "early wait for the slowest, so idle slots decide the crossover here."
            )
    return " ".join(texts) + (
        " Beyond a crossover, verifying K + 1 tokens for every sequence costs more than the accepted "
        "drafts save."
        if any(" crosses 1" in t for t in texts)
        else ""
    )


def roofline(rows: list[dict], K: int) -> str:
    out = []
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = {r["n_tokens_per_step"]: r for r in rows if r["model"] == model}
        one, verify = mine[1], mine.get(K + 1)
        text = (
            f"{model}: a 1-token step takes {one['t_step_s'] * 1e3:.2f} ms, "
            f"{one['fraction_of_bound']:.0%} of the memory roof ({one['bound_gbps']:.0f} GB/s, "
            f"{one['bound_source']})"
        )
        if verify:
            text += f"; verifying {K + 1} tokens costs {verify['t_over_t1']:.2f}x a 1-token step"
            if verify.get("t_over_limit") is not None:
                compute = f"{verify['compute_s'] * 1e3:.2f} ms at {verify['matmul_gflops']:.0f} GFLOP/s"
                text += (
                    f", {verify['t_over_limit']:.2f}x its limit (the {verify['limited_by']} roof; "
                    f"the compute roof is {compute})"
                )
        out.append(text)
    return ". ".join(out) + "."


def exactness(rows: list[dict], selftest: dict | None) -> str:
    greedy = [r for r in rows if r["temperature"] == 0 and r.get("identical") is not None]
    same = sum(bool(r["identical"]) for r in greedy)
    text = f"At T = 0, {same} of {len(greedy)} rows gave the same tokens from AR and SD" + (
        " (all of them)." if same == len(greedy) else ": SPECULATIVE DECODING CHANGED THE OUTPUT."
    )
    peers = [r for r in greedy if r.get("same_as_specbench") is not None]
    if peers:
        agree = sum(bool(r["same_as_specbench"]) for r in peers)
        text += f" Peers gave specbench's tokens in {agree} of {len(peers)} rows."
    if selftest:
        verdict = (
            "the sampler passed and the broken control failed, as it must"
            if selftest["passed"]
            else "THE TEST DID NOT SEPARATE THE SAMPLER FROM THE BROKEN CONTROL"
        )
        text += (
            f" Self-test at T = 1 ({selftest['n_samples']} samples, K = {selftest['K']}): p = "
            f"{selftest['p_value']:.3g} for specbench's sampler, {selftest['p_value_broken']:.3g} for the "
            f"broken one (threshold {selftest['threshold']:g}): {verdict}."
        )
    return text
