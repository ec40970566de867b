"""Hardening round 7: output that no long path can wrap, arrivals bounded before serving, a queue
that fills its slots, EAGLE-3 folders whose tables and taps are checked and read in the engines'
order, every config value checked for type and range, a rope scaling refused rather than ignored,
SLO bounds with their unit, the load verdict when no side meets the SLO, and one compile of
`start` a run."""

import dataclasses
import json
import shutil

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_eagle3 import QWEN3, head_config, qwen3_target, random_head, vllm_eagle3
from test_hardening import RECORDED_REPORT

from specbench.cli.asked import checks
from specbench.cli.asked.console import BadInput, make_console
from specbench.errors import WeightsError
from specbench.measure import serving
from specbench.model.checkpoints import eagle3_files, eagle_files, hf_layout, llama_layout, t5_layout
from specbench.model.nets import eagle, llama
from specbench.results import arrivals, requests

from conftest import assert_one_line_error, invoke

REFILL = ("run", "--batch", "4", "--refill", "-n", "8", "--repeats", "1")

# ---------------------------------------------------------------------------------------------
# Output that a long path cannot wrap


def test_a_phrase_after_a_long_path_stays_on_its_line(env, tmp_path, monkeypatch):
    """The README's test command failed where $TMPDIR was long: the console wrapped after the path."""
    monkeypatch.delenv("SPECBENCH_WEIGHTS_DIR")
    deep = tmp_path.joinpath(*["a-long-folder-name-" + "x" * 20] * 6) / "rep"
    shutil.copytree(RECORDED_REPORT, deep)
    result = invoke("report", "-o", deep, "--resume", "--quick")
    assert result.exit_code == 0, result.output
    assert f"the report in {deep} is complete: nothing is left to measure" in result.output


def test_piped_output_takes_its_width_from_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "333")
    assert make_console().width == 333
    monkeypatch.setenv("COLUMNS", "wide")
    assert make_console().width == 140


# ---------------------------------------------------------------------------------------------
# Arrivals bounded before serving; a queue that fills its slots


@pytest.mark.parametrize("rate", ["1e-300", "5e-324", "0.001"])
def test_a_rate_whose_arrivals_cannot_end_in_time_is_refused(env, rate):
    result = invoke(*REFILL, "--queue", "8", "--request-rate", rate, "--dry-run")
    assert_one_line_error(result, "--request-rate", "a run waits at most 1.0 h", "use at least")


def test_a_sweep_refuses_its_slowest_rate(env):
    result = invoke("sweep", "--batch", "2", "--refill", "--request-rate", "4,1e-9", "--dry-run")
    assert_one_line_error(result, "--request-rate", "1e-09/s")


