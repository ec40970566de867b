"""HF GPT-2 layout: save/load round trips, key names, Conv1D orientation, downloads."""

import http.server
import json
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from specbench.model.checkpoints import hf_layout, weights
from specbench.model.checkpoints.hub import download
from specbench.model.checkpoints.weights import WeightsError
from specbench.model.nets.gpt2 import GPT2Config, gpt2

from conftest import random_model, tiny_tokenizer_json

CONFIG = GPT2Config(n_layer=2, n_head=2, n_embd=16, n_ctx=32, n_vocab=50)


def assert_same_params(a, b):
    flat_a, tree_a = jax.tree_util.tree_flatten(a)
    flat_b, tree_b = jax.tree_util.tree_flatten(b)
    assert tree_a == tree_b
    for x, y in zip(flat_a, flat_b):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize("max_shard_bytes", [None, 6000])
def test_save_load_round_trip(tmp_path, max_shard_bytes):
    model = random_model(CONFIG, 3)
    hf_layout.save(tmp_path / "m", model.params, CONFIG, max_shard_bytes=max_shard_bytes)
    files = sorted(p.name for p in (tmp_path / "m").iterdir())
    if max_shard_bytes:
        assert (
            "model.safetensors.index.json" in files and len([f for f in files if f.startswith("model-0")]) > 2
        )
        index = json.loads((tmp_path / "m" / "model.safetensors.index.json").read_text())
        assert set(index["weight_map"]) == set(hf_layout.expected_shapes(CONFIG))
    else:
        assert files == ["config.json", "model.safetensors"]
    config, params = hf_layout.load_dir(tmp_path / "m")
    assert config == CONFIG
    assert_same_params(params, model.params)


def test_half_precision_save_loads_within_rounding(tmp_path):
    model = random_model(CONFIG, 4)
    hf_layout.save(tmp_path / "m", model.params, CONFIG, np_dtype=np.float16)
    assert all(t.dtype == np.float16 for t in load_file(str(tmp_path / "m" / "model.safetensors")).values())
    _, params = hf_layout.load_dir(tmp_path / "m")
    for x, y in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(model.params)):
        np.testing.assert_allclose(x, y, rtol=1e-3, atol=1e-4)


def hf_checkpoint(config: GPT2Config, prefix: str = "") -> dict[str, np.ndarray]:
    """A state dict as transformers writes it, every tensor distinct and asymmetric."""
    rng = np.random.default_rng(0)
    tensors = {
        prefix + k: rng.normal(0, 0.1, s).astype(np.float32)
        for k, s in hf_layout.expected_shapes(config).items()
    }
    # the buffers and tied head a real checkpoint carries, which loading must ignore
    for i in range(config.n_layer):
        tensors[f"{prefix}h.{i}.attn.bias"] = np.tril(np.ones((1, 1, config.n_ctx, config.n_ctx), np.float32))
    tensors["lm_head.weight"] = tensors[prefix + "wte.weight"]
    return tensors


@pytest.mark.parametrize("prefix", ["", "transformer."])
def test_hf_key_names_and_conv1d_orientation(tmp_path, prefix):
    config = GPT2Config(n_layer=2, n_head=2, n_embd=8, n_ctx=16, n_vocab=20)
    tensors = hf_checkpoint(config, prefix)
    c_attn = np.arange(8 * 24, dtype=np.float32).reshape(8, 24) / 100  # [in=8, out=24], not square
    tensors[prefix + "h.1.attn.c_attn.weight"] = c_attn
    fc = np.zeros((8, 32), np.float32)
    fc[3, 17] = 1.0  # input feature 3 -> hidden unit 17, and nothing else
    tensors[prefix + "h.0.mlp.c_fc.weight"] = fc
    d = tmp_path / "hf"
    d.mkdir()
    save_file(tensors, str(d / "model.safetensors"))
    (d / "config.json").write_text(
        json.dumps(
            {
                "n_layer": 2,
                "n_head": 2,
                "n_embd": 8,
                "n_positions": 16,
                "vocab_size": 20,
                "model_type": "gpt2",
            }
        )
    )
    config_loaded, params = hf_layout.load_dir(d)
    assert config_loaded == config
    np.testing.assert_array_equal(params["blocks"]["attn"]["c_attn"]["weight"][1], c_attn)
    x = np.zeros(8, np.float32)
    x[3] = 2.0
    h = x @ np.asarray(params["blocks"]["mlp"]["c_fc"]["weight"][0])  # the forward's own orientation
    assert h[17] == 2.0 and np.count_nonzero(h) == 1
    np.testing.assert_array_equal(params["wte"], tensors[prefix + "wte.weight"])
    np.testing.assert_array_equal(params["blocks"]["ln_2"]["bias"][1], tensors[prefix + "h.1.ln_2.bias"])
    # the forward runs on it and is finite
    assert np.isfinite(np.asarray(gpt2(params, jnp.arange(5), config))).all()


