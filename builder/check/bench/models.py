"""The bench's torch side: random-weight klein components at a scale, their inputs, and PyTorch timing.

Random weights with the real configs (builder/convert/tiny.py's configs at the real sizes): speed does not depend on
the weight values, and the Hub is not needed. PyTorch runs bf16 on CUDA (fp32 on the CPU for the smoke test) and is
timed with CUDA events.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from builder.check.bench.stats import median_ms
from builder.errors import BenchError

COMPONENTS = ("text_encoder", "transformer", "vae_decoder")


@dataclass(frozen=True)
class Scale:
    """Model configs and input sizes of one bench scale; layer counts are given separately as chains."""

    name: str
    text_encoder: Mapping[str, Any]  # Qwen3Config kwargs, num_hidden_layers left out
    text_layers: int  # layers the prompt-embedding graph runs (hidden state 27)
    text_chains: tuple[tuple[int], ...]  # ((text_layers,),): the whole graph
    transformer: Mapping[str, Any]  # Flux2Transformer2DModel kwargs, layer counts left out
    transformer_layers: tuple[int, int]  # (double, single) blocks of the real model
    transformer_chains: tuple[tuple[int, int], ...]
    vae: Mapping[str, Any]
    txt_seq: int  # the pipeline pads prompts to 512 tokens
    resolutions: tuple[int, ...]  # transformer step sizes (square)
    vae_resolution: int


def full_scale() -> Scale:
    """The real FLUX.2 [klein] 4B sizes (the configs of the published klein-4B checkpoint)."""
    from builder.convert import tiny

    return _scale(
        "full",
        tiny.FULL_TEXT_ENCODER_CONFIG,
        tiny.FULL_TRANSFORMER_CONFIG,
        tiny.FULL_VAE_CONFIG,
        txt_seq=512,
        resolutions=(512, 1024),
        vae_resolution=512,
    )


def tiny_scale() -> Scale:
    """make-tiny's configs and small inputs: the CPU smoke test of the whole bench path."""
    from builder.convert import tiny

    return _scale(
        "tiny",
        tiny.TEXT_ENCODER_CONFIG,
        tiny.TRANSFORMER_CONFIG,
        tiny.VAE_CONFIG,
        txt_seq=32,
        resolutions=(128, 256),
        vae_resolution=128,
    )


def _scale(
    name: str,
    text_config: Mapping[str, Any],
    transformer_config: Mapping[str, Any],
    vae_config: Mapping[str, Any],
    *,
    txt_seq: int,
    resolutions: tuple[int, ...],
    vae_resolution: int,
) -> Scale:
    """A Scale from make-tiny's config dicts: layer counts are dropped (the bench builds chains of its own)
    and the real model's counts are used for the extrapolation."""
    text = {k: v for k, v in text_config.items() if k != "num_hidden_layers"}
    transformer = {k: v for k, v in transformer_config.items() if k not in ("num_layers", "num_single_layers")}
    # The text encoder is timed whole (its one "chain" is its 27 layers); the transformer from chains.
    return Scale(
        name,
        text,
        27,
        ((27,),),
        transformer,
        (5, 20),
        ((0, 1), (1, 1), (0, 2)),
        dict(vae_config),
        txt_seq=txt_seq,
        resolutions=resolutions,
        vae_resolution=vae_resolution,
    )


SCALES = {"full": full_scale, "tiny": tiny_scale}


def build_text_encoder(scale: Scale, layers: int, *, device: str) -> Any:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    with torch.device(device):
        return Qwen3ForCausalLM(Qwen3Config(**scale.text_encoder, num_hidden_layers=layers)).eval()


def build_transformer(scale: Scale, layers: tuple[int, ...], *, device: str) -> Any:
    import torch
    from diffusers import Flux2Transformer2DModel

    torch.manual_seed(1)
    with torch.device(device):
        return Flux2Transformer2DModel(**scale.transformer, num_layers=layers[0], num_single_layers=layers[1]).eval()


def build_vae(scale: Scale, *, device: str) -> Any:
    import torch
    from diffusers import AutoencoderKLFlux2

    torch.manual_seed(2)
    with torch.device(device):
        vae = AutoencoderKLFlux2(**scale.vae).eval()
    with torch.no_grad():
        vae.bn.running_var.uniform_(0.5, 1.5)
    return vae


