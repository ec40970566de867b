"""Downloads of Hugging Face checkpoints (GPT-2's; T5's and the Llama family's with their
tokenizer.json) into gpt2_weights/, checked before they are used. A gated repository (Meta's
Llama) is fetched with the token huggingface_hub finds: $HF_TOKEN, or `hf auth login`'s."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

from specbench.errors import WeightsError
from specbench.model.checkpoints.hf_layout import CONFIG_FILE, INDEX_FILE, SAFETENSORS_FILE, is_model_dir
from specbench.model.checkpoints.tokenizer import JSON_FILE
from specbench.model.checkpoints.weights import (
    REGISTRY,
    ModelSpec,
    local_path,
    read_dir,
    resolve,
    weights_dir,
)
from specbench.model.nets.families import family_of


def download(name: str, endpoint: str | None = None, progress: bool = True) -> Path:
    """Fetch an HF checkpoint into gpt2_weights/<name>/ with huggingface_hub: config.json, the
    weights (model.safetensors, or an index and its shards) and, but for a GPT-2, its tokenizer.json.

    Files land in a hidden staging directory first (where huggingface_hub can resume them) and
    the model directory appears only once every file is complete and its size checked, so a
    failed download never leaves a half-written model behind. The endpoint is `endpoint`, else
    $HF_ENDPOINT, else the Hub.
    """
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.utils import disable_progress_bars, enable_progress_bars
    from huggingface_hub.utils import logging as hf_logging

    spec = resolve(name)
    if not isinstance(spec, ModelSpec) or spec.hf_repo is None:
        raise WeightsError(
            f"{name} is not downloadable: downloadable models are "
            + ", ".join(s.name for s in REGISTRY.values() if s.hf_repo)
        )
    final = local_path(spec)
    if is_model_dir(final):
        return final
    check_token(spec)
    endpoint = endpoint or os.environ.get("HF_ENDPOINT") or None
    where = endpoint or "the Hugging Face Hub"
    hf_logging.set_verbosity_error()  # our one error line instead of the library's retry chatter
    (enable_progress_bars if progress else disable_progress_bars)()
    try:  # fail fast when offline: one metadata request without retries
        get_hf_file_metadata(hf_hub_url(spec.hf_repo, CONFIG_FILE, endpoint=endpoint), endpoint=endpoint)
    except Exception as e:
        raise WeightsError(
            f"cannot download {spec.name} from {where} ({_root_cause(e)}); "
            "check the network, or set HF_ENDPOINT to a mirror"
        ) from None
    staging = weights_dir() / f".download-{spec.name}"
    staging.mkdir(parents=True, exist_ok=True)

    fetch = lambda filename: fetch_checked(spec, filename, staging, endpoint)
    try:
        files = fetch_all(spec, fetch, staging)
    except WeightsError:
        raise
    except Exception as e:  # connection lost mid-way, HTTP errors, disk full, ...
        raise WeightsError(
            f"cannot download {spec.name} from {where} ({_root_cause(e)}); run the same command "
            "again to resume"
        ) from None
    final.mkdir(parents=True, exist_ok=True)
    for filename in files:
        os.replace(staging / filename, final / filename)
    shutil.rmtree(staging, ignore_errors=True)
    return final


def fetch_all(spec: ModelSpec, fetch, staging: Path) -> list[str]:
    """Every file of the checkpoint into `staging` (config.json, a T5's or Llama's tokenizer.json, the weights
    whole or as an index and its shards), then loaded to check every key and shape; their names."""
    from huggingface_hub.utils import EntryNotFoundError

    own_tokenizer = not family_of(spec.config).bundled_tokenizer  # GPT-2's is vendored
    files = [CONFIG_FILE, *([JSON_FILE] if own_tokenizer else [])]
    for filename in files:
        fetch(filename)
    try:
        fetch(SAFETENSORS_FILE)
        files.append(SAFETENSORS_FILE)
    except EntryNotFoundError:  # a large checkpoint comes in shards, listed by an index
        index = json.loads(fetch(INDEX_FILE).read_text())
        shards = sorted(set(index["weight_map"].values()))
        for shard in shards:
            fetch(shard)
        files += [INDEX_FILE, *shards]
    read_dir(staging)  # every key and shape present
    return files


def check_token(spec: ModelSpec) -> None:
    """A gated model needs a Hugging Face token: WeightsError in one line saying how to give one."""
    from huggingface_hub import get_token

    if spec.gated and not get_token():
        raise WeightsError(
            f"{spec.name} ({spec.hf_repo}) is gated: accept its licence on huggingface.co, then give "
            "a token with `hf auth login` or HF_TOKEN=hf_..."
        )


def fetch_checked(spec: ModelSpec, filename: str, staging: Path, endpoint: str | None) -> Path:
    """One file of spec's repository into `staging`, its size and (where the Hub gives it) its
    sha256 checked; WeightsError, and the file removed, where either differs."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url

    path = Path(hf_hub_download(spec.hf_repo, filename, local_dir=staging, endpoint=endpoint))
    meta = get_hf_file_metadata(hf_hub_url(spec.hf_repo, filename, endpoint=endpoint), endpoint=endpoint)
    size = path.stat().st_size
    if meta.size is not None and size != meta.size:
        path.unlink()
        raise WeightsError(
            f"{filename} of {spec.name} is {size} bytes, expected {meta.size}; run the download again"
        )
    # the Hub's ETag of a large (LFS) file is the sha256 of its content: check it where given
    if meta.etag and re.fullmatch(r"[0-9a-f]{64}", meta.etag) and _sha256(path) != meta.etag:
        path.unlink()
        raise WeightsError(
            f"{filename} of {spec.name} is corrupt (sha256 differs from the server's "
            f"{meta.etag[:12]}…); run the download again"
        )
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _root_cause(e: BaseException) -> str:
    """The innermost exception's first line: 'Connection refused', not a wrapper's paragraph."""
    while e.__cause__ is not None or e.__context__ is not None:
        e = e.__cause__ or e.__context__
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    return text[:160]
