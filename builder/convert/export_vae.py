"""Export the AutoencoderKLFlux2 decoder with the pipeline's pre- and post-processing folded in.

Graph contract (builder.repo.manifest.CONTRACT["vae_decoder"]):
    latents [batch, 128, H/16, W/16] float32 (packed tokens reshaped to NCHW, still BN-normalised)
    -> image [batch, 3, H, W] float32 RGB in [0, 1]

What runs, in Flux2KleinPipeline.__call__'s order (pipeline_flux2_klein.py, "# 8. decode"):
  x * sqrt(bn.running_var + eps) + bn.running_mean, 2x2 unpatchify, post_quant_conv, decoder,
  image_processor.postprocess's (x * 0.5 + 0.5).clamp(0, 1).

GroupNorm exports as its decomposition (Reshape, InstanceNormalization, Reshape, Mul, Add), which every
onnxruntime EP runs; `group_norm=True` rewrites each one as onnxruntime's com.microsoft GroupNorm
(builder/convert/group_norm.py), an opt-in variant for measuring, not what `convert` writes.
"""

from __future__ import annotations

from typing import Any

import onnx
import torch
from torch import nn

from builder.convert.group_norm import fuse_group_norms
from builder.convert.onnx_export import export_module

INPUT_NAMES = ("latents",)
OUTPUT_NAMES = ("image",)
DYNAMIC_AXES = {
    "latents": {0: "batch", 2: "latent_h", 3: "latent_w"},
    "image": {0: "batch", 2: "height", 3: "width"},
}


class LatentDecoder(nn.Module):
    """BN de-normalisation + unpatchify + vae.decode + postprocess, as one module."""

    bn_std: torch.Tensor
    bn_mean: torch.Tensor

    def __init__(self, vae: Any) -> None:  # an AutoencoderKLFlux2
        super().__init__()
        config = vae.config
        self.post_quant_conv = vae.post_quant_conv
        self.decoder = vae.decoder
        self.patch = tuple(config.patch_size)
        self.latent_channels = config.latent_channels
        channels = vae.bn.running_mean.numel()
        # The same torch expression as the pipeline, so the folded constants are bit-identical to its std.
        std = torch.sqrt(vae.bn.running_var.view(1, channels, 1, 1) + config.batch_norm_eps)
        self.register_buffer("bn_std", std.detach().clone(), persistent=False)
        self.register_buffer("bn_mean", vae.bn.running_mean.view(1, channels, 1, 1).detach().clone(), persistent=False)

    def forward(self, latents: torch.Tensor) -> torch.Tensor:
        x = latents * self.bn_std + self.bn_mean
        batch, _, height, width = x.shape
        ph, pw = self.patch
        # Flux2KleinPipeline._unpatchify_latents: [B, C*ph*pw, h, w] -> [B, C, h*ph, w*pw]
        x = x.reshape(batch, self.latent_channels, ph, pw, height, width)
        x = x.permute(0, 1, 4, 2, 5, 3)
        x = x.reshape(batch, self.latent_channels, height * ph, width * pw)
        if self.post_quant_conv is not None:
            x = self.post_quant_conv(x)
        image: torch.Tensor = self.decoder(x)
        return (image * 0.5 + 0.5).clamp(0, 1)


def export_vae(vae: Any, *, query_blocks: int | None = None, group_norm: bool = False) -> onnx.ModelProto:
    """fp32 ONNX graph of the latent decoder (weights in memory; the fp16 variant is derived from it).

    The mid-block attention is split into `query_blocks` blocks along the query axis (builder.convert.attention);
    None picks the count that keeps its score buffer within budget at 2048^2 px. `group_norm`: each GroupNorm as
    one com.microsoft GroupNorm (fuse_group_norms), a graph only onnxruntime's GPU EPs run.
    """
    decoder = LatentDecoder(vae.eval()).eval()
    channels = decoder.bn_mean.shape[1]
    example = torch.zeros(1, channels, 3, 2)  # non-square, so height and width stay separate dynamic dims
    model = export_module(
        decoder,
        (example,),
        component="vae_decoder",
        input_names=INPUT_NAMES,
        output_names=OUTPUT_NAMES,
        dynamic_axes=DYNAMIC_AXES,
    )
    split_mid_block_attention(model, vae.decoder.mid_block, component="vae_decoder", query_blocks=query_blocks)
    if group_norm:
        fuse_group_norms(model)
    return model


def split_mid_block_attention(
    model: onnx.ModelProto, mid_block: Any, *, component: str, query_blocks: int | None
) -> None:
    """Split the attention of a VAE mid-block (decoder or encoder: both attend over the 8x-downsampled grid)
    into `query_blocks` query blocks; None picks the count that keeps its score buffer within budget at
    2048^2 px. The count is recorded in the graph (builder.convert.attention) for the manifest."""
    from builder.convert.attention import apply_query_blocks, max_attention_tokens, query_blocks_for

    attentions = [a for a in (mid_block.attentions or []) if a is not None]
    if query_blocks is None:
        heads = max((a.heads for a in attentions), default=1)
        query_blocks = query_blocks_for(heads=heads, tokens=max_attention_tokens(component))
    apply_query_blocks(model, query_blocks=query_blocks if attentions else 1, expected_sites=len(attentions))