def build_module(scale: Scale, component: str, chain: tuple[int, ...] | None, *, device: str) -> Any:
    if component == "text_encoder":
        return build_text_encoder(scale, chain[0] if chain else scale.text_layers, device=device)
    if component == "transformer":
        return build_transformer(scale, tuple(chain) if chain else scale.transformer_layers, device=device)
    return build_vae(scale, device=device)


def out_layers(layers: int) -> tuple[int, int, int]:
    """Hidden states the k-layer chain concatenates: like (9, 18, 27) for 27, three distinct layers."""
    if layers < 3:
        raise BenchError(f"A text-encoder chain needs >= 3 layers (three hidden states), got {layers}.")
    return (layers // 3, 2 * layers // 3, layers)


def make_inputs(scale: Scale, component: str, resolution: int | None, *, seed: int = 0) -> dict[str, Any]:
    """Random (never zero) numpy inputs in the graph contract's names and shapes."""
    import numpy as np

    rng = np.random.default_rng(seed)
    if component == "text_encoder":
        vocab = int(scale.text_encoder["vocab_size"])
        ids = rng.integers(0, min(vocab, 151643), size=(1, scale.txt_seq), dtype=np.int64)
        return {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    side = int(resolution or scale.vae_resolution) // 16  # 8x VAE downsampling, then 2x2 patches
    if component == "transformer":
        joint = int(scale.transformer["joint_attention_dim"])
        rows, cols = np.divmod(np.arange(side * side), side)
        img_ids = np.stack([np.zeros_like(rows), rows, cols, np.zeros_like(rows)], axis=1).astype(np.int64)
        txt_ids = np.zeros((scale.txt_seq, 4), dtype=np.int64)
        txt_ids[:, 3] = np.arange(scale.txt_seq)
        return {
            "hidden_states": rng.standard_normal((1, side * side, 128), dtype=np.float32),
            "encoder_hidden_states": rng.standard_normal((1, scale.txt_seq, joint), dtype=np.float32),
            "timestep": np.array([0.75], dtype=np.float32),
            "img_ids": img_ids,
            "txt_ids": txt_ids,
        }
    return {"latents": rng.standard_normal((1, 128, side, side), dtype=np.float32)}


def torch_callable(
    component: str, module: Any, inputs: Mapping[str, Any], *, device: str, dtype: Any, layers: int | None = None
) -> Callable[[], Any]:
    """A no-argument call that runs `module` on `inputs` the way Flux2KleinPipeline calls it."""
    import torch

    def tensor(name: str) -> Any:
        value = torch.from_numpy(inputs[name]).to(device)
        return value.to(dtype) if value.is_floating_point() else value

    if component == "text_encoder":
        ids, mask, picks = tensor("input_ids"), tensor("attention_mask"), out_layers(layers or 27)

        def run_text() -> Any:
            out = module(input_ids=ids, attention_mask=mask, output_hidden_states=True, use_cache=False)
            return torch.cat([out.hidden_states[k] for k in picks], dim=-1)

        return run_text
    if component == "transformer":
        args = {
            name: tensor(name) for name in ("hidden_states", "encoder_hidden_states", "timestep", "img_ids", "txt_ids")
        }
        return lambda: module(**args, guidance=None, return_dict=False)[0]
    from builder.convert.export_vae import LatentDecoder

    decoder = LatentDecoder(module).to(device=device, dtype=dtype)
    latents = tensor("latents")
    return lambda: decoder(latents)


def time_torch(run: Callable[[], Any], *, device: str, warmup: int, repeats: int) -> dict[str, Any]:
    """Median ms of `run` (CUDA events around each call) and the peak memory allocated while running."""
    import torch

    cuda = device.startswith("cuda")
    with torch.inference_mode():
        for _ in range(warmup):
            run()
        if cuda:
            torch.cuda.synchronize()
        samples = []
        for _ in range(repeats):
            if cuda:
                # torch.cuda.Event's constructor carries no annotations.
                start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
                end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
                start.record()
                run()
                end.record()
                end.synchronize()
                samples.append(start.elapsed_time(end))
            else:
                began = time.perf_counter()
                run()
                samples.append((time.perf_counter() - began) * 1000)
    peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else None
    return {"median_ms": median_ms(samples), "samples_ms": samples, "peak_gib": peak}


def release_torch(device: str) -> None:
    import torch

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
