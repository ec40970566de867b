"""How much a generated text repeats itself, and whether it ends in a loop. A draft that has
learnt a loop predicts it perfectly, so α measured on looping text overstates what the draft buys
on varied text; every row carries these figures so that a headline can say so. No JAX here."""

from __future__ import annotations

N = 4  # the n-gram that counts as repeated: the length prompt lookup matches on, plus one
HIGH = 0.5  # a text with this share or more of repeated tokens is called repetitive


def repeated_share(tokens: list[int], n: int = N) -> float:
    """The share of tokens that complete an n-gram the text already holds: token i counts when
    tokens[i-n+1 .. i] occurred before, starting at an earlier position. 0 for a text shorter
    than n + 1, 1 (less the first n) for a text that loops from its start."""
    if len(tokens) <= n:
        return 0.0
    seen, repeated = set(), 0
    for i in range(n - 1, len(tokens)):
        gram = tuple(tokens[i - n + 1 : i + 1])
        repeated += gram in seen
        seen.add(gram)
    return repeated / len(tokens)


def tail_cycle(tokens: list[int]) -> tuple[int, int] | None:
    """(period p, start s) of the loop the text ends in: tokens[s:] repeats with period p and
    holds at least two periods and half the text; of such loops the one that starts first (the
    shortest period on a tie). None where the text does not end in a loop."""
    n, best = len(tokens), None
    for p in range(1, n // 2 + 1):
        s = n - p
        while s > 0 and tokens[s - 1] == tokens[s - 1 + p]:
            s -= 1
        if n - s >= max(2 * p, n / 2) and (best is None or s < best[1]):
            best = (p, s)
    return best


def describe(tokens_per_sequence: list[list[int]]) -> dict:
    """The row's repetition fields for the generated tokens of one or more sequences: the mean
    repeated share, and for one sequence its tail loop's period and first token (1-based)."""
    shares = [repeated_share(t) for t in tokens_per_sequence]
    out = {"repetition": sum(shares) / len(shares), "repeat_cycle": None, "repeat_from": None}
    if len(tokens_per_sequence) == 1:
        cycle = tail_cycle(tokens_per_sequence[0])
        if cycle:
            out["repeat_cycle"], out["repeat_from"] = cycle[0], cycle[1] + 1
    return out


def warning(row: dict) -> str | None:
    """One line where the row's generated text is repetitive (share >= HIGH), naming its loop and
    what follows for α; None otherwise."""
    share = row.get("repetition")
    if share is None or share < HIGH:
        return None
    text = "the greedy text" if row.get("temperature") == 0 else "the generated text"
    if row.get("repeat_cycle"):
        what = (
            f"{text} repeats a {row['repeat_cycle']}-token cycle from token {row['repeat_from']} on "
            f"({share:.0%} of its tokens repeat a {N}-gram)"
        )
    else:
        what = f"{share:.0%} of {text}'s tokens repeat a {N}-gram it already wrote"
    if row.get("batch", 1) > 1:
        what = f"the batch's texts repeat themselves ({share:.0%} of tokens repeat a {N}-gram)"
    return (
        f"{what}: α on repeated text overstates what a draft buys on varied text; "
        "`specbench sweep --prompts all` measures the suite"
    )
