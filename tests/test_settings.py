"""The typed settings (cli/settings.py): run is a sweep of one cell, a grid is the product of its
axes, and building the settings checks them without touching the flags."""

import dataclasses

import click
import pytest

from specbench.cli.asked.console import BadInput
from specbench.cli.asked.settings import Settings
from specbench.cli.commands import plan, sweep_plan
from specbench.cli.main import cli


def parsed(command: str, *args: str) -> tuple[dict, set[str]]:
    """(the flags, the ones given) as `specbench COMMAND ARGS` parses them."""
    ctx = cli.commands[command].make_context(command, list(args))
    given = {n for n in ctx.params if ctx.get_parameter_source(n) == click.core.ParameterSource.COMMANDLINE}
    return ctx.params, given


def planned(make, command: str, *args: str):
    """make(settings) as `specbench COMMAND ARGS` calls it, inside its click context: the flags
    made into one Settings (run's and trace's by of_run, sweep's by of_sweep), checked once."""
    ctx = cli.commands[command].make_context(command, list(args))
    given = {n for n in ctx.params if ctx.get_parameter_source(n) == click.core.ParameterSource.COMMANDLINE}
    build = Settings.of_sweep if command == "sweep" else Settings.of_run
    with ctx:
        return make(build(ctx.params, given))


@pytest.mark.parametrize(
    "args",
    [
        ["--K", "3", "--temperature", "1", "--top-p", "0.9"],
        ["--drafter", "lookup", "--ngram", "2"],
        ["--drafter", "dial", "--acceptance", "0.5"],
        ["--tree", "2,2,1", "-t", "1", "--verify", "traversal"],
        ["--drafts", "2", "--verify", "gbv", "-t", "1"],
        ["--batch", "4", "--refill", "--queue", "6"],
        ["--drafter", "layerskip", "--dynamic-K", "--draft-confidence", "0.4"],
    ],
)
def test_run_is_a_sweep_of_one_cell(args, tmp_path, monkeypatch):
    """The same values given to run and to sweep plan the same job: the same drafter, K, warp,
    timing, prompts and name."""
    monkeypatch.setenv("SPECBENCH_RESULTS_DIR", str(tmp_path))
    K = [] if {"--K", "--tree"} & set(args) else ["--K", "4"]  # sweep's K is 1,2,4,8 by default
    common = ["--dry-run", "--repeats", "2", *K, *args]
    prompt = ["--prompt-id", "narrative-1"] if "--batch" not in args else []
    run = planned(plan.run_plan, "run", *common, *prompt, "--no-save").job
    sweep_prompt = ["--prompts", "narrative-1"] if prompt else []
    (job,) = planned(sweep_plan.sweep_plan, "sweep", *common, *sweep_prompt).todo
    # sweep cycles the whole suite through a batch unless --prompts chose; run does the same
    unloaded = lambda c: dataclasses.replace(c, draft=None, target=None)  # each plan loads its own pair
    assert unloaded(job.config) == unloaded(run.config)
    assert (job.config.target.name, job.config.draft is None) == (
        run.config.target.name,
        run.config.draft is None,
    )
    assert (job.draft_name, job.ids, job.encoded) == (run.draft_name, run.ids, run.encoded)


