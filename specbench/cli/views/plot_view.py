"""`specbench plot`: a results file's rows drawn (results/plot.py): speedup and tokens/round against
K with the theory curve, or against batch size, or each row's time budget. No JAX: it reads files only."""

from __future__ import annotations

from pathlib import Path

import click

from specbench.cli.asked.console import BadInput
from specbench.cli.asked.paths import check_new_file
from specbench.errors import ExportError
from specbench.results import export


@click.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--output", "-o", default=None, metavar="PNG", help="[default: FILE's name with .png, here]")
@click.option("--force", is_flag=True, help="Replace an existing PNG.")
@click.option("--budget", is_flag=True, help="Draw each row's time budget (AR beside SD) as stacked bars.")
def plot(file, output, force, budget):
    """Speedup and tokens/round against K from a JSON results file, with the theory curve; speedup
    and throughput against batch size when the file varies it (sweep --batch)."""
    from specbench.results.schema import missing_for_plot

    try:
        from specbench.results import plot as plotting
    except ImportError:
        raise BadInput("plot", "needs matplotlib: pip install -e '.[plot]'") from None
    try:
        rows = export.read_json(file)
    except ExportError as e:
        raise BadInput("FILE", str(e)) from None
    rows = [r for r in rows if r.get("implementation", "specbench") == "specbench"]  # peers: no theory
    missing = missing_for_plot(rows)
    if missing:
        raise BadInput("FILE", f"{file}: {missing}; plot needs rows written by `specbench run` or `sweep`")
    stem = Path(file).name.removesuffix(".xz").removesuffix(".json")
    output = output or f"{stem}.png"  # in the working directory, not beside FILE
    check_new_file(output, ".png", force)
    if budget:
        lacking = plotting.missing_for_budget(rows)
        if lacking:
            raise BadInput("--budget", f"{file}: {lacking}, so its time budget cannot be drawn: rerun it")
        plotting.plot_budget(rows, output)
    else:
        plotting.plot_rows(rows, output)
    click.echo(f"wrote {output}")
