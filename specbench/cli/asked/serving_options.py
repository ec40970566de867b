"""How a batch is served, run's and sweep's options: refilled from a closed queue (--refill,
--queue; model/decode/refill.py), or from requests arriving at a rate (--request-rate, --slo;
measure/serving.py)."""

from __future__ import annotations

import math

import click

from specbench.cli.asked.params import QUEUE_MAX, Count, ListParam


class Rate(click.ParamType):
    """A request rate: a positive number of requests a second, or "inf" (a closed queue: every
    request there from the start)."""

    name = "rate"

    def convert(self, value, param, ctx):
        text = str(value).strip().lower()
        try:
            rate = float(text)
        except ValueError:
            self.fail(f"{value!r} is not a rate: requests a second, or inf", param, ctx)
        if math.isnan(rate) or rate <= 0:
            self.fail(f"{value!r} is not a rate: a positive number of requests a second, or inf", param, ctx)
        return rate


class SLO(click.ParamType):
    """--slo "ttft=1s,tpot=50ms": bounds on a request's times (results/requests.parse_slo)."""

    name = "slo"

    def convert(self, value, param, ctx):
        if isinstance(value, dict):
            return value
        from specbench.results.requests import parse_slo

        try:
            return parse_slo(str(value))
        except ValueError as e:
            self.fail(f"{value!r}: {e}", param, ctx)


refill = [
    click.option(
        "--refill",
        is_flag=True,
        help="Keep the --batch slots busy from a queue of requests: a finished sequence's slot takes the "
        "next prompt, prefilled while the others go on (continuous batching; docs/batches.md).",
    ),
    click.option(
        "--queue",
        type=Count(1, QUEUE_MAX),
        default=None,
        help="--refill: the requests served, the prompts cycled [default: 4 x --batch].",
    ),
    click.option(
        "--request-rate",
        "request_rates",
        type=ListParam(float, item=Rate()),
        default=None,
        help="--refill: also serve the queue as requests arriving at R a second (Poisson, from --seed), "
        "AR and SD at the same arrivals, each request timed as it is served; inf: the closed queue only. "
        "sweep takes a list (1,2,4,8).",
    ),
    click.option(
        "--slo",
        type=SLO(),
        default=None,
        help="--request-rate: the bounds a request meets to count as goodput, any of ttft, tpot, e2e, "
        "queued in s or ms (ttft=1s,tpot=50ms) [default: none: every request counts].",
    ),
]