def test_missing_or_misshapen_tensors_are_refused(tmp_path):
    tensors = hf_checkpoint(CONFIG)
    del tensors["h.1.mlp.c_proj.bias"]
    with pytest.raises(WeightsError, match="missing .*h.1.mlp.c_proj.bias"):
        hf_layout.params_from_hf(tensors, CONFIG)
    tensors = hf_checkpoint(CONFIG)
    tensors["h.0.attn.c_attn.weight"] = tensors["h.0.attn.c_attn.weight"].T.copy()  # [out, in]: transposed
    with pytest.raises(WeightsError, match="h.0.attn.c_attn.weight has shape"):
        hf_layout.params_from_hf(tensors, CONFIG)


def test_corrupt_weights_file_gives_clear_error(tmp_path):
    model = random_model(CONFIG, 3)
    hf_layout.save(tmp_path / "m", model.params, CONFIG)
    f = tmp_path / "m" / "model.safetensors"
    f.write_bytes(f.read_bytes()[:1000])
    with pytest.raises(WeightsError, match="cannot read the weights"):
        hf_layout.load_dir(tmp_path / "m")


def test_registry_names_and_aliases(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECBENCH_WEIGHTS_DIR", str(tmp_path))
    assert (
        weights.resolve("gpt2-xl").name == "1558M"
        and weights.resolve("124M").hf_repo == "openai-community/gpt2"
    )
    assert weights.REGISTRY["124M"].config.n_params == 124_439_808  # GPT-2 small, tied head
    with pytest.raises(WeightsError, match="unknown model 'gpt5'"):
        weights.resolve("gpt5")
    with pytest.raises(WeightsError, match="not downloaded: run `specbench models download 355M`"):
        weights.load_model("gpt2-medium")
    hf_layout.save(tmp_path / "mine", random_model(CONFIG, 1).params, CONFIG)
    assert weights.load_model("mine").config == CONFIG  # a directory in gpt2_weights/ by name
    assert weights.load_model(str(tmp_path / "mine")).config == CONFIG  # or by path
    names = {row["name"]: row for row in weights.list_models()}
    assert names["mine"]["present"] and not names["124M"]["present"]


# ---------------------------------------------------------------------------------------------
# Downloads, against a loopback server speaking the Hub's resolve protocol


class FakeHub(http.server.ThreadingHTTPServer):
    def __init__(self, files: dict[str, bytes]):
        self.files = files
        self.etags: dict[str, str] = {}  # path -> ETag to send instead of the body's sha256
        self.requests: list[str] = []
        super().__init__(("127.0.0.1", 0), HubHandler)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"


def served_download(files: dict[str, bytes], name: str):
    """download(name) from a FakeHub serving `files`, shut down after."""
    hub = FakeHub(files)
    threading.Thread(target=hub.serve_forever, daemon=True).start()
    try:
        return download(name, endpoint=hub.url, progress=False)
    finally:
        hub.shutdown()


class HubHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _find(self):
        # /{org}/{repo}/resolve/{revision}/{filename}
        parts = self.path.split("?")[0].strip("/").split("/")
        self.server.requests.append(self.path)
        self.key = f"{parts[0]}/{parts[1]}/{parts[-1]}"
        if len(parts) == 5 and parts[2] == "resolve" and self.key in self.server.files:
            return self.server.files[self.key]
        return None

    def _headers(self, body):
        import hashlib

        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", f'"{self.server.etags.get(self.key, hashlib.sha256(body).hexdigest())}"')
        self.send_header("X-Repo-Commit", "0" * 40)
        self.end_headers()

    def _respond(self, with_body: bool):
        body = self._find()
        if body is None:  # as the Hub answers for a file its repository lacks
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self._headers(body)
        if with_body:
            self.wfile.write(body)

    def do_HEAD(self):
        self._respond(with_body=False)

    def do_GET(self):
        self._respond(with_body=True)


@pytest.fixture
def tiny_hub(tmp_path, monkeypatch):
    """gpt2 (124M) in the registry, served as a tiny model from loopback; downloads go to tmp_path."""
    monkeypatch.setenv("SPECBENCH_WEIGHTS_DIR", str(tmp_path / "gpt2_weights"))
    (tmp_path / "gpt2_weights").mkdir()  # a folder the user names must exist
    monkeypatch.setitem(
        weights.REGISTRY,
        "124M",
        weights.ModelSpec("124M", "GPT-2 small (tiny stand-in)", CONFIG, "openai-community/gpt2", ("gpt2",)),
    )
    src = hf_layout.save(tmp_path / "src", random_model(CONFIG, 8).params, CONFIG)
    hub = FakeHub(
        {f"openai-community/gpt2/{f}": (src / f).read_bytes() for f in ("config.json", "model.safetensors")}
    )
    thread = threading.Thread(target=hub.serve_forever, daemon=True)
    thread.start()
    yield hub, src
    hub.shutdown()


def test_download_from_hf_endpoint(tiny_hub, monkeypatch):
    hub, src = tiny_hub
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    path = download("gpt2", progress=False)
    assert path == weights.weights_dir() / "124M"
    assert (path / "model.safetensors").read_bytes() == (src / "model.safetensors").read_bytes()
    assert any("/openai-community/gpt2/resolve/" in r for r in hub.requests)
    model = weights.load_model("gpt2")
    assert model.config == CONFIG and model.source == str(path)
    assert not any(p.name.startswith(".download") for p in weights.weights_dir().iterdir())


def test_a_t5_downloads_in_shards_with_its_tokenizer_and_decodes_its_text(tmp_path, monkeypatch):
    """flan-t5-xl's checkpoint is an index and shards, and every T5 carries tokenizer.json: a tiny
    stand-in served so, downloaded under the registry's name, then loaded with the tokenizer."""
    from specbench.model.checkpoints import t5_layout, tokenizer
    from specbench.model.nets import t5

    monkeypatch.setenv("SPECBENCH_WEIGHTS_DIR", str(tmp_path / "gpt2_weights"))
    (tmp_path / "gpt2_weights").mkdir()
    config = t5.T5Config(n_vocab=300, d_model=16, d_kv=8, d_ff=24, n_layer=1, n_decoder_layer=2, n_head=2)
    spec = weights.ModelSpec("flan-t5-xl", "Flan-T5 XL (tiny stand-in)", config, "google/flan-t5-xl")
    monkeypatch.setitem(weights.REGISTRY, "flan-t5-xl", spec)
    tensors = t5_layout.params_to_hf(t5.init_params(config, 2), config)
    keys = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": keys[::2], "model-00002-of-00002.safetensors": keys[1::2]}
    repo = "google/flan-t5-xl"
    files = {f"{repo}/config.json": json.dumps(t5_layout.config_to_hf(config)).encode()}
    for name, chosen in shards.items():
        save_file({k: tensors[k] for k in chosen}, str(tmp_path / name))
        files[f"{repo}/{name}"] = (tmp_path / name).read_bytes()
    index = {"weight_map": {k: name for name, chosen in shards.items() for k in chosen}}
    files[f"{repo}/model.safetensors.index.json"] = json.dumps(index).encode()
    files[f"{repo}/tokenizer.json"] = tiny_tokenizer_json(300).encode()
    path = served_download(files, "flan-t5-xl")
    assert sorted(p.name for p in path.iterdir()) == sorted(f.split("/")[-1] for f in files)
    model = weights.load_model("flan-t5-xl")
    assert model.config == config and model.source == str(path)
    text = tokenizer.for_model(model)
    assert text.name.startswith("sha256:") and text.decode(text.encode("the old house")) == "the old house"
    assert max(text.encode("the old house")) < config.n_vocab  # its own ids, not GPT-2's


def test_the_registry_holds_t5_and_flan_t5_at_their_published_sizes():
    published = {  # parameters as Hugging Face's model cards count them
        "t5-small": 60_506_624,
        "flan-t5-small": 76_961_152,
        "flan-t5-base": 247_577_856,
        "flan-t5-large": 783_150_080,
        "flan-t5-xl": 2_849_757_184,
    }
    assert {name: weights.REGISTRY[name].config.n_params for name in published} == published


def test_download_refuses_a_file_whose_sha256_differs(tiny_hub, monkeypatch):
    import hashlib

    hub, src = tiny_hub
    key = "openai-community/gpt2/model.safetensors"
    good = hub.files[key]
    bad = bytearray(good)
    bad[-10] ^= 0xFF  # same size, one byte changed in the tensor data
    hub.files[key], hub.etags[key] = bytes(bad), hashlib.sha256(good).hexdigest()
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    with pytest.raises(WeightsError, match="model.safetensors of 124M is corrupt"):
        download("124M", progress=False)
    assert not (weights.weights_dir() / "124M").exists()
    hub.files[key] = good  # the server is fixed: the same command now succeeds
    assert download("124M", progress=False) == weights.weights_dir() / "124M"


def test_download_with_server_down_fails_cleanly(tiny_hub):
    hub, _ = tiny_hub
    url = hub.url
    hub.shutdown()
    hub.server_close()
    with pytest.raises(WeightsError) as err:
        download("124M", endpoint=url, progress=False)
    message = str(err.value)
    assert "cannot download 124M" in message and "\n" not in message
    assert not (weights.weights_dir() / "124M").exists()  # no half-written model directory
    with pytest.raises(WeightsError, match="not downloaded"):
        weights.load_model("124M")


def test_models_download_command(tiny_hub, monkeypatch):
    from click.testing import CliRunner

    from specbench.cli.main import cli

    hub, _ = tiny_hub
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    result = CliRunner().invoke(cli, ["models", "download", "gpt2"])
    assert result.exit_code == 2 and result.output.count("\n") == 1
    assert result.output.startswith("error: NAME: cannot download 124M from http://127.0.0.1:9")
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    result = CliRunner().invoke(cli, ["models", "download", "gpt2"])
    assert result.exit_code == 0, result.output
    assert "124M: ready in" in result.output
    listing = CliRunner().invoke(cli, ["models", "list"])
    row = next(line for line in listing.output.splitlines() if line.startswith("│ 124M"))
    assert "yes" in row
