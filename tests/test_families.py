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

    assert set(llama_layout.ARCHITECTURES) == set(families.LLAMA.names) == set(llama_layout.FAMILIES)


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