def test_a_grid_is_the_product_of_its_axes(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECBENCH_RESULTS_DIR", str(tmp_path))
    args = [
        "--dry-run",
        "--drafter",
        "model,lookup",
        "--K",
        "1,3",
        "-t",
        "0,1",
        "--prompts",
        "narrative-1,dialogue-1",
    ]
    p = planned(sweep_plan.sweep_plan, "sweep", *args)
    assert p.grid_size == len(p.todo) == 2 * 2 * 2 * 2
    seen = {(j.config.drafter.spec.name, j.config.K, j.config.warp.temperature, j.prompt_id) for j in p.todo}
    assert len(seen) == 16


def test_a_tree_sets_K_without_touching_the_flags():
    f, given = parsed("run", "--tree", "2,2,1", "-t", "1")
    before = dict(f)
    s = Settings.of_run(f, given)
    assert s.Ks == (3,) and f == before
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.Ks = (4,)
    f, given = parsed("sweep", "--tree", "2,2", "--K", "3")
    with pytest.raises(BadInput, match="depth 2 drafts K = 2"):
        Settings.of_sweep(f, given)


def test_the_settings_carry_the_models_prompts_and_output_and_nothing_below_takes_the_flags():
    f, given = parsed(
        "run", "--target", "t", "--draft", "d", "--dtype", "bfloat16", "--mesh", "tp=1", "-t", "1"
    )
    s = Settings.of_run(f, given)
    assert (s.models.target, s.models.draft, s.models.dtype, s.models.mesh) == ("t", "d", "bfloat16", "tp=1")
    assert s.prompts.text == f["prompt"] and s.output.save and "temperature" in s.given
    f, given = parsed("sweep", "--prompts", "fairy", "-o", "x.json", "--export-csv", "-")
    s = Settings.of_sweep(f, given)
    assert (s.prompts.spec, s.output.path, s.output.export_paths["csv"]) == ("fairy", "x.json", "-")


def every_command(group: click.Group, prefix: str = ""):
    """(name, command) of every command under the click group, its subgroups' too."""
    for name, command in group.commands.items():
        yield prefix + name, command
        if isinstance(command, click.Group):
            yield from every_command(command, f"{prefix}{name} ")


def test_every_command_is_thin_and_no_function_below_it_takes_the_flags():
    """Each command of the click group (discovered, not listed) is a function of cli/main.py; below
    it, only the options wing (asked/) reads the flags dict, into typed options: no module of
    commands/ or views/ has a function taking `f` or `flags`."""
    import importlib
    import inspect
    import pkgutil

    from specbench.cli import commands, views

    names = [name for name, _ in every_command(cli)]
    assert {"run", "sweep", "trace", "theory", "predict", "plot", "roofline", "report", "models list"} <= set(
        names
    )
    for name, command in every_command(cli):
        if command.callback is not None:
            assert command.callback.__module__ == "specbench.cli.main", (name, command.callback.__module__)
    for package in (commands, views):
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            for fname, fn in inspect.getmembers(module, inspect.isfunction):
                if fn.__module__ == module.__name__:
                    assert not {"f", "flags"} & set(inspect.signature(fn).parameters), (
                        module.__name__,
                        fname,
                    )


def test_each_setting_is_refused_where_the_settings_are_built():
    """Settings refuses what no model is needed to refuse: nothing is loaded yet."""
    cases = [
        (("run", "--queue", "4"), "--queue"),
        (("run", "--drafter", "dial"), "--acceptance"),
        (("sweep", "--refill"), "--refill"),
        (("sweep", "--drafts", "1,2", "--batch", "2"), "--batch"),
        (("run", "--drafter", "lookup", "--draft-device", "1"), "--draft-device"),
    ]
    for (command, *args), flag in cases:
        f, given = parsed(command, *args)
        build = Settings.of_run if command == "run" else Settings.of_sweep
        with pytest.raises(BadInput) as e:
            build(f, given)
        assert e.value.message.startswith(flag + ":"), (args, e.value.message)


@pytest.mark.parametrize(
    "args",
    [
        ["--drafter", "dial", "--acceptance", "0.5"],
        ["--tree", "2,1", "-t", "1"],
        ["--drafts", "2", "-t", "1"],
    ],
)
def test_trace_decodes_with_run_s_drafter(args, tmp_path, monkeypatch):
    """trace plans the drafter, K and warp that run does for the same flags (the dial's acceptance too)."""
    monkeypatch.setenv("SPECBENCH_RESULTS_DIR", str(tmp_path))
    job = planned(plan.run_plan, "run", "--dry-run", "--no-save", *args).job
    traced = planned(plan.trace_plan, "trace", "--dry-run", *args)
    assert (traced.drafter, traced.draft_name) == (job.config.drafter, job.draft_name)
    assert (traced.K, traced.warp) == (job.config.K, job.config.warp)
