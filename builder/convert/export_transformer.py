"""Export one denoising step of Flux2Transformer2DModel to ONNX (batch 1, no CFG, dynamic token counts).

Graph contract (builder.repo.manifest.CONTRACT["transformer"]):
    hidden_states [1, img_seq, 128], encoder_hidden_states [1, txt_seq, joint_dim], timestep [1]
    (= scheduler timestep / 1000; the model multiplies by 1000 inside), img_ids [img_seq, 4] int64,
    txt_ids [txt_seq, 4] int64  ->  noise_pred [1, img_seq, 128]

Export-only substitutions make the graph fast on onnxruntime's WebGPU EP without changing the maths; each
turns a chain of small kernels into one (the glue between the matrix kernels is a large share of a step; figures
in docs/performance.md):
  * RoPE tables in float32 (diffusers uses float64 on CPU; WebGPU has no f64; difference ~2e-5), one angle
    per rotated pair ([S, head_dim / 2]),
  * rotary application as one com.microsoft.RotaryEmbedding (interleaved pairs, float32) instead of the
    gather / multiply / add / cast chain the tracer writes for diffusers' apply_rotary_emb,
  * torch.nn.RMSNorm as one SimplifiedLayerNormalization (onnxruntime's RMSNorm op, float32 statistics)
    instead of pow / mean / add / sqrt / div / mul / mul (aten::rms_norm has no ONNX symbolic anyway),
  * the single-stream blocks' fused projection and every SwiGLU cut with one Split instead of the tracer's
    chains of shape-computed Slices (q, k, v, gate and up straight out of one Split per block).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import onnx
import torch
from torch import nn

from builder.convert.fused_ops import rms_norm, rotate
from builder.convert.onnx_export import Placement, export_module

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
    """Flux2PosEmbed computed in float32, one column per rotated pair: angle = pos * theta^(-2j/dim) per axis.

    diffusers repeats each pair's cos/sin twice (repeat_interleave_real=True) to multiply whole vectors;
    RotaryEmbedding takes one value per pair, so the table stays half as wide.
    """

    axis_of_column: torch.Tensor
    freqs: torch.Tensor

    def __init__(self, theta: float, axes_dim: list[int] | tuple[int, ...]) -> None:
        super().__init__()
        axis_of_column: list[int] = []
        freqs: list[float] = []
        for axis, dim in enumerate(axes_dim):
            # Frequencies are computed in float64 once, here, then rounded to float32 like diffusers' table.
            freqs += (1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))).tolist()
            axis_of_column += [axis] * (dim // 2)
        self.register_buffer("axis_of_column", torch.tensor(axis_of_column, dtype=torch.int64), persistent=False)
        self.register_buffer("freqs", torch.tensor(freqs, dtype=torch.float64).float(), persistent=False)

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # ids [S, n_axes] int64 -> positions per rotated pair [S, head_dim / 2] (Gather on the axis index).
        pos = torch.index_select(ids, 1, self.axis_of_column).float()
        angles = pos * self.freqs  # float32 on purpose: WebGPU has no fp64
        return angles.cos(), angles.sin()


def apply_rotary_emb_export(
    x: torch.Tensor, freqs_cis: tuple[torch.Tensor, torch.Tensor], **_kwargs: Any
) -> torch.Tensor:
    """diffusers.models.embeddings.apply_rotary_emb (use_real, interleaved pairs, sequence_dim=1) as one op.

    x [B, S, H, D] float32 (the export runs in float32: no Cast, which the q4f16 rewrite would turn into an
    fp16 round trip between the norm and the rotation) -> [B, S, H, D], with Fp32PosEmbed's tables [S, D/2].
    """
    cos, sin = freqs_cis
    heads = int(x.shape[2])
    rotated = rotate(x.flatten(2), cos, sin, heads=heads, interleaved=True)
    return rotated.reshape(*rotated.shape[:-1], heads, -1)


class ExportRMSNorm(nn.Module):
    """torch.nn.RMSNorm(dim, eps, elementwise_affine=True) as one fused op (builder.convert.fused_ops.RMSNormOp)."""

    def __init__(self, norm: nn.RMSNorm) -> None:
        super().__init__()
        if norm.weight is None:
            raise ValueError("RMSNorm without a weight: FLUX.2 [klein] has none (elementwise_affine=True).")
        self.weight = norm.weight
        self.eps = norm.eps if norm.eps is not None else torch.finfo(torch.float32).eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, float(self.eps))


def replace_rms_norms(module: nn.Module) -> None:
    for name, child in module.named_children():
        if isinstance(child, nn.RMSNorm):
            setattr(module, name, ExportRMSNorm(child))
        else:
            replace_rms_norms(child)


def swiglu_export(_self: Any, x: torch.Tensor) -> torch.Tensor:
    """diffusers' Flux2SwiGLU.forward with one Split (sizes fixed at export) instead of two traced Slices."""
    half = int(x.shape[-1]) // 2
    gate, up = torch.split(x, [half, half], dim=-1)
    return torch.nn.functional.silu(gate) * up


