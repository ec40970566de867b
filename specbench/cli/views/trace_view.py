"""What `trace` prints: one generation, round by round, in colour (or marked in the text)."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text


def trace_text(plan, tokens, st, decode, console: Console) -> None:
    """The generation round by round: accepted drafts, the rejected draft (struck through), and the
    resampled or bonus token; without colour (a pipe, a file) the roles are marked in the text. An
    encoder-decoder's prompt is its source, shown on a line of its own above what the decoder wrote
    (the seed's example: a source sentence, then the rounds)."""
    from specbench.model.nets.families import family_of

    piece = lambda i: decode([i])
    plain = not console.is_terminal or console.no_color
    marks = {"rejected": "[-{}-]", "resampled": "[+{}]", "bonus": "[*{}]"}
    mark = (lambda role, t: marks[role].format(t) if role in marks else t) if plain else (lambda role, t: t)
    style = {
        "accepted": "green",
        "rejected": "red strike",
        "resampled": "bold yellow",
        "bonus": "bold cyan",
        "first": "magenta",
        "round": "dim blue",
    }
    source = family_of(plan.target.config).encoder_decoder
    out = Text("output: ", style="bold") if source else Text(plan.prompt, style="dim")
    out.append(piece(tokens[0]), style=style["first"])  # the prefill's draw from the target (T5: its first)
    left = plan.n_tokens - 1
    for rnd in st.rounds:
        if left <= 0:
            break
        out.append("│", style=style["round"])
        a = rnd["n_accepted"]
        for x in rnd["drafts"][: min(a, left)]:
            out.append(piece(x), style=style["accepted"])
        left -= a
        if left > 0:  # the round's last token, still within N
            if a < rnd["n_drafted"]:  # a draft was tested and rejected
                out.append(mark("rejected", piece(rnd["drafts"][a])), style=style["rejected"])
            role = "resampled" if a < rnd["n_drafted"] else "bonus"  # bonus: every proposed draft accepted
            out.append(mark(role, piece(rnd["emitted"])), style=style[role])
            left -= 1
    legend = [
        ("accepted draft", "accepted"),
        (mark("rejected", "rejected draft"), "rejected"),
        (mark("resampled", "resampled"), "resampled"),
        (mark("bonus", "bonus"), "bonus"),
        ("first token (prefill)", "first"),
        ("│ round", "round"),
    ]
    console.print(
        Text.assemble(("legend: ", "dim"), *[p for text, role in legend for p in ((text, style[role]), "  ")])
    )
    if source:
        console.print(Text.assemble(("source: ", "bold"), (plan.prompt, "dim")))
    console.print(out)
    console.print(
        f"{st.n_rounds} rounds · {st.n_generated} tokens · tokens/round {st.tokens_per_round:.2f} · "
        f"r {st.r:.3f} · α {st.alpha:.3f} · "
        f"rounds accepting 0..{plan.K} drafts {st.accepted_hist.tolist()} · "
        f"draft {plan.draft_name} · target {plan.target.name} · K={plan.K} · T={plan.warp.temperature:g}"
    )
