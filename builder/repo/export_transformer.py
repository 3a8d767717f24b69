"""Export one denoising step of Flux2Transformer2DModel to ONNX (batch 1, no CFG, dynamic token counts).

Graph contract (builder.repo.manifest.CONTRACT["transformer"]):
    hidden_states [1, img_seq, 128], encoder_hidden_states [1, txt_seq, joint_dim], timestep [1]
    (= scheduler timestep / 1000; the model multiplies by 1000 inside), img_ids [img_seq, 4] int64,
    txt_ids [txt_seq, 4] int64  ->  noise_pred [1, img_seq, 128]

Three export-only substitutions keep the graph WebGPU-friendly without changing the maths:
  * RoPE tables in float32 (diffusers uses float64 on CPU; WebGPU has no f64; difference ~2e-5),
  * rotary application as x*cos + swap_pairs(x)*signed_sin (a Gather instead of shape-dependent reshapes
    that the TorchScript tracer would freeze to the example's token count),
  * torch.nn.RMSNorm written out as x * rsqrt(mean(x^2) + eps) * w (no ONNX symbolic for aten::rms_norm).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import onnx
import torch
from torch import nn

from builder.repo.onnx_graph import Placement, export_module

INPUT_NAMES = ("hidden_states", "encoder_hidden_states", "timestep", "img_ids", "txt_ids")
OUTPUT_NAMES = ("noise_pred",)
DYNAMIC_AXES = {
    "hidden_states": {1: "img_seq"},
    "encoder_hidden_states": {1: "txt_seq"},
    "img_ids": {0: "img_seq"},
    "txt_ids": {0: "txt_seq"},
    "noise_pred": {1: "img_seq"},
}

# Node-name fragments of the MatMuls that stay fp32 in the q4 graph: the timestep embedding, the AdaLN
# modulations (shared by every block, tiny, and precision-sensitive) and the output AdaLN (norm_out).
FP32_MATMUL_SCOPES = ("/time_guidance_embed/", "_modulation", "/norm_out/")


class Fp32PosEmbed(nn.Module):
    """Flux2PosEmbed computed in float32: per axis, angle = pos * theta^(-2j/dim), each pair repeated twice."""

    axis_of_column: torch.Tensor
    freqs: torch.Tensor

    def __init__(self, theta: float, axes_dim: list[int] | tuple[int, ...]) -> None:
        super().__init__()
        axis_of_column: list[int] = []
        freqs: list[float] = []
        for axis, dim in enumerate(axes_dim):
            # Frequencies are computed in float64 once, here, then rounded to float32 like diffusers' table.
            base = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
            freqs += base.repeat_interleave(2).tolist()  # repeat_interleave_real=True: [f0, f0, f1, f1, ...]
            axis_of_column += [axis] * dim
        self.register_buffer("axis_of_column", torch.tensor(axis_of_column, dtype=torch.int64), persistent=False)
        self.register_buffer("freqs", torch.tensor(freqs, dtype=torch.float64).float(), persistent=False)

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # ids [S, n_axes] int64 -> positions per rotary column [S, head_dim] (Gather on the axis index).
        pos = torch.index_select(ids, 1, self.axis_of_column).float()
        angles = pos * self.freqs  # float32 on purpose: WebGPU has no fp64
        return angles.cos(), angles.sin()


def apply_rotary_emb_export(
    x: torch.Tensor, freqs_cis: tuple[torch.Tensor, torch.Tensor], **_kwargs: Any
) -> torch.Tensor:
    """diffusers.models.embeddings.apply_rotary_emb (use_real, interleaved pairs, sequence_dim=1), reshape-free.

    out[2k] = x[2k] cos - x[2k+1] sin and out[2k+1] = x[2k+1] cos + x[2k] sin, written as
    x * cos + x[perm] * (sign * sin) with perm swapping each pair and sign = (-1, +1, -1, ...). Negating a
    factor is exact, so this equals diffusers' (-x_odd) * sin bit for bit.
    """
    cos, sin = freqs_cis  # [S, D]
    dim = int(cos.shape[-1])
    perm = torch.tensor([k + 1 if k % 2 == 0 else k - 1 for k in range(dim)], dtype=torch.int64)
    sign = torch.tensor([-1.0 if k % 2 == 0 else 1.0 for k in range(dim)], dtype=torch.float32)
    swapped = torch.index_select(x, -1, perm)
    # x: [B, S, H, D]; tables broadcast over batch and heads.
    return x.float() * cos[None, :, None, :] + swapped.float() * (sin * sign)[None, :, None, :]


class ExportRMSNorm(nn.Module):
    """torch.nn.RMSNorm(dim, eps, elementwise_affine=True) as plain ops: x * rsqrt(mean(x^2) + eps) * w."""

    def __init__(self, norm: nn.RMSNorm) -> None:
        super().__init__()
        self.weight = norm.weight
        self.eps = norm.eps if norm.eps is not None else torch.finfo(torch.float32).eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.pow(2).mean(-1, keepdim=True)
        out = x * torch.rsqrt(variance + self.eps)
        return out * self.weight if self.weight is not None else out


def replace_rms_norms(module: nn.Module) -> None:
    for name, child in module.named_children():
        if isinstance(child, nn.RMSNorm):
            setattr(module, name, ExportRMSNorm(child))
        else:
            replace_rms_norms(child)


@contextlib.contextmanager
def export_friendly_rotary() -> Iterator[None]:
    """Swap diffusers' apply_rotary_emb for the reshape-free version while tracing, then restore it."""
    import diffusers.models.transformers.transformer_flux2 as flux2

    original = flux2.apply_rotary_emb
    flux2.apply_rotary_emb = apply_rotary_emb_export
    try:
        yield
    finally:
        flux2.apply_rotary_emb = original