class ParallelSelfAttnExport:
    """diffusers' Flux2ParallelSelfAttnProcessor (the single-stream blocks) with the fused projection cut by one
    Split into q, k, v, gate and up (the original splits qkv from mlp, then chunks each: seven Slices)."""

    def __call__(
        self,
        attn: Any,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        image_rotary_emb: Any = None,
    ) -> torch.Tensor:
        from diffusers.models.attention_dispatch import dispatch_attention_fn

        inner, mlp = attn.inner_dim, attn.mlp_hidden_dim
        if attn.mlp_mult_factor != 2:
            raise ValueError(f"Single-stream block with mlp_mult_factor {attn.mlp_mult_factor}: SwiGLU needs 2.")
        query, key, value, gate, up = torch.split(
            attn.to_qkv_mlp_proj(hidden_states), [inner, inner, inner, mlp, mlp], dim=-1
        )
        query, key, value = (t.reshape(*t.shape[:-1], -1, attn.head_dim) for t in (query, key, value))
        query, key = attn.norm_q(query), attn.norm_k(key)
        if image_rotary_emb is not None:
            query = apply_rotary_emb_export(query, image_rotary_emb)
            key = apply_rotary_emb_export(key, image_rotary_emb)
        hidden_states = dispatch_attention_fn(query, key, value, attn_mask=attention_mask)
        hidden_states = hidden_states.flatten(2, 3).to(query.dtype)
        mlp_hidden_states = attn.mlp_act_fn.gate_fn(gate) * up
        out: torch.Tensor = attn.to_out(torch.cat([hidden_states, mlp_hidden_states], dim=-1))
        return out


@contextlib.contextmanager
def fused_ops_while_tracing() -> Iterator[None]:
    """Swap diffusers' apply_rotary_emb and Flux2SwiGLU.forward for the export versions while tracing, then
    restore them."""
    import diffusers.models.transformers.transformer_flux2 as flux2

    original_rotary, original_swiglu = flux2.apply_rotary_emb, flux2.Flux2SwiGLU.forward
    flux2.apply_rotary_emb = apply_rotary_emb_export
    flux2.Flux2SwiGLU.forward = swiglu_export
    try:
        yield
    finally:
        flux2.apply_rotary_emb, flux2.Flux2SwiGLU.forward = original_rotary, original_swiglu


class TransformerStep(nn.Module):
    """One call of Flux2Transformer2DModel exactly as Flux2KleinPipeline makes it (guidance=None)."""

    def __init__(self, transformer: Any) -> None:  # a Flux2Transformer2DModel
        super().__init__()
        self.m = transformer

    def forward(
        self,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        timestep: torch.Tensor,
        img_ids: torch.Tensor,
        txt_ids: torch.Tensor,
    ) -> torch.Tensor:
        noise: torch.Tensor = self.m(
            hidden_states=hidden_states,
            encoder_hidden_states=encoder_hidden_states,
            timestep=timestep,
            img_ids=img_ids,
            txt_ids=txt_ids,
            guidance=None,
            return_dict=False,
        )[0]
        return noise


def prepare_for_export(transformer: Any) -> TransformerStep:
    """Apply the export substitutions in place (the module is discarded after export)."""
    config = transformer.config
    transformer.pos_embed = Fp32PosEmbed(config.rope_theta, list(config.axes_dims_rope))
    replace_rms_norms(transformer)
    for block in transformer.single_transformer_blocks:
        block.attn.processor = ParallelSelfAttnExport()
    return TransformerStep(transformer.eval())


def export_transformer(
    transformer: Any, *, query_blocks: int | None = None, placement: Placement | None = None
) -> onnx.ModelProto:
    """ONNX graph of one denoising step, weights attached by `placement` (default fp32; see export_module).

    The joint attention of every block is split into `query_blocks` blocks along the query axis
    (builder.convert.attention); None picks the count that keeps each score buffer within budget at 2048^2 px.
    """
    from builder.convert.attention import apply_query_blocks, max_attention_tokens, query_blocks_for, record_heads

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
    with fused_ops_while_tracing():
        model = export_module(
            step,
            args,
            component="transformer",
            input_names=INPUT_NAMES,
            output_names=OUTPUT_NAMES,
            dynamic_axes=DYNAMIC_AXES,
            placement=placement,
        )
    apply_query_blocks(model, query_blocks=query_blocks, expected_sites=sites)
    record_heads(model, config.num_attention_heads)
    return model


def q4_excluded_nodes(model: onnx.ModelProto) -> list[str]:
    """Names of the MatMuls that must stay fp32 in the q4 transformer (see FP32_MATMUL_SCOPES)."""
    return [
        node.name
        for node in model.graph.node
        if node.op_type == "MatMul" and any(scope in node.name for scope in FP32_MATMUL_SCOPES)
    ]