def test_the_dry_run_says_the_slots_the_queue_and_the_arrivals(env):
    result = invoke(*REFILL, "--queue", "8", "--request-rate", "2", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "batch 4 refilled from a queue of 8 arriving at 2/s (over about 3.5 s)" in result.output


@given(
    rate=st.floats(min_value=0, max_value=1e6, allow_subnormal=True, exclude_min=True),
    queue=st.integers(1, 65536),
    repeats=st.integers(1, 50),
)
@settings(max_examples=300, deadline=None)
def test_arrivals_are_served_within_the_bound_or_refused(rate, queue, repeats):
    try:
        checks.check_arrivals(rate, queue, repeats)
    except BadInput as e:
        assert "--request-rate" in str(e)
        return
    times = serving.poisson_arrivals(rate, queue, 0)
    assert np.isfinite(times).all() and times[0] == 0 and (np.diff(times) >= 0).all()
    assert 2 * repeats * checks.arrivals_span(rate, queue) <= checks.ARRIVALS_MAX_S


def test_arrivals_the_clock_cannot_hold_are_a_value_error():
    with pytest.raises(ValueError, match="no finite arrivals"):
        serving.poisson_arrivals(5e-324, 8, 0)
    assert serving.poisson_arrivals(5e-324, 1, 0).tolist() == [0.0]  # one request arrives at 0


@pytest.mark.parametrize("command", [REFILL, ("sweep", "--batch", "2,4", "--refill", "-n", "8")])
def test_a_queue_smaller_than_its_slots_is_refused(env, command):
    result = invoke(*command, "--queue", "1" if command[0] == "run" else "3", "--dry-run")
    assert_one_line_error(result, "--queue", "cannot keep --batch 4's slots busy")


# ---------------------------------------------------------------------------------------------
# EAGLE-3 folders: d2t, taps, an embedding of the right width


@pytest.fixture(scope="module")
def target():
    return qwen3_target()


def saved_head(tmp_path, target, layout="speculators", embedding=True, **kw):
    head = random_head(head_config(target.config, **kw), 3, embedding=embedding)
    return eagle3_files.save(tmp_path / "head", head.params, head.config, layout), head


def rewrite(folder, **tensors):
    from safetensors.numpy import load_file, save_file

    path = folder / "model.safetensors"
    found = load_file(str(path))
    for key, value in tensors.items():
        if value is None:
            del found[key]
        else:
            found[key] = value
    save_file(found, str(path))


@pytest.mark.parametrize(
    "d2t, fragment",
    [
        ("float", "d2t holds float32 values"),
        ("past", "outside the vocabulary of 97"),
        ("negative", "to token -1, outside"),
        ("one token", "to only 1 distinct tokens"),
        ("missing", "covers 60 tokens of the target's 97 but it has no d2t"),
    ],
)
def test_a_d2t_table_that_cannot_be_a_vocabulary_map_is_named(tmp_path, target, d2t, fragment):
    folder, _ = saved_head(tmp_path, target, draft_vocab=60)
    ids = np.arange(60)
    table = {
        "float": np.zeros(60, np.float32),
        "past": (np.arange(60) * 0 + 40).astype(np.int64),
        "negative": np.full(60, -1, np.int64),
        "one token": (5 - ids).astype(np.int64),
        "missing": None,
    }[d2t]
    rewrite(folder, d2t=table)
    with pytest.raises(WeightsError, match=fragment):
        eagle_files.load(folder)


def test_a_head_with_nan_weights_is_named(tmp_path, target):
    folder, head = saved_head(tmp_path, target, draft_vocab=60)
    from safetensors.numpy import load_file

    norm = load_file(str(folder / "model.safetensors"))["norm.weight"]
    rewrite(folder, **{"norm.weight": np.full_like(norm, np.nan)})
    with pytest.raises(WeightsError, match="norm.weight holds NaN"):
        eagle_files.load(folder)


def test_a_narrow_head_without_its_own_embedding_is_refused_by_name(tmp_path, target):
    """vLLM cannot run it either: the target's embedding is wider than the head's q/k/v read."""
    folder, _ = saved_head(tmp_path, target, embedding=False, width=16, draft_vocab=60)
    config, params, _ = eagle_files.load(folder)
    wrong = eagle.mismatch(config, target.config, params)
    assert "has no embed_tokens of its own" in wrong and "16 wide" in wrong
    same_width, _ = saved_head(tmp_path / "w", target, embedding=False, draft_vocab=60)
    config, params, _ = eagle_files.load(same_width)
    assert eagle.mismatch(config, target.config, params) is None  # it reads the target's, as wide


def test_taps_named_out_of_order_are_read_in_layer_order_as_vllm_collects_them(tmp_path, target):
    """speculators' eagle_aux_hidden_state_layer_ids [6, 1, 3]: vLLM appends a layer's input to the
    taps inside the target's layer loop, so fc reads layers 1, 3, 6 in that order."""
    from safetensors.numpy import load_file

    head_cfg = dataclasses.replace(head_config(target.config, draft_vocab=60), taps=(6, 1, 3))
    head = random_head(head_cfg, 4)
    eagle3_files.save(tmp_path / "h", head.params, head_cfg, "speculators")
    assert json.loads((tmp_path / "h" / "config.json").read_text())["eagle_aux_hidden_state_layer_ids"] == [
        6,
        1,
        3,
    ]
    config, params, _ = eagle_files.load(tmp_path / "h")
    assert config.taps == (1, 3, 6)
    tensors = {
        k: v.astype(np.float64) for k, v in load_file(str(tmp_path / "h" / "model.safetensors")).items()
    }
    tokens = np.asarray([5, 17, 2, 88, 40, 3, 5, 17, 60, 1])
    cache = llama.init_cache(QWEN3, 16)
    _, _, in_layer_order = llama.step(target.params, cache, jnp.asarray(tokens), 0, QWEN3, hidden=(1, 3, 6))
    reference = vllm_eagle3(
        tensors, config, np.asarray(in_layer_order, np.float64)[:-1], tokens[1:], "layers.0"
    )
    config = eagle.drafting_config(config, target.config)
    _, _, taps = llama.step(target.params, cache, jnp.asarray(tokens), 0, QWEN3, hidden=config.taps)
    ours, _ = eagle.forward(eagle.attach(params, target.params, config), taps, jnp.asarray(tokens), config)
    np.testing.assert_allclose(np.asarray(ours)[1:], reference, atol=1e-4, rtol=1e-4)


def test_taps_named_twice_are_refused(tmp_path, target):
    head_cfg = dataclasses.replace(head_config(target.config, draft_vocab=60), taps=(1, 3, 3))
    eagle3_files.save(tmp_path / "h", random_head(head_cfg, 4).params, head_cfg, "speculators")
    with pytest.raises(
        WeightsError, match="eagle_aux_hidden_state_layer_ids is \\[1, 3, 3\\], expected distinct"
    ):
        eagle_files.load(tmp_path / "h")


@pytest.mark.parametrize(
    "n_layer, said", [(4, "2, 2, 1 (a layer twice and below layer 2)"), (6, "2, 3, 3"), (7, None)]
)
def test_a_shallow_target_s_default_taps_are_said(target, n_layer, said):
    shallow = dataclasses.replace(target.config, n_layer=n_layer)
    head = head_config(shallow, draft_vocab=60)
    note = eagle.note(dataclasses.replace(head, taps=()), shallow)
    assert (note is None) if said is None else said in note


@pytest.mark.parametrize(
    "change, fragment",
    [
        (lambda m: m | {"eagle_aux_hidden_state_layer_ids": "1,2,3"}, "expected a list of integers"),
        (lambda m: m | {"eagle_aux_hidden_state_layer_ids": [1, True, 3]}, "expected a list of integers"),
        (lambda m: {**m, "transformer_layer_config": m["transformer_layer_config"] | {"hidden_size": None}},
         "hidden_size is null"),
        (lambda m: {**m, "transformer_layer_config": {**m["transformer_layer_config"], "num_attention_heads": 0}},  # noqa: E501
         "num_attention_heads is 0, expected an integer >= 1"),
        (lambda m: m | {"draft_vocab_size": "60"}, "draft_vocab_size is '60'"),
        (lambda m: m | {"norm_before_residual": "yes"}, "expected true or false"),
        (lambda m: m | {"transformer_layer_config": [1]}, "expected a JSON object"),
    ],
)  # fmt: skip
def test_a_head_s_config_values_are_checked_naming_file_and_key(tmp_path, target, change, fragment):
    folder, _ = saved_head(tmp_path, target, draft_vocab=60)
    meta = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(change(meta)))
    with pytest.raises(WeightsError, match=fragment) as e:
        eagle_files.load(folder)
    assert "config.json" in str(e.value)


