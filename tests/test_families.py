"""An architecture is one record (nets/families.py) and its checkpoint format another
(checkpoints/formats.py): every config type has both, the docs list every model_type, and no
other module asks a config's type."""

import re
from pathlib import Path

import pytest

from specbench.model.checkpoints import formats, weights
from specbench.model.nets import families, network
from specbench.model.nets.families import family_of

ROOT = Path(__file__).resolve().parent.parent


def test_every_registered_model_has_a_family_and_a_format_and_records_its_model_type():
    for spec in weights.REGISTRY.values():
        family = family_of(spec.config)
        assert formats.format_of(spec.config).family is family
        assert network.architecture(spec.config) in family.names, spec.name
        assert network.display_name(spec.config) == family.names[network.architecture(spec.config)]
    with pytest.raises(TypeError, match="not the config of an architecture"):
        family_of(object())


def test_the_llama_layout_reads_and_writes_every_model_type_of_the_record():
    from specbench.model.checkpoints import llama_layout

    assert set(families.LLAMA.names) == set(llama_layout.FAMILIES)
    for row in families.LLAMA.types:  # one row each: what config.json says back is the row's
        config = llama_layout.config_from_hf(
            {"model_type": row.name, "num_hidden_layers": 1, "num_attention_heads": 2, "hidden_size": 8,
             "intermediate_size": 8, "vocab_size": 10}
        )  # fmt: skip
        assert (config.qkv_bias, config.qk_norm) == (row.qkv_bias, row.qk_norm)
        assert llama_layout.config_to_hf(config)["architectures"] == [row.hf_class]


def test_every_family_record_is_pinned_to_docs_models_md():
    text = (ROOT / "docs" / "models.md").read_text() + (ROOT / "docs" / "llama.md").read_text()
    for family in families.FAMILIES:
        for model_type, name in family.names.items():
            assert name in text, (model_type, name)
    for model_type in families.model_types():
        assert re.search(rf"\b{model_type}\b", text, re.I), model_type


def test_only_the_two_tables_ask_a_config_s_type():
    """isinstance on a config type stands in nets/families.py alone (formats.py asks family_of)."""
    asking = re.compile(r"isinstance\([^)]*,\s*\(?\w*Config\b|type\(\w*config\) in|\[type\(\w*config\)\]")
    found = [
        str(p.relative_to(ROOT))
        for p in (ROOT / "specbench").rglob("*.py")
        if asking.search(p.read_text()) and p.name not in ("families.py", "formats.py")
    ]
    assert found == [], found


def parameters(fn) -> list[str]:
    """A function's parameter names, `self` left out (a Protocol's methods, a record's methods)."""
    import inspect

    return [p for p in inspect.signature(fn).parameters if p != "self"]


def protocol_members(protocol) -> dict:
    return {
        name: member
        for name, member in vars(protocol).items()
        if callable(member) and not name.startswith("_")
    }


def test_every_family_provides_the_network_protocol_by_signature():
    """Each decoder module (gpt2.py, llama.py) has every member of families.Network with the same
    parameters in the same order; each family's Reading (how it reads its prompt: reading.OwnStart,
    reading.Source, T5's too) has every member of reading.Reading. network.py asks nothing else."""
    from specbench.model.nets import reading

    for family in families.FAMILIES:
        for name, member in protocol_members(reading.Reading).items():
            assert parameters(getattr(family.reading, name)) == parameters(member), (family, name)
        members = protocol_members(families.Network)
        if family.encoder_decoder:  # T5's module has the step alone of them; its Reading does the rest
            members = {"step": members["step"]}
        for name, member in members.items():
            assert parameters(getattr(family.module, name)) == parameters(member), (family.module, name)


def test_every_eagle_head_format_provides_its_parts_by_signature():
    """The EAGLE heads' formats (eagle.FORMATS: EAGLE-1-style blocks, EAGLE-3) each supply the same
    parts with the same parameters, so the round calls any of them alike."""
    from specbench.model.nets import eagle

    first, *others = eagle.FORMATS
    for fmt in others:
        for field in eagle.Format._fields[2:]:
            assert parameters(getattr(fmt, field)) == parameters(getattr(first, field)), (fmt.name, field)


def test_network_py_names_no_family():
    text = (ROOT / "specbench" / "model" / "nets" / "network.py").read_text()
    assert not re.search(r"\bt5\.|\bgpt2\.|\bllama\.|encoder_decoder", text.split('"""', 2)[2])


def test_no_module_asks_a_family_by_identity_or_by_name():
    """Which family a model is, and what it can do, is asked of the record: no `is families.X`, no
    comparison of architecture() or a config's model_type with a name, outside the two tables."""
    asking = re.compile(
        r"\bis (?:not )?families\.(?:GPT2|LLAMA|T5)\b|architecture\([^)]*\)\s*[!=]=|\.family\s*[!=]=\s*\"|"
        r"family\s*==\s*\"(?:gpt2|llama|qwen2|qwen3|mistral|t5)\""
    )
    found = [
        f"{p.relative_to(ROOT)}: {m.group(0)}"
        for p in (ROOT / "specbench").rglob("*.py")
        if p.name not in ("families.py", "formats.py")
        for m in asking.finditer(p.read_text())
    ]
    assert found == [], found


def test_t5_s_random_weights_are_made_as_its_record_says(tmp_path, monkeypatch):
    """T5's record says random_init: a registry T5 gets random weights of its shape, and runs."""
    from specbench.model.checkpoints import weights

    assert families.T5.random_init
    model = weights.random_model("t5-small")
    assert family_of(model.config) is families.T5 and model.source == "random"
    assert model.params["shared"].shape == (model.config.n_vocab, model.config.d_model)
