"""`specbench plot`'s work: a results file's rows drawn (results/plot.py): speedup and tokens/round
against K with the theory curve, or against batch size, or each row's time budget. No JAX: it
reads files only. Returns the PNG written."""

from __future__ import annotations

from pathlib import Path

from specbench.cli.asked.console import BadInput
from specbench.cli.asked.file_options import Plot
from specbench.cli.asked.paths import check_new_file
from specbench.errors import ExportError
from specbench.results import export


def plot(o: Plot) -> str:
    """Draw o.file's specbench rows into a PNG (o.output, else FILE's name with .png in the working
    directory); BadInput for a file it cannot draw or a PNG it may not replace."""
    from specbench.results.schema import missing_for_plot

    try:
        from specbench.results import plot as plotting
    except ImportError:
        raise BadInput("plot", "needs matplotlib: pip install -e '.[plot]'") from None
    try:
        rows = export.read_json(o.file)
    except ExportError as e:
        raise BadInput("FILE", str(e)) from None
    rows = [r for r in rows if r.get("implementation", "specbench") == "specbench"]  # peers: no theory
    missing = missing_for_plot(rows)
    if missing:
        raise BadInput("FILE", f"{o.file}: {missing}; plot needs rows written by `specbench run` or `sweep`")
    stem = Path(o.file).name.removesuffix(".xz").removesuffix(".json")
    output = o.output or f"{stem}.png"  # in the working directory, not beside FILE
    check_new_file(output, ".png", o.force)
    if o.budget:
        lacking = plotting.missing_for_budget(rows)
        if lacking:
            raise BadInput("--budget", f"{o.file}: {lacking}, so its time budget cannot be drawn: rerun it")
        plotting.plot_budget(rows, output)
    else:
        plotting.plot_rows(rows, output)
    return output
