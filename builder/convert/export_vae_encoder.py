"""Export the AutoencoderKLFlux2 encoder with the pipeline's pre- and post-processing folded in.

Graph contract (builder.repo.manifest.CONTRACT["vae_encoder"]):
    image [batch, 3, H, W] float32 RGB in [0, 1], H and W multiples of 16
    -> image_latents [batch, 128, H/16, W/16] float32 (BN-normalised, not yet packed into tokens)

What runs, in Flux2KleinPipeline's order for a reference image (image_processor.preprocess, then
_encode_vae_image): VaeImageProcessor.normalize's 2x - 1, vae.encode (encoder, quant_conv), the posterior's
mode (retrieve_latents(sample_mode="argmax")), 2x2 patchify, (x - bn.running_mean) / sqrt(bn.running_var + eps).
The output is what the pipeline packs into reference tokens (prepare_image_latents) or, for inpainting,
mixes with the noise: the same tensor both times.
"""

from __future__ import annotations

from typing import Any

import onnx
import torch
from torch import nn

from builder.convert.export_vae import split_mid_block_attention
from builder.convert.onnx_export import export_module

INPUT_NAMES = ("image",)
OUTPUT_NAMES = ("image_latents",)
DYNAMIC_AXES = {
    "image": {0: "batch", 2: "height", 3: "width"},
    "image_latents": {0: "batch", 2: "latent_h", 3: "latent_w"},
}


class ImageEncoder(nn.Module):
    """normalize + vae.encode + posterior mode + patchify + BN normalisation, as one module."""

    bn_std: torch.Tensor
    bn_mean: torch.Tensor

    def __init__(self, vae: Any) -> None:  # an AutoencoderKLFlux2
        super().__init__()
        config = vae.config
        self.encoder = vae.encoder
        self.quant_conv = vae.quant_conv
        channels = vae.bn.running_mean.numel()
        # The same torch expressions as _encode_vae_image, so the folded constants are bit-identical to its own.
        std = torch.sqrt(vae.bn.running_var.view(1, channels, 1, 1) + config.batch_norm_eps)
        self.register_buffer("bn_std", std.detach().clone(), persistent=False)
        self.register_buffer("bn_mean", vae.bn.running_mean.view(1, channels, 1, 1).detach().clone(), persistent=False)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        from diffusers.models.autoencoders.vae import DiagonalGaussianDistribution

        # VaeImageProcessor.normalize, which preprocess applies to a [0, 1] image.
        x = 2.0 * image - 1.0
        # AutoencoderKLFlux2._encode without its tiled path (a memory measure for large images on a GPU in
        # torch; the graph's attention is split into query blocks instead).
        moments = self.encoder(x)
        if self.quant_conv is not None:
            moments = self.quant_conv(moments)
        latents: torch.Tensor = DiagonalGaussianDistribution(moments).mode()
        # Flux2KleinPipeline._patchify_latents: [B, C, h*2, w*2] -> [B, C*4, h, w]
        batch, channels, height, width = latents.shape
        latents = latents.view(batch, channels, height // 2, 2, width // 2, 2)
        latents = latents.permute(0, 1, 3, 5, 2, 4)
        latents = latents.reshape(batch, channels * 4, height // 2, width // 2)
        return (latents - self.bn_mean) / self.bn_std


def export_vae_encoder(vae: Any, *, query_blocks: int | None = None) -> onnx.ModelProto:
    """fp32 ONNX graph of the image encoder (weights in memory; the fp16 variant is derived from it).

    The mid-block attention is split into `query_blocks` blocks along the query axis, as the decoder's
    (builder.convert.export_vae.split_mid_block_attention); None sizes it for 2048^2 px.
    """
    encoder = ImageEncoder(vae.eval()).eval()
    example = torch.zeros(1, 3, 48, 32)  # non-square, so height and width stay separate dynamic dims
    model = export_module(
        encoder,
        (example,),
        component="vae_encoder",
        input_names=INPUT_NAMES,
        output_names=OUTPUT_NAMES,
        dynamic_axes=DYNAMIC_AXES,
    )
    split_mid_block_attention(model, vae.encoder.mid_block, component="vae_encoder", query_blocks=query_blocks)
    return model
