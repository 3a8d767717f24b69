"""How the q4 and q4f16 graphs store their weights: the compact format `convert` writes, and the seed repository's.

Both quantise every large MatMul to 4-bit MatMulNBits blocks; they differ in what stays wider:

| what                                         | seed (kny/FLUX.2-klein-4B-onnx-web)   | compact (convert's default)         |
|----------------------------------------------|---------------------------------------|-------------------------------------|
| text encoder's token embedding               | fp16 table, Gather + Cast             | 4-bit blocks (GatherBlockQuantized) |
| transformer's time embedding, AdaLN          | fp32 MatMuls                          | 4-bit MatMulNBits                   |
| modulations and output AdaLN                 |                                       |                                     |
| float values an fp32-computing graph keeps   | fp32                                  | stored fp16, cast up when onnxruntime |
| (q4 scales, norm weights, the fp32 VAE)      |                                       | creates the session                 |

The bytes each kind takes and the fidelity of each change: docs/model-repository.md ("Weight formats").
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class WeightFormat:
    name: str
    # The token embedding: "fp16" (a table read by Gather, cast up) or "q4" (GatherBlockQuantized, float32 scales).
    embedding: str
    # The transformer's time embedding, AdaLN modulations and output AdaLN: "fp32" MatMuls or "q4" MatMulNBits.
    adaln: str
    # Whether float32 initializers of fp32-computing graphs are stored as fp16 (fp16_storage.store_fp16).
    fp16_storage: bool
    # MatMulNBits block size per component: 32, the block onnxruntime's fastest WebGPU kernels take.
    block_size: dict[str, int] = field(default_factory=lambda: {"text_encoder": 32, "transformer": 32})
    # The GatherBlockQuantized block of the 4-bit token embedding.
    embedding_block: int = 32
    # Node-name fragments of the MatMuls stored at 2 bits instead of 4 (none in the formats `convert` writes;
    # scripts/weight_format_study.py measures smaller ones).
    two_bit: tuple[str, ...] = ()

    def bits(self, node_name: str) -> int:
        return 2 if any(fragment in node_name for fragment in self.two_bit) else 4

    def precision_text(self, component: str, variant: str) -> str:
        """The manifest's human-readable `precision` of one graph written in this format."""
        stored = "; float weights stored in fp16, cast to fp32 when the session is created" if self.fp16_storage else ""
        if variant == "fp32":
            return "fp32" + (stored if component in ("vae_decoder", "vae_encoder") else "")
        if variant == "fp16":
            kept = "; GroupNorm statistics and attention fp32;" if component == "vae_encoder" else ","
            return f"fp16 weights and compute{kept} fp32 I/O"
        block = self.block_size[component]
        if component == "text_encoder":
            wide = (
                "token embedding 4-bit blocks (GatherBlockQuantized, fp32 scales)"
                if self.embedding == "q4"
                else "token embedding fp16"
            )
        elif self.adaln == "q4":
            wide = "modulation and time-embedding MatMuls q4 too, with fp32 activations"
        else:
            wide = "modulation and time-embedding MatMuls, norms, biases fp32"
        if self.two_bit:
            wide += f"; 2-bit MatMulNBits for {', '.join(self.two_bit)}"
        if variant == "q4":
            return f"q4 MatMulNBits (block {block}, symmetric, accuracy_level 4); {wide}{stored}"
        return (
            f"q4 MatMulNBits (block {block}, symmetric, accuracy_level 0) with fp16 activations and scales; "
            f"{wide}; norm statistics, softmax, RoPE fp32; fp32 I/O{stored}"
        )


SEED = WeightFormat("seed", embedding="fp16", adaln="fp32", fp16_storage=False)
COMPACT = WeightFormat("compact", embedding="q4", adaln="q4", fp16_storage=True)
FORMATS = {fmt.name: fmt for fmt in (COMPACT, SEED)}
