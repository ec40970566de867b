"""The models a command runs, each loaded or refused in one line naming its flag: the draft and the
target (registry names, aliases, folders or random weights), and the peers that run beside
specbench (the heads and the drafts a drafter brings of its own: heads.py). JAX's backend is
checked before the first load."""

from __future__ import annotations

import click

from specbench.cli.asked.console import BadInput, bad_input
from specbench.errors import WeightsError
from specbench.model.nets.families import family_of


def check_backend() -> None:
    """JAX's backend must start: JAX_PLATFORMS naming a platform that is not installed (cuda on a
    machine without it) is one line, not JAX's traceback."""
    from specbench.measure import device

    problem = device.backend_problem()
    if problem:
        raise BadInput("JAX_PLATFORMS", problem)


def load_model(
    name: str, flag: str, dtype: str, kernels: str = "auto", cache: dict | None = None, random: bool = False
):
    """A model by registry name, alias or directory (with `random`, random weights of a registry
    name's shape), in the format `dtype` names (quantized.WeightFormat: int8 is Q8_0, quantized at
    load) and the layout decoding reads (--kernels); BadInput naming `flag` if it cannot be had."""
    import jax.numpy as jnp

    from specbench.errors import SpecbenchError
    from specbench.model.checkpoints import weights
    from specbench.weight_format import WeightFormat

    check_backend()
    cache = {} if cache is None else cache
    if (name, dtype, kernels, random) not in cache:
        fmt = WeightFormat(dtype)
        jdtype = jnp.bfloat16 if fmt.dtype == "bfloat16" else jnp.float32
        try:
            model = (
                weights.random_model(name, jdtype)
                if random
                else weights.load_model(name, jdtype, decoding=False)
            )
        except WeightsError as e:
            raise bad_input(e, flag) from None
        if not family_of(model.config).kernels and kernels not in ("auto", "xla"):
            raise BadInput(
                "--kernels", f"{model.name} is a T5: its steps run on XLA's products (auto or xla)"
            )
        model = quantized_model(model, flag) if fmt.quantized else model
        try:
            model = weights.for_decoding_model(model, kernels)
        except SpecbenchError as e:
            raise bad_input(e, "--kernels") from None
        if fmt.quantized and kernels_used(model) != "cpu":
            raise BadInput(
                "--kernels",
                f"int8 weights are multiplied by specbench's CPU kernel: {why_not_cpu(kernels)}",
            )
        cache[name, dtype, kernels, random] = model
    return cache[name, dtype, kernels, random]


def dtype_flag(flag: str) -> str:
    """The flags that set a model's weight format: --dtype, and --target-dtype or --draft-dtype."""
    return "--dtype/--target-dtype" if flag == "--target" else "--dtype/--draft-dtype"


def quantized_model(model, flag: str):
    """The model in Q8_0 (nets/quantized.py), or BadInput naming the dtype flag where it cannot be:
    a T5, or a width that is not a multiple of 32."""
    import dataclasses

    from specbench.model.nets import network, quantized

    if not family_of(model.config).kernels:
        kind = network.display_name(model.config)
        raise BadInput(dtype_flag(flag), f"{model.name} is a {kind}: int8 is for GPT-2 and the Llama family")
    if why := quantized.problem(model.params):
        raise BadInput(dtype_flag(flag), f"{model.name} cannot be int8: {why}")
    return dataclasses.replace(model, params=quantized.quantize(model.params))


def kernels_used(model) -> str:
    from specbench.model.nets.layouts import kernels_used as used

    return used(model.params)


def why_not_cpu(kernels: str) -> str:
    """Why a model's steps do not run on the CPU kernel, as --kernels asked."""
    from specbench.model.kernels import cpu

    if kernels in ("xla", "pallas"):
        return f"--kernels {kernels} asks for others (use auto or cpu)"
    return f"it cannot run here ({cpu.unavailable() or 'not on this device'})"