def test_a_truncated_torch_file_is_named(tmp_path, target):
    torch = pytest.importorskip("torch")
    folder, head = saved_head(tmp_path, target, draft_vocab=60)
    from safetensors.numpy import load_file

    tensors = load_file(str(folder / "model.safetensors"))
    torch.save({k: torch.from_numpy(v) for k, v in tensors.items()}, folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    data = (folder / "pytorch_model.bin").read_bytes()
    (folder / "pytorch_model.bin").write_bytes(data[: len(data) // 2])
    with pytest.raises(WeightsError, match="pytorch_model.bin cannot be read"):
        eagle_files.load(folder)


def test_a_broken_head_config_is_said_to_be_broken(env, tmp_path):
    (tmp_path / "head").mkdir()
    (tmp_path / "head" / "config.json").write_text('{"architectures": ["LlamaForCausalLMEagle3"], ')
    result = invoke("run", "--drafter", "eagle", "--eagle-head", tmp_path / "head", "--dry-run")
    assert_one_line_error(result, "--eagle-head", "config.json is not JSON")


def test_a_qwen3_target_without_a_head_is_not_told_to_train_one(tmp_path, monkeypatch):
    from conftest import tiny_tokenizer_json

    monkeypatch.setenv("SPECBENCH_WEIGHTS_DIR", str(tmp_path))
    target = qwen3_target()
    llama_layout.save(tmp_path / "q3", target.params, QWEN3)
    (tmp_path / "q3" / "tokenizer.json").write_text(tiny_tokenizer_json(QWEN3.n_vocab))
    result = invoke("run", "--target", tmp_path / "q3", "--drafter", "eagle", "--dry-run")
    assert_one_line_error(result, "--eagle-head", "name a published EAGLE-3 head's folder")
    assert "specbench.train eagle --target" not in result.output


# ---------------------------------------------------------------------------------------------
# Every config value checked for type and range; rope scalings refused, not ignored


def qwen3_dict(**change):
    return llama_layout.config_to_hf(QWEN3) | change


@pytest.mark.parametrize(
    "change, fragment",
    [
        ({"hidden_size": None}, "hidden_size is null"),
        ({"num_attention_heads": 0}, "num_attention_heads is 0, expected an integer >= 1"),
        ({"num_hidden_layers": "8"}, "num_hidden_layers is '8'"),
        ({"num_hidden_layers": 2.5}, "num_hidden_layers is 2.5"),
        ({"vocab_size": True}, "vocab_size is True"),
        ({"rms_norm_eps": -1}, "rms_norm_eps is -1, expected a finite number > 0"),
        ({"num_key_value_heads": 3}, "expected a divisor of num_attention_heads (4)"),
        ({"tie_word_embeddings": "no"}, "tie_word_embeddings is 'no', expected true or false"),
        ({"rope_scaling": "yarn"}, "rope_scaling is 'yarn', expected a JSON object"),
    ],
)
def test_a_llama_config_s_values_are_checked(change, fragment):
    with pytest.raises(WeightsError) as e:
        llama_layout.config_from_hf(qwen3_dict(**change), "q3/config.json")
    assert fragment in str(e.value) and str(e.value).startswith("q3/config.json")


def test_gpt2_and_t5_config_values_are_checked_too():
    gpt2 = hf_layout.config_to_hf(hf_layout.GPT2Config(2, 2, 16, 32, 50)) | {"n_head": 3}
    with pytest.raises(WeightsError, match="n_head is 3, expected a divisor of n_embd"):
        hf_layout.config_from_hf(gpt2)
    with pytest.raises(WeightsError, match="n_layer is None|n_layer is null"):
        hf_layout.config_from_hf(gpt2 | {"n_head": 2, "n_layer": None})
    t5 = {"vocab_size": 32, "d_model": 16, "d_kv": 8, "d_ff": 32, "num_layers": 2, "num_heads": 2}
    assert t5_layout.config_from_hf(t5).n_layer == 2
    with pytest.raises(WeightsError, match="num_heads is 0"):
        t5_layout.config_from_hf(t5 | {"num_heads": 0})


@pytest.mark.parametrize(
    "rope",
    [
        {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}},
        {"rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e6}},
    ],
)
def test_a_rope_scaling_llama_does_not_compute_is_refused_in_either_key(rope):
    """Transformers 5 saves rope_parameters (default); Qwen3's model card adds rope_scaling yarn."""
    d = qwen3_dict(rope_parameters={"rope_type": "default", "rope_theta": 1e6}) | rope
    with pytest.raises(WeightsError, match="not YaRN or dynamic NTK"):
        llama_layout.config_from_hf(d)


def test_rope_theta_is_read_from_either_key():
    d = qwen3_dict(rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    del d["rope_theta"]
    assert llama_layout.config_from_hf(d).rope_theta == 1e6
    linear = d | {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}
    config = llama_layout.config_from_hf(linear)
    assert config.rope_theta == 1e6 and config.rope_scaling.kind == "linear"


def test_a_target_folder_s_bad_value_and_nan_weights_are_one_line(env, tmp_path):
    from conftest import tiny_tokenizer_json

    llama_layout.save(tmp_path / "q3", qwen3_target().params, QWEN3)
    (tmp_path / "q3" / "tokenizer.json").write_text(tiny_tokenizer_json(QWEN3.n_vocab))
    config = json.loads((tmp_path / "q3" / "config.json").read_text())
    (tmp_path / "q3" / "config.json").write_text(json.dumps(config | {"hidden_size": None}))
    result = invoke("run", "--target", tmp_path / "q3", "--drafter", "lookup", "--dry-run")
    assert_one_line_error(result, "--target", "config.json: hidden_size is null")
    (tmp_path / "q3" / "config.json").write_text(json.dumps(config))
    rewrite(tmp_path / "q3", **{"model.norm.weight": np.full(QWEN3.n_embd, np.nan, np.float32)})
    result = invoke("run", "--target", tmp_path / "q3", "--drafter", "lookup", "--dry-run")
    assert_one_line_error(result, "--target", "model.norm.weight holds NaN")


# ---------------------------------------------------------------------------------------------
# Smaller ones


@pytest.mark.parametrize("slo", ["ttft=40", "tpot=3,ttft=1s"])
def test_an_slo_bound_needs_its_unit(slo):
    with pytest.raises(ValueError, match="give the unit, s or ms"):
        requests.parse_slo(slo)
    assert requests.parse_slo("ttft=40ms,tpot=1s") == {"ttft": 0.04, "tpot": 1.0}


def test_process_1_s_dry_run_says_what_it_would_do(env):
    args = ("--processes", "2", "--process-id", "1", "--coordinator", "localhost:12345", "--mesh", "tp=2")
    result = invoke("run", *args, "--dry-run")
    assert result.exit_code == 0, result.output
    assert "process 1 of 2 would join process 0 at localhost:12345" in result.output


def test_a_relative_xdg_cache_home_is_ignored(monkeypatch, tmp_path):
    from specbench.measure import compile_cache

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert compile_cache.folder() == tmp_path / ".cache" / "specbench" / "xla"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "abs"))
    assert compile_cache.folder() == tmp_path / "abs" / "specbench" / "xla"


def test_a_pallas_backend_that_changes_nothing_is_said(env, monkeypatch):
    monkeypatch.setenv("SPECBENCH_PALLAS_BACKEND", "mosaic")
    result = invoke("run", *env, "--dry-run")
    assert result.exit_code == 0, result.output
    assert "SPECBENCH_PALLAS_BACKEND=mosaic chooses the Pallas kernels' products" in result.output


def load_row(rate, ar_good, sd_good, ar_tpot, sd_tpot, ar_rps=10.0, sd_rps=10.0):
    return {
        "request_rate": rate, "slo": "ttft=0.04s,tpot=0.003s", "ar_goodput_rps": ar_good,
        "sd_goodput_rps": sd_good, "ar_tpot_p50_s": ar_tpot, "sd_tpot_p50_s": sd_tpot,
        "ar_served_rps": ar_rps, "sd_served_rps": sd_rps,
    }  # fmt: skip


def test_the_load_verdict_is_not_read_off_zero_against_zero():
    """Neither side meets the SLO at any rate: judged by served rate and TPOT, and said so."""
    rows = [load_row(r, 0.0, 0.0, 0.004, 0.003) for r in (8, 16, 32)]
    rows[2] |= {"sd_tpot_p50_s": 0.005}
    (line,) = arrivals.stop_lines(rows)
    assert "SD stops paying at 32 requests/s (it paid up to 16)" in line
    assert (
        "by served rate and TPOT p50: neither AR nor SD met the SLO (ttft=0.04s,tpot=0.003s) at any rate"
        in line
    )
    fewer = [load_row(8, 0.0, 0.0, 0.004, 0.003, sd_rps=8.0), load_row(16, 0.0, 0.0, 0.004, 0.003)]
    assert "stops paying at 8" in arrivals.stop_lines(fewer)[0]
    met = [load_row(8, 5.0, 6.0, 0.004, 0.003), load_row(16, 0.0, 0.0, 0.004, 0.003)]
    assert "SD pays at every rate" in arrivals.stop_lines(met)[0]
    assert "at 16 requests/s, judged there" in arrivals.stop_lines(met)[0]


def test_start_compiles_once_for_ar_and_sd(model_dirs):
    """AR's start and SD's target start are one program (jit keys `hidden=False` apart from no
    `hidden`, which compiled it twice a run)."""
    from specbench.model.checkpoints import weights
    from specbench.model.decode import decoding, drafters
    from specbench.model.generate import autoregressive, speculative

    t = weights.for_decoding_model(weights.load_model(str(model_dirs / "t"), decoding=False), "auto")
    d = weights.for_decoding_model(weights.load_model(str(model_dirs / "d"), decoding=False), "auto")
    decoding.start_jit.jitted.clear_cache()
    autoregressive(t, [5, 6, 7], 4)
    speculative(d, t, [5, 6, 7], 4, 2, drafter=drafters.model_drafter(d.config))
    assert decoding.start_jit.jitted._cache_size() == 1


# ---------------------------------------------------------------------------------------------
# Fuzz: SLOs, queues against slots, head and config values


@given(st.text(alphabet="tfpoeqdu=,.0123456789msinaxTE-+ ", max_size=30))
@settings(max_examples=300, deadline=None)
def test_any_slo_text_is_bounds_or_a_value_error(text):
    try:
        bounds = requests.parse_slo(text)
    except ValueError:
        return
    assert bounds and set(bounds) <= set(requests.METRICS)
    assert all(0 < b < float("inf") for b in bounds.values())


JSON_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
    st.lists(st.integers(-2, 9), max_size=4),
    st.dictionaries(
        st.sampled_from(["rope_type", "type", "factor", "rope_theta"]),
        st.none() | st.text(max_size=6) | st.floats(0.5, 8),
    ),
)  # fmt: skip
LLAMA_KEYS = [
    "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "hidden_size", "intermediate_size",
    "vocab_size", "max_position_embeddings", "rms_norm_eps", "rope_theta", "head_dim", "tie_word_embeddings",
    "rope_scaling", "rope_parameters", "hidden_act", "attention_bias", "model_type",
]  # fmt: skip


@given(st.dictionaries(st.sampled_from(LLAMA_KEYS), JSON_VALUES, max_size=4))
@settings(max_examples=400, deadline=None)
def test_a_llama_config_with_any_values_reads_or_is_one_weights_error(changes):
    from specbench.model.nets.llama import LlamaConfig

    try:
        config = llama_layout.config_from_hf(qwen3_dict(**changes), "f/config.json")
    except WeightsError as e:
        assert "config.json" in str(e)
        return
    assert isinstance(config, LlamaConfig) and config.n_layer >= 1 and config.n_head % config.n_kv_head == 0


@given(
    taps=JSON_VALUES,
    vocab=JSON_VALUES,
    width=JSON_VALUES,
    layers=st.none() | st.integers(-1, 3) | st.text(max_size=2),
)
@settings(max_examples=200, deadline=None)
def test_a_head_config_with_any_values_reads_or_is_one_weights_error(taps, vocab, width, layers):
    block = llama_layout.config_to_hf(QWEN3) | {"hidden_size": width, "num_hidden_layers": layers}
    meta = {
        "speculators_model_type": "eagle3",
        "transformer_layer_config": block,
        "eagle_aux_hidden_state_layer_ids": taps,
        "draft_vocab_size": vocab,
    }
    try:
        config = eagle3_files.config_from(meta, "h/config.json")
    except WeightsError as e:
        assert "config.json" in str(e)
        return
    assert list(config.taps) == sorted(set(config.taps)) and config.n_embd >= 1


@given(batches=st.lists(st.integers(1, 64), min_size=1, max_size=3), queue=st.integers(1, 300))
@settings(max_examples=100, deadline=None)
def test_a_queue_against_any_slots_is_served_or_refused_by_name(batches, queue):
    from specbench.cli.asked.settings import Settings

    s = Settings(batches=tuple(batches), refill=True, queue=queue, given=frozenset({"queue", "refill"}))
    try:
        checks.check_refill(s)
    except BadInput as e:
        assert str(e).startswith("--queue:") and queue < max(batches)
        return
    assert queue >= max(batches)
