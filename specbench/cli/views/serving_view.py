"""What `run` prints of how its batch was served: a fixed batch or a refilled queue, the requests'
latency percentiles, and a queue served as its requests arrived (results/requests.py)."""

from __future__ import annotations

from specbench.cli.views.words import plural


def batch_line(row: dict) -> str:
    """What a batch did: its size and mix, the rounds it ran, and the slots stragglers wasted."""
    if row.get("queue"):
        return (
            f"a queue of {row['queue']} requests on {row['batch']} refilled slots · tokens/s count all "
            f"{row['queue']} requests · the slots ran {row['batch_rounds']} rounds, "
            f"{row['tokens_per_batch_round']:.2f} tokens per slot per round (each request alone: "
            f"{row['tokens_per_round']:.2f}) · idle slots {row['idle_fraction']:.1%}: slots left without a "
            "request once the queue emptied"
        )
    mix = sorted(set(row["batch_prompt_ids"] or []))
    shown = ", ".join(mix[:4]) + (f" and {len(mix) - 4} more" if len(mix) > 4 else "")
    return (
        f"batch of {row['batch']} ({shown}) · tokens/s count all {row['batch']} sequences · the batch ran "
        f"{row['batch_rounds']} rounds, {row['tokens_per_batch_round']:.2f} tokens per sequence per round "
        f"(each sequence alone: {row['tokens_per_round']:.2f}) · idle slots {row['idle_fraction']:.1%}: "
        f"finished sequences waiting for the slowest"
    )


def request_line(row: dict) -> str:
    """Per request (results/requests.py): TTFT, TPOT and E2E of AR and SD at p50 (and p95)."""
    ms = lambda key: f"{row[key] * 1e3:.2f}" if row.get(key) is not None else "-"
    part = lambda x, name: (
        f"{name} AR {ms(f'ar_{x}_p50_s')} / SD {ms(f'sd_{x}_p50_s')} ms"
        f" (p95 {ms(f'ar_{x}_p95_s')} / {ms(f'sd_{x}_p95_s')})"
    )
    n = len(row.get("requests") or [])
    shown = (("queued", "queued"),) if row.get("queue") else ()  # a refilled queue's: by its rounds
    shown += (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2e", "E2E"))
    shown += (("itl", "gaps between tokens"),) if row.get("ar_itl_p50_s") is not None else ()
    return f"per request ({plural(n, 'request')}), p50: " + " · ".join(part(x, name) for x, name in shown)


def load_line(row: dict) -> str:
    """A queue served as its requests arrived (measure/serving.py): the rate, what each method served
    a second, and with an SLO the share that met it and the goodput."""
    pair = lambda key, f: " / SD ".join(
        format(row[f"{m}_{key}"], f) if row.get(f"{m}_{key}") is not None else "-" for m in ("ar", "sd")
    )
    slo = row.get("slo")
    met = (
        f" · {slo} met by AR {pair('slo_attainment', '.0%')} · goodput AR "
        f"{pair('goodput_rps', '.2f')} requests/s"
        if slo
        else ""
    )
    return (
        f"under load: requests arriving at {row['request_rate']:g}/s (Poisson) · served AR "
        f"{pair('served_rps', '.2f')} requests/s{met} · each request timed on the host's clock, one "
        "dispatch a round (docs/batches.md)"
    )