class TransformerStep(nn.Module):
    """One call of Flux2Transformer2DModel exactly as Flux2KleinPipeline makes it (guidance=None)."""

    def __init__(self, transformer: Any) -> None:  # a Flux2Transformer2DModel
        super().__init__()
        self.m = transformer

    def forward(self, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor, timestep: torch.Tensor,
                img_ids: torch.Tensor, txt_ids: torch.Tensor) -> torch.Tensor:
        noise: torch.Tensor = self.m(hidden_states=hidden_states, encoder_hidden_states=encoder_hidden_states,
                                     timestep=timestep, img_ids=img_ids, txt_ids=txt_ids, guidance=None,
                                     return_dict=False)[0]
        return noise


def prepare_for_export(transformer: Any) -> TransformerStep:
    """Apply the export substitutions in place (the module is discarded after export)."""
    config = transformer.config
    transformer.pos_embed = Fp32PosEmbed(config.rope_theta, list(config.axes_dims_rope))
    replace_rms_norms(transformer)
    return TransformerStep(transformer.eval())


def export_transformer(transformer: Any, *, query_blocks: int | None = None,
                       placement: Placement | None = None) -> onnx.ModelProto:
    """ONNX graph of one denoising step, weights attached by `placement` (default fp32; see export_module).

    The joint attention of every block is split into `query_blocks` blocks along the query axis
    (builder.repo.attention); None picks the count that keeps each score buffer within budget at 2048^2 px.
    """
    from builder.repo.attention import apply_query_blocks, max_attention_tokens, query_blocks_for, record_heads

    config = transformer.config
    if query_blocks is None:
        query_blocks = query_blocks_for(heads=config.num_attention_heads, tokens=max_attention_tokens("transformer"))
    sites = config.num_layers + config.num_single_layers
    step = prepare_for_export(transformer)
    # Example inputs: distinct img/txt lengths so no two dynamic dims get confused by the tracer.
    img_seq, txt_seq = 6, 5
    args = (
        torch.zeros(1, img_seq, config.in_channels),
        torch.zeros(1, txt_seq, config.joint_attention_dim),
        torch.tensor([0.5]),
        torch.zeros(img_seq, 4, dtype=torch.int64),
        torch.zeros(txt_seq, 4, dtype=torch.int64),
    )
    with export_friendly_rotary():
        model = export_module(step, args, component="transformer", input_names=INPUT_NAMES,
                              output_names=OUTPUT_NAMES, dynamic_axes=DYNAMIC_AXES, placement=placement)
    apply_query_blocks(model, query_blocks=query_blocks, expected_sites=sites)
    record_heads(model, config.num_attention_heads)
    return model


def q4_excluded_nodes(model: onnx.ModelProto) -> list[str]:
    """Names of the MatMuls that must stay fp32 in the q4 transformer (see FP32_MATMUL_SCOPES)."""
    return [node.name for node in model.graph.node
            if node.op_type == "MatMul" and any(scope in node.name for scope in FP32_MATMUL_SCOPES)]
