"""Export the Qwen3 text encoder as the prompt-embedding graph Flux2KleinPipeline needs.

Graph contract (builder.repo.manifest.CONTRACT["text_encoder"]):
    input_ids [batch, seq] int64, attention_mask [batch, seq] int64 (1 = token, 0 = pad)
    -> prompt_embeds [batch, seq, 3 * hidden] float32 = concat(hidden_states[9], [18], [27]) on the last dim

`hidden_states[k]` in transformers is the residual stream after decoder layer k (1-based), so only the
first 27 layers run; the final RMSNorm and lm_head are dropped. As in transformers: position ids are
arange(seq) (not derived from the mask), and a query attends to key j when j <= query AND mask[j] == 1.

Every Qwen3RMSNorm exports as one SimplifiedLayerNormalization and each rotary embedding as one
RotaryEmbedding (builder.convert.fused_ops), with the same maths.
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

# Flux2KleinPipeline.__call__ default `text_encoder_out_layers`.
OUT_LAYERS = (9, 18, 27)

INPUT_NAMES = ("input_ids", "attention_mask")
OUTPUT_NAMES = ("prompt_embeds",)
DYNAMIC_AXES = {
    "input_ids": {0: "batch", 1: "seq"},
    "attention_mask": {0: "batch", 1: "seq"},
    "prompt_embeds": {0: "batch", 1: "seq"},
}


class PromptEmbedder(nn.Module):
    """Qwen3ForCausalLM truncated to max(OUT_LAYERS) layers, returning the concatenated hidden states."""

    def __init__(self, causal_lm: Any, out_layers: tuple[int, ...] = OUT_LAYERS) -> None:
        super().__init__()
        model = causal_lm.model
        if len(model.layers) < max(out_layers):
            raise ValueError(
                f"The text encoder has {len(model.layers)} layers; hidden state {max(out_layers)} needs more."
            )
        self.embed_tokens = model.embed_tokens
        self.layers = nn.ModuleList(list(model.layers)[: max(out_layers)])
        self.rotary_emb = model.rotary_emb
        self.out_layers = out_layers

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.embed_tokens(input_ids)  # [B, L, D]
        seq = torch.arange(input_ids.shape[1], dtype=torch.int64)
        position_ids = seq.unsqueeze(0)  # [1, L]
        position_embeddings = self.rotary_emb(hidden, position_ids)
        # Causal AND key-padding mask, as an additive float mask for eager attention: [B, 1, L(query), L(key)].
        causal = seq[None, :] <= seq[:, None]
        allowed = causal[None, None, :, :] & attention_mask.bool()[:, None, None, :]
        mask = torch.where(allowed, 0.0, torch.finfo(torch.float32).min)
        outputs = []
        for index, layer in enumerate(self.layers, start=1):
            hidden = layer(
                hidden, attention_mask=mask, position_ids=position_ids, position_embeddings=position_embeddings
            )
            if index in self.out_layers:
                outputs.append(hidden)
        return torch.cat(outputs, dim=-1)  # [B, L, 3 * D]


class ExportQwen3RMSNorm(nn.Module):
    """Qwen3RMSNorm as one fused op (builder.convert.fused_ops.RMSNormOp; the export runs in float32, so the
    module's casts to float32 and back are no-ops)."""

    def __init__(self, norm: Any) -> None:
        super().__init__()
        self.weight = norm.weight
        self.eps = float(norm.variance_epsilon)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


def apply_rotary_pos_emb_export(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, _unsqueeze_dim: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' apply_rotary_pos_emb (rotate-half pairs) for q, k [B, heads, L, D], as one RotaryEmbedding
    each. transformers' tables [1, L, D] hold each pair's value in both halves; RotaryEmbedding takes one per
    pair, [L, D/2] (the slices are the same in every layer, and onnxruntime merges them)."""
    half = int(cos.shape[-1]) // 2
    cos, sin = cos[0, :, :half], sin[0, :, :half]
    return (rotate(q, cos, sin, heads=0, interleaved=False), rotate(k, cos, sin, heads=0, interleaved=False))


@contextlib.contextmanager
def fused_ops_while_tracing(module: nn.Module) -> Iterator[None]:
    """While tracing `module`: its Qwen3RMSNorms as ExportQwen3RMSNorm and transformers' Qwen3
    apply_rotary_pos_emb as the one-op version. Both are restored afterwards: the caller's model is unchanged
    (the bench times the same model in PyTorch after exporting it)."""
    import transformers.models.qwen3.modeling_qwen3 as qwen3

    swapped: list[tuple[nn.Module, str, nn.Module]] = []
    for parent in module.modules():
        for name, child in parent.named_children():
            if type(child).__name__ == "Qwen3RMSNorm":
                swapped.append((parent, name, child))
    original = qwen3.apply_rotary_pos_emb
    for parent, name, child in swapped:
        setattr(parent, name, ExportQwen3RMSNorm(child))
    qwen3.apply_rotary_pos_emb = apply_rotary_pos_emb_export
    try:
        yield
    finally:
        qwen3.apply_rotary_pos_emb = original
        for parent, name, child in swapped:
            setattr(parent, name, child)


def use_eager_attention(causal_lm: Any) -> None:
    """Eager attention exports as MatMul + Softmax with our additive mask (SDPA with GQA does not export)."""
    if hasattr(causal_lm, "set_attn_implementation"):
        causal_lm.set_attn_implementation("eager")
    else:  # older transformers
        causal_lm.config._attn_implementation = "eager"


def export_text_encoder(
    causal_lm: Any, *, placement: Placement | None = None, out_layers: tuple[int, ...] = OUT_LAYERS
) -> onnx.ModelProto:
    """ONNX graph of the prompt embedder, weights attached by `placement` (default fp32; see export_module).
    `out_layers`: the hidden states it concatenates (the bench exports shorter chains)."""
    use_eager_attention(causal_lm)
    embedder = PromptEmbedder(causal_lm.eval(), out_layers).eval()
    # Example: 2 prompts of 7 tokens, the second right-padded, so the mask path is traced with real zeros.
    input_ids = torch.tensor([[1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 0, 0, 0, 0]], dtype=torch.int64)
    attention_mask = (input_ids != 0).to(torch.int64)
    with fused_ops_while_tracing(embedder):
        return export_module(
            embedder,
            (input_ids, attention_mask),
            component="text_encoder",
            input_names=INPUT_NAMES,
            output_names=OUTPUT_NAMES,
            dynamic_axes=DYNAMIC_AXES,
            placement=placement,
        )


def embedding_table_name(model: onnx.ModelProto) -> tuple[str, str]:
    """(node name, table name) of the token embedding: the Gather (or GatherBlockQuantized) fed by `input_ids`
    (works on the weightless graph too, where the table is still a graph input)."""
    for node in model.graph.node:
        if node.op_type in ("Gather", "GatherBlockQuantized") and node.input[1] == "input_ids":
            return node.name, node.input[0]
    raise ValueError("The text-encoder graph has no Gather of an embedding table by input_ids.")