def load_pair(
    draft: str | None,
    target: str | None,
    dtype: str,
    need_draft: bool = True,
    kernels: str = "auto",
    random: bool = False,
    mesh: str | None = None,
    draft_device: int | None = None,
    target_dtype: str | None = None,
    draft_dtype: str | None = None,
):
    """(draft, target) models (random weights of their registry shapes with `random`), each in
    its own dtype where one is given (--target-dtype, --draft-dtype), else `dtype`; the draft
    is None when the drafter needs no draft model. The two must share the vocabulary and the
    tokenizer (checkpoints/tokenizer.for_model). With `mesh` (--mesh tp=N) the target is split
    over N devices and the draft replicated on them (on_mesh); with `draft_device` the draft is on
    that device alone (place_draft)."""
    from specbench.model.checkpoints import tokenizer, weights

    if mesh is not None and kernels not in ("auto", "xla"):
        raise BadInput("--kernels", "a target split over a mesh runs on XLA's products: use auto or xla")
    target_dtype, draft_dtype = target_dtype or dtype, draft_dtype or dtype
    if mesh is not None and "int8" in (target_dtype, draft_dtype):
        raise BadInput("--dtype", "int8 weights run on the CPU kernel, not split over a mesh")
    kernels = "xla" if mesh is not None else kernels

    named = target and (draft or not need_draft)  # a named pair runs without the bundled one
    try:
        default_draft, default_target = (draft, target) if named else weights.default_pair()
    except WeightsError as e:
        raise bad_input(e, "--target") from None
    # the target first: a pair whose two folders are both wrong is blamed on the one named first
    t = load_model(target or default_target, "--target", target_dtype, kernels, random=random)
    d = (
        load_model(draft or default_draft, "--draft", draft_dtype, kernels, random=random)
        if need_draft
        else None
    )
    from specbench.model.nets.network import vocabulary

    if d is not None and vocabulary(d.config) != vocabulary(t.config):
        raise BadInput(
            "--draft/--target",
            f"draft and target must share the vocabulary "
            f"({d.name}: {vocabulary(d.config)}, {t.name}: {vocabulary(t.config)})",
        )
    say_unused_backend(t)
    texts = [tokenizer.for_model(m).name for m in (d, t) if m is not None]
    if len(set(texts)) > 1:
        raise BadInput(
            "--draft/--target",
            f"draft and target must share the tokenizer ({d.name}: {texts[0]}, {t.name}: {texts[1]})",
        )
    return place_draft(*on_mesh(d, t, mesh), draft_device)


def say_unused_backend(target) -> None:
    """SPECBENCH_PALLAS_BACKEND chooses the Pallas kernels' products: where the target runs on other
    kernels (the CPU kernel, XLA's), a note says that it changes nothing rather than nothing."""
    from specbench.model.kernels.pallas_layers import backend_chosen
    from specbench.model.nets.layouts import kernels_used

    used, chosen = kernels_used(target.params), backend_chosen()
    if chosen and used != "pallas":
        click.echo(
            f"note: SPECBENCH_PALLAS_BACKEND={chosen} chooses the Pallas kernels' products (--kernels "
            f"pallas, on a GPU); {target.name} runs on the {used} kernels, so it changes nothing here",
            err=True,
        )


def place_draft(draft, target, index: int | None):
    """--draft-device N: the draft's weights on device N alone, its rounds then two programs
    (decode/placed.py); the pair as it is without the flag. BadInput for a device JAX does not
    see, or the one device that holds the target already."""
    if index is None or draft is None:
        return draft, target
    import dataclasses

    import jax

    from specbench.model.decode import placed

    devices = jax.devices()
    if index >= len(devices):
        raise BadInput(
            "--draft-device",
            f"device {index}: JAX sees {len(devices)} (0..{len(devices) - 1}); on a CPU, XLA_FLAGS="
            f"--xla_force_host_platform_device_count=N makes host devices",
        )
    if placed.devices(target.params) == {devices[index]}:
        raise BadInput("--draft-device", f"device {index} is the target's: the draft is there already")
    return dataclasses.replace(draft, params=jax.device_put(draft.params, devices[index])), target


def on_mesh(draft, target, text: str | None):
    """--mesh tp=N: the target's weights split over the first N devices (nets/mesh.py, Megatron
    style), the draft's replicated on them; the pair as it is without the flag."""
    if text is None:
        return draft, target
    import dataclasses

    from specbench.model.nets import mesh, network

    try:
        on = mesh.make_mesh(mesh.MeshSpec.parse(text))
        t = network.shard(target, on)
    except ValueError as e:
        raise BadInput("--mesh", str(e)) from None
    d = None if draft is None else dataclasses.replace(draft, params=mesh.replicate(draft.params, on))
    return d, t


def random_model(name: str, dtype: str, kernels: str = "auto"):
    """Random weights of a registry shape (timing only), in the layout decoding reads (--kernels)."""
    return load_model(name, "--model", dtype, kernels, random=True)


def load_peers(
    names: list[str], drafter, draft, target, batch: int, start: bool = True, temperatures=(0.0,)
) -> tuple:
    """The --peer implementations, checked for these settings and (unless a dry run: start=False)
    started (peers.make_peers)."""
    if not names:
        return ()
    from specbench.measure import device, peers
    from specbench.model.nets import mesh

    if mesh.name(target.params):
        raise BadInput("--peer", "peers decode on one device: leave out --mesh")

    try:
        return peers.make_peers(names, drafter, draft, target, batch, device.on_gpu(), start, temperatures)
    except peers.PeerError as e:
        raise BadInput("--peer", str(e)) from None
