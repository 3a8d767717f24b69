"""onnxruntime's fused ops as torch functions: each computes its maths in torch and exports as one node.

The TorchScript tracer writes RMSNorm as pow / mean / add / sqrt / div / mul / mul and rotary embeddings as
gathers or slices, negations, multiplications and additions; on onnxruntime's WebGPU EP each of those is a
kernel over the whole activation (with the q4f16 graph's fp32 islands, a Cast on either side), and that glue is
a large share of a transformer step. These functions export as the ops onnxruntime fuses them into, both of
which onnxruntime-web 1.30 runs on WebGPU and on the CPU:

  RMSNormOp        -> SimplifiedLayerNormalization (default domain, float32 statistics: stash_type 1;
                      WebGPU: core/providers/webgpu/nn/layer_norm.cc)
  RotaryEmbedding  -> com.microsoft.RotaryEmbedding, interleaved (Flux) or rotate-half (Qwen3) pairs
                      (WebGPU: contrib_ops/webgpu/bert/rotary_embedding.cc)

The fused graphs step faster (figures in docs/performance.md). The norm kernel is the one weak spot:
onnxruntime's WebGPU LayerNorm program splits a row across a 64-thread workgroup, so a 128-wide q/k-norm row is
left to one thread and the fused norm costs more than the decomposed chain; the casts and rotary glue the fusion
removes outweigh that.

Their forward passes compute the same products and sums, in the same order, as the diffusers and
transformers code they replace, so the traced values are unchanged.
"""

from __future__ import annotations

from typing import Any

import torch


class RMSNormOp(torch.autograd.Function):
    """x * rsqrt(mean(x^2) + eps) * w over the last axis. builder.convert.onnx_checks registers the exported op's
    schema with the onnx checker, which does not know onnxruntime's ops of the default domain."""

    @staticmethod
    def forward(_ctx: Any, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight

    @staticmethod
    def symbolic(g: Any, x: Any, weight: Any, eps: float) -> Any:
        return _like(
            g.op("SimplifiedLayerNormalization", x, weight, axis_i=-1, epsilon_f=eps, stash_type_i=1), x, dynamic=(0, 1)
        )


class RotaryEmbedding(torch.autograd.Function):
    """Rotate pairs of x by per-token angles (tables cos, sin [S, D/2], one column per pair).

    interleaved (Flux): x [B, S, heads * D], pairs (2k, 2k+1); out[2k] = x[2k] cos_k - x[2k+1] sin_k,
    out[2k+1] = x[2k+1] cos_k + x[2k] sin_k. Rotate-half (Qwen3): x [B, heads, S, D], pairs (k, k + D/2).
    Negating a factor is exact, so these equal `x * cos + rotate(x) * sin` of diffusers and transformers.
    `offset` [1] is onnxruntime's position_ids in its offset form: token s reads table row offset + s; the
    tables are already per token, so it is 0 (a constant: no Range op, nothing placed on the CPU).
    """

    @staticmethod
    def forward(
        _ctx: Any,
        x: torch.Tensor,
        _offset: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        heads: int,
        interleaved: bool,
    ) -> torch.Tensor:
        if interleaved:
            pairs = x.reshape(*x.shape[:-1], heads, -1, 2)  # [B, S, H, D/2, 2]
            real, imag = pairs[..., 0], pairs[..., 1]
            cos, sin = cos[None, :, None, :], sin[None, :, None, :]
            return torch.stack([real * cos - imag * sin, imag * cos + real * sin], dim=-1).flatten(2)
        first, second = x.chunk(2, dim=-1)  # [B, H, S, D/2] each
        return torch.cat([first * cos - second * sin, second * cos + first * sin], dim=-1)

    @staticmethod
    def symbolic(g: Any, x: Any, offset: Any, cos: Any, sin: Any, heads: int, interleaved: bool) -> Any:
        # num_heads tells a 3D input's head size; a 4D input [B, heads, S, D] carries it in its shape.
        out = g.op(
            "com.microsoft::RotaryEmbedding",
            x,
            offset,
            cos,
            sin,
            interleaved_i=int(interleaved),
            num_heads_i=heads if interleaved else 0,
        )
        # Flux's output stays untyped: typed, it would let the exporter freeze the joint token count that
        # diffusers' split_with_sizes reads back from the attention output (the width is known downstream
        # anyway). Qwen3's needs its type, or the prompt embedding's width would be unknown.
        return out if interleaved else _like(out, x, dynamic=(0, 2))


def _like(out: Any, x: Any, *, dynamic: tuple[int, ...]) -> Any:
    """Give an exported op's output the type of its input `x`, which the exporter cannot infer for an op it
    does not know: same dtype and rank, the fixed dims (widths, heads) kept, and the `dynamic` ones (batch,
    tokens) left unknown rather than frozen to the example's sizes."""
    sizes = x.type().varyingSizes()  # None where the exporter knows no shape; None per unknown dim
    if sizes is None:
        return out.setType(x.type())
    return out.setType(x.type().with_sizes([None if axis in dynamic else size for axis, size in enumerate(sizes)]))


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNormOp.apply, typed."""
    out: torch.Tensor = RMSNormOp.apply(x, weight, eps)  # type: ignore[no-untyped-call]  # torch leaves apply untyped
    return out


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, heads: int, interleaved: bool) -> torch.Tensor:
    """RotaryEmbedding.apply with the constant offset 0, typed."""
    offset = torch.zeros(1, dtype=torch.int64)
    out: torch.Tensor = RotaryEmbedding.apply(x, offset, cos, sin, heads, interleaved)  # type: ignore[no-untyped-call]
    return out
