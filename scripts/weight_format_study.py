"""The weight formats of the q4 / q4f16 graphs: a repository's bytes by tensor kind, and the fidelity of each format.

    python scripts/weight_format_study.py bytes REPO [--variant q4f16]   bytes per graph and tensor kind
    python scripts/weight_format_study.py tiny TINY WORK                  the tiny model, every format
    python scripts/weight_format_study.py full                            full-width tensors, on the CPU

`bytes` reads only the graphs' headers (dtypes, shapes, external-data lengths), so it runs on the full-size repo in
a second. Each initializer is classed by the op that reads it (through the Cast of a weight stored in fp16) and
the input it feeds: "MatMulNBits B uint8", "GatherBlockQuantized scales float16", "MatMul B float32", ...

`tiny TINY WORK`: TINY is a `klein-web make-tiny` folder. Its diffusers model is converted (--precision q4f16) in
each weight format of builder.convert.weight_format into WORK/<format> (kept: a second run reuses them), then every
text encoder and transformer graph is compared with the fp32 graph of TINY/fp32 (relative L2 and max |error| of
its output on the same inputs), and whole images (CPU onnxruntime, builder.pipeline.reference) with the seed
format's q4f16 image, today's fast path, and with the fp32 image (PSNR, dB).

`full`: what the tiny model cannot show, at the real klein-4B widths without running the 4B text encoder in fp32:
the token-embedding table [151,936 x 2,560] stored as fp16 and as 4-bit blocks, quantised and measured in
slices of rows so the table is never whole in memory (three value distributions: transformers' initialisation
as in a `make-tiny --full-size` repo, heavy-tailed rows, outlier columns); and the transformer's time-embedding
and AdaLN layers at their real shapes, fp32 against 4-bit MatMulNBits on onnxruntime's CPU kernels, fed the
inputs they get in a 4-step 512x512 and 1024x1024 generation (silu of the time embedding of each timestep).
About 2 GB of memory and a few minutes on two cores.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import math
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from builder.convert.fp16_storage import STORED_FP16
from builder.convert.onnx_graph import IR_VERSION, MS_DOMAIN, tensor_bytes
from builder.convert.quantize import quantize_blocks, quantize_matmul
from builder.repo import manifest

# Input names of the ops whose initializers the byte table classes (other ops: "input <i>").
INPUT_ROLES = {
    "MatMulNBits": ("A", "B", "scales", "zero_points", "g_idx", "bias"),
    "GatherBlockQuantized": ("data", "indices", "scales", "zero_points"),
    "Gather": ("data", "indices"),
    "MatMul": ("A", "B"),
    "Gemm": ("A", "B", "C"),
    "Conv": ("X", "W", "B"),
}


# ---------------------------------------------------------------------------------------------------------------
# bytes


def bytes_by_kind(graph_file: Path) -> dict[str, int]:
    """Bytes of each kind of initializer of one graph (external or inline), plus the graph file's own bytes
    beyond its inline tensors ("graph structure")."""
    model = onnx.load(str(graph_file), load_external_data=False)
    readers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in model.graph.node:
        for name in node.input:
            readers[name].append(node)
    totals: dict[str, int] = defaultdict(int)
    inline = 0
    for tensor in model.graph.initializer:
        size = tensor_bytes(tensor)
        if tensor.data_location != TensorProto.EXTERNAL:
            inline += size
        totals[tensor_kind(tensor, readers)] += size
    totals["graph structure"] = graph_file.stat().st_size - inline
    return dict(totals)


def tensor_kind(tensor: TensorProto, readers: dict[str, list[onnx.NodeProto]]) -> str:
    dtype = TensorProto.DataType.Name(tensor.data_type).lower()
    name = tensor.name
    users = readers.get(name, [])
    if len(users) == 1 and users[0].op_type == "Cast" and name.endswith(STORED_FP16):
        users = readers.get(users[0].output[0], [])  # stored in fp16 for an fp32 op: class it by that op
    if not users:
        return f"unread {dtype}"
    node = users[0]
    index = list(node.input).index(name) if name in node.input else list(node.input).index(name[: -len(STORED_FP16)])
    roles = INPUT_ROLES.get(node.op_type, ())
    role = roles[index] if index < len(roles) else f"input {index}"
    return f"{node.op_type} {role} {dtype}"


def repo_bytes(repo: Path, variant: str | None) -> None:
    """Print the bytes of each main graph of REPO (size-class graphs share their weights) by tensor kind."""
    entries = [
        graph
        for graph in manifest.load(repo).graphs
        if ".qb" not in graph.path and (variant is None or graph.variant in (variant, "fp16", "fp32"))
    ]
    print(f"# {repo} ({datetime.date.today().isoformat()})\n")
    print("| graph | tensor kind | bytes | GB |\n|---|---|---|---|")
    for graph in entries:
        kinds = bytes_by_kind(repo / graph.path)
        for kind, size in sorted(kinds.items(), key=lambda item: -item[1]):
            print(f"| {graph.component}_{graph.variant} | {kind} | {size:,} | {size / 1e9:.3f} |")
        print(
            f"| {graph.component}_{graph.variant} | **total** | {sum(kinds.values()):,} | "
            f"{sum(kinds.values()) / 1e9:.3f} |"
        )


# ---------------------------------------------------------------------------------------------------------------
# formats: the two `convert` writes, and smaller ones this study measures


def studied_formats() -> dict[str, Any]:
    """The formats the study compares: convert's two; the compact format with blocks of 64 in the text encoder
    (under 4.0 GB); then smaller candidates for a <= 3.3 GB set (blocks of 128: 4.125 bits a weight against 4.5;
    2-bit MatMulNBits for the text encoder's MLPs, or for the transformer's feed-forward layers and single-stream
    output projections)."""
    from dataclasses import replace

    from builder.convert.weight_format import COMPACT, FORMATS

    blocks128 = {"text_encoder": 128, "transformer": 128}
    return {
        **FORMATS,
        "compact-te64": replace(COMPACT, name="compact-te64", block_size={"text_encoder": 64, "transformer": 32}),
        "compact-b128": replace(COMPACT, name="compact-b128", block_size=blocks128, embedding_block=128),
        "te-mlp-2bit": replace(
            COMPACT, name="te-mlp-2bit", block_size=blocks128, embedding_block=128, two_bit=("/mlp/",)
        ),
        "tr-ff-2bit": replace(
            COMPACT,
            name="tr-ff-2bit",
            block_size=blocks128,
            embedding_block=128,
            two_bit=("/ff/", "/ff_context/", "/attn/to_out/"),
        ),
    }


# klein-4B's weights by (graph, node name, K, N): the MatMuls of the 27 text-encoder layers the graph keeps and of
# the transformer (diffusers Flux2Transformer2DModel, 5 double- and 20 single-stream blocks), the token embedding.
TEXT_LAYERS, DOUBLE_BLOCKS, SINGLE_BLOCKS = 27, 5, 20
HIDDEN, MLP_HIDDEN = 3_072, 9_216


def full_size_weights() -> list[tuple[str, str, int, int]]:
    layer = [
        ("self_attn/q_proj", 2560, 4096),
        ("self_attn/k_proj", 2560, 1024),
        ("self_attn/v_proj", 2560, 1024),
        ("self_attn/o_proj", 4096, 2560),
        ("mlp/gate_proj", 2560, 9728),
        ("mlp/up_proj", 2560, 9728),
        ("mlp/down_proj", 9728, 2560),
    ]
    weights = [("text_encoder", f"/layers.{i}/{name}/MatMul", k, n) for i in range(TEXT_LAYERS) for name, k, n in layer]
    weights.append(("text_encoder", "embed_tokens", VOCAB, TEXT_WIDTH))
    h = HIDDEN
    weights += [
        ("transformer", name, k, n)
        for name, k, n in (
            ("/m/time_guidance_embed/timestep_embedder/linear_1/MatMul", TIME_CHANNELS, h),
            ("/m/time_guidance_embed/timestep_embedder/linear_2/MatMul", h, h),
            ("/m/double_stream_modulation_img/linear/MatMul", h, 6 * h),
            ("/m/double_stream_modulation_txt/linear/MatMul", h, 6 * h),
            ("/m/single_stream_modulation/linear/MatMul", h, 3 * h),
            ("/m/x_embedder/MatMul", 128, h),
            ("/m/context_embedder/MatMul", 7680, h),
            ("/m/norm_out/linear/MatMul", h, 2 * h),
            ("/m/proj_out/MatMul", h, 128),
        )
    ]
    double = [
        ("attn/to_q", h, h),
        ("attn/to_k", h, h),
        ("attn/to_v", h, h),
        ("attn/add_q_proj", h, h),
        ("attn/add_k_proj", h, h),
        ("attn/add_v_proj", h, h),
        ("attn/to_out.0", h, h),
        ("attn/to_add_out", h, h),
        ("ff/linear_in", h, 2 * MLP_HIDDEN),
        ("ff/linear_out", MLP_HIDDEN, h),
        ("ff_context/linear_in", h, 2 * MLP_HIDDEN),
        ("ff_context/linear_out", MLP_HIDDEN, h),
    ]
    weights += [
        ("transformer", f"/m/transformer_blocks.{i}/{name}/MatMul", k, n)
        for i in range(DOUBLE_BLOCKS)
        for name, k, n in double
    ]
    single = [("attn/to_qkv_mlp_proj", h, 3 * h + 2 * MLP_HIDDEN), ("attn/to_out", h + MLP_HIDDEN, h)]
    weights += [
        ("transformer", f"/m/single_transformer_blocks.{i}/{name}/MatMul", k, n)
        for i in range(SINGLE_BLOCKS)
        for name, k, n in single
    ]
    return weights


# The VAE decoder's bytes as convert writes them for klein-4B (docs/performance.md, "Converting"): fp16, and the
# fp32 graph with its weights stored in fp16 (compact) or fp32 (seed).
VAE_DECODER_BYTES = {"fp16": 98_000_000, "fp32 stored fp16": 99_000_000, "fp32": 197_000_000}
TOKENIZER_BYTES = 11_400_000


def full_size_set_bytes(fmt: Any, variant: str) -> dict[str, int]:
    """Expected bytes of the full-size q4 or q4f16 set (text encoder, transformer, VAE decoder, tokenizer) in
    format `fmt`, from klein-4B's shapes: MatMulNBits packing plus one scale per block (fp16 on disk in q4f16
    graphs and wherever fmt stores fp16; fp32 otherwise), the embedding as fmt stores it. Norm weights (under
    1 MB in all) are left out."""
    totals: dict[str, int] = defaultdict(int)
    fp16_scales = variant == "q4f16" or fmt.fp16_storage
    for graph, name, k, n in full_size_weights():
        adaln = any(s in name for s in ("time_guidance_embed", "_modulation", "norm_out"))
        if name == "embed_tokens":
            if fmt.embedding == "fp16":
                totals[graph] += k * n * 2
            else:
                totals[graph] += k * n // 2 + k * -(-n // fmt.embedding_block) * (2 if fmt.fp16_storage else 4)
        elif adaln and fmt.adaln == "fp32":
            totals[graph] += k * n * 4
        else:
            block, bits = fmt.block_size[graph], fmt.bits(name)
            blocks = -(-k // block)
            scale_bytes = 2 if fp16_scales and not (adaln and not fmt.fp16_storage) else 4
            totals[graph] += n * blocks * (block * bits // 8) + n * blocks * scale_bytes
    vae = "fp16" if variant == "q4f16" else ("fp32 stored fp16" if fmt.fp16_storage else "fp32")
    totals["vae_decoder"] = VAE_DECODER_BYTES[vae]
    totals["tokenizer"] = TOKENIZER_BYTES
    return dict(totals)


def sizes_table() -> None:
    print("\n## Expected full-size sets (klein-4B shapes; GB = 10^9 bytes)\n")
    print(row("format", "set", "text encoder", "transformer", "VAE decoder", "total"))
    print(row(*["---"] * 6))
    for name, fmt in studied_formats().items():
        for variant in ("q4f16", "q4"):
            parts = full_size_set_bytes(fmt, variant)
            vae = "fp16" if variant == "q4f16" else "fp32"
            print(
                row(
                    name,
                    f"{variant} + {vae} VAE",
                    *(f"{parts[key] / 1e9:.3f}" for key in ("text_encoder", "transformer", "vae_decoder")),
                    f"**{sum(parts.values()) / 1e9:.2f}**",
                )
            )


# ---------------------------------------------------------------------------------------------------------------
# errors


def errors(actual: np.ndarray, expected: np.ndarray) -> tuple[float, float]:
    """(relative L2 = ||a - e|| / ||e||, max |a - e|)."""
    diff = actual.astype(np.float64) - expected.astype(np.float64)
    return float(np.linalg.norm(diff) / np.linalg.norm(expected.astype(np.float64))), float(np.abs(diff).max())


def row(*cells: object) -> str:
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


# ---------------------------------------------------------------------------------------------------------------
# full: the embedding table


VOCAB, TEXT_WIDTH = 151_936, 2_560
ROWS_PER_SLICE = 8_192


def embedding_rows(distribution: str, start: int, count: int) -> np.ndarray:
    """Rows [start, start + count) of a [151,936 x 2,560] float32 table drawn from `distribution` (the same rows
    for the same arguments, so the table is never held whole)."""
    rng = np.random.default_rng([start, len(distribution)])
    if distribution == "init N(0, 0.02)":  # transformers' Qwen3 init: what a make-tiny --full-size repo has
        return rng.normal(0, 0.02, (count, TEXT_WIDTH)).astype(np.float32)
    if distribution == "heavy-tailed rows":  # Student-t (4 dof) values, row scales spread log-normally
        values = rng.standard_t(4, (count, TEXT_WIDTH)) * 0.02 / math.sqrt(2)
        return (values * rng.lognormal(0, 0.5, (count, 1))).astype(np.float32)
    if distribution == "outlier columns":  # init plus 8 columns 20x larger (as some LLM embeddings carry)
        values = rng.normal(0, 0.02, (count, TEXT_WIDTH))
        values[:, :: TEXT_WIDTH // 8] *= 20
        return values.astype(np.float32)
    raise ValueError(distribution)


def embedding_study() -> None:
    print("\n## Token embedding [151,936 x 2,560]: stored value against the float32 table\n")
    print(row("values", "stored as", "bytes", "relative L2", "max abs error", "max abs value"))
    print(row(*["---"] * 6))
    formats: dict[str, Callable[[np.ndarray], np.ndarray]] = {"fp16 (seed)": lambda t: t.astype(np.float16)}
    sizes = {"fp16 (seed)": VOCAB * TEXT_WIDTH * 2}
    for block in (32, 64, 128):
        formats[f"4-bit, block {block}"] = functools.partial(dequantized, block=block)
        sizes[f"4-bit, block {block}"] = VOCAB * TEXT_WIDTH // 2 + VOCAB * (TEXT_WIDTH // block) * 2
    for distribution in ("init N(0, 0.02)", "heavy-tailed rows", "outlier columns"):
        squared = dict.fromkeys(formats, 0.0)
        worst = dict.fromkeys(formats, 0.0)
        total, peak = 0.0, 0.0
        for start in range(0, VOCAB, ROWS_PER_SLICE):
            table = embedding_rows(distribution, start, min(ROWS_PER_SLICE, VOCAB - start))
            total += float(np.square(table).sum(dtype=np.float64))
            peak = max(peak, float(np.abs(table).max()))
            for label, store in formats.items():
                diff = store(table).astype(np.float32) - table
                squared[label] += float(np.square(diff).sum(dtype=np.float64))
                worst[label] = max(worst[label], float(np.abs(diff).max()))
            print(f"  {distribution}: rows {start + len(table)}/{VOCAB}", file=sys.stderr)
        for label in formats:
            print(
                row(
                    distribution,
                    label,
                    f"{sizes[label] / 1e9:.3f} GB",
                    f"{math.sqrt(squared[label] / total):.4f}",
                    f"{worst[label]:.2e}",
                    f"{peak:.3f}",
                )
            )


def dequantized(table: np.ndarray, block: int) -> np.ndarray:
    from builder.convert.quantize import dequantize_blocks

    packed, scales = quantize_blocks(table, block)
    # What the converter stores: the scales in fp16 (store_fp16), cast up when the session is created.
    return dequantize_blocks(packed, scales.astype(np.float16).astype(np.float32), block)


# ---------------------------------------------------------------------------------------------------------------
# full: the AdaLN and time-embedding layers


WIDTH, TIME_CHANNELS = 3_072, 256
ADALN_LAYERS = {  # name: (in, out) at klein-4B's widths (diffusers Flux2Transformer2DModel)
    "time_guidance_embed linear_1": (TIME_CHANNELS, WIDTH),
    "time_guidance_embed linear_2": (WIDTH, WIDTH),
    "double_stream_modulation_img": (WIDTH, 6 * WIDTH),
    "double_stream_modulation_txt": (WIDTH, 6 * WIDTH),
    "single_stream_modulation": (WIDTH, 3 * WIDTH),
    "norm_out linear": (WIDTH, 2 * WIDTH),
}


def linear_weight(rng: np.random.Generator, k: int, n: int) -> np.ndarray:
    """[K, N] as torch.nn.Linear initialises it (U(-1/sqrt(K), 1/sqrt(K))): a make-tiny --full-size repo's."""
    bound = 1 / math.sqrt(k)
    return rng.uniform(-bound, bound, (k, n)).astype(np.float32)


def time_inputs(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The inputs each layer gets in 4-step 512x512 and 1024x1024 generations: the sinusoidal timestep features
    (linear_1), silu of linear_1 (linear_2) and silu of the time embedding (every modulation, norm_out)."""
    import torch
    from diffusers.models.embeddings import get_timestep_embedding

    from builder.pipeline.schedule import model_timestep, retrieve_timesteps

    steps = [model_timestep(t)[0] for tokens in (1024, 4096) for t in retrieve_timesteps(4, tokens)[1]]
    features: np.ndarray = (
        get_timestep_embedding(torch.tensor(steps) * 1000, TIME_CHANNELS, flip_sin_to_cos=True, downscale_freq_shift=0)
        .numpy()
        .astype(np.float32)
    )

    def silu(x: np.ndarray) -> np.ndarray:
        return np.asarray(x / (1 + np.exp(-x)))

    hidden: np.ndarray = silu(features @ linear_weight(rng, TIME_CHANNELS, WIDTH))
    temb: np.ndarray = hidden @ linear_weight(rng, WIDTH, WIDTH)
    return {"time_guidance_embed linear_1": features, "time_guidance_embed linear_2": hidden, "*": silu(temb)}


def matmul_nbits_output(
    weight: np.ndarray, x: np.ndarray, *, accuracy_level: int, block_size: int = 32, bits: int = 4
) -> np.ndarray:
    """x @ weight through the converter's own MatMulNBits rewrite, with its scales stored in fp16, on
    onnxruntime's CPU kernels."""
    import onnxruntime as ort

    from builder.convert.fp16_storage import store_fp16

    k, n = weight.shape
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="/layer/MatMul")],
        "layer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["m", k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["m", n])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid(MS_DOMAIN, 1)])
    model.ir_version = IR_VERSION
    quantize_matmul(
        model.graph, model.graph.node[0], weight, accuracy_level=accuracy_level, block_size=block_size, bits=bits
    )
    store_fp16(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {"x": x})[0])


def adaln_study() -> None:
    rng = np.random.default_rng(0)
    inputs = time_inputs(rng)
    print(
        "\n## Time embedding and AdaLN layers at klein-4B's shapes: 4-bit MatMulNBits (block 32, fp16-stored "
        "scales) against fp32, on the inputs of 8 timesteps (4-step 512x512 and 1024x1024)\n"
    )
    print(
        row(
            "layer",
            "K x N",
            "fp32 bytes",
            "q4 bytes",
            "accuracy_level",
            "relative L2",
            "max abs error",
            "max abs output",
        )
    )
    print(row(*["---"] * 8))
    for name, (k, n) in ADALN_LAYERS.items():
        weight = linear_weight(rng, k, n)
        x = inputs.get(name, inputs["*"])
        expected = x @ weight
        q4_bytes = k * n // 2 + k * n // 32 * 2
        for level in (0, 4):
            relative, worst = errors(matmul_nbits_output(weight, x, accuracy_level=level), expected)
            print(
                row(
                    name,
                    f"{k} x {n}",
                    f"{k * n * 4 / 1e6:.1f} MB",
                    f"{q4_bytes / 1e6:.1f} MB",
                    level,
                    f"{relative:.4f}",
                    f"{worst:.2e}",
                    f"{np.abs(expected).max():.2e}",
                )
            )


# ---------------------------------------------------------------------------------------------------------------
# full: the 4-bit layers, by block size and bits


LAYER_SHAPES = {  # name: K (the quantised axis) at klein-4B's widths
    "text encoder q/k/v, gate, up (K 2,560)": 2_560,
    "text encoder o_proj (K 4,096)": 4_096,
    "text encoder down_proj (K 9,728)": 9_728,
    "transformer attention, ff in, single-stream in (K 3,072)": 3_072,
    "transformer ff out (K 9,216)": 9_216,
    "transformer single-stream out (K 12,288)": 12_288,
}
LAYER_COLUMNS = 2_048  # N: each column is quantised on its own, so the error does not depend on how many


def layer_study() -> None:
    print(
        "\n## The MatMulNBits layers by block size and bits: output against fp32 (relative L2), K as in klein-4B, "
        f"{LAYER_COLUMNS} columns, 64 normal input rows, accuracy_level 0\n"
    )
    formats = ((4, 32), (4, 64), (4, 128), (2, 32), (2, 128))
    print(row("layer", "weights", *(f"{bits}-bit, block {block}" for bits, block in formats)))
    print(row(*["---"] * (2 + len(formats))))
    rng = np.random.default_rng(3)
    for name, k in LAYER_SHAPES.items():
        x = rng.standard_normal((64, k)).astype(np.float32)
        for label, drawn in (
            ("normal", rng.standard_normal((k, LAYER_COLUMNS)) / math.sqrt(k)),
            ("Student-t, 4 dof", rng.standard_t(4, (k, LAYER_COLUMNS)) / math.sqrt(2 * k)),
        ):
            weight = drawn.astype(np.float32)
            expected = x @ weight
            outputs = [
                matmul_nbits_output(weight, x, accuracy_level=0, block_size=block, bits=bits) for bits, block in formats
            ]
            cells = [f"{errors(output, expected)[0]:.4f}" for output in outputs]
            print(row(name, label, *cells))


# ---------------------------------------------------------------------------------------------------------------
# tiny


PROMPTS = ("a red fox sitting in the snow", "x", "an astronaut riding a horse on the moon, 35mm photo")
IMAGE_SIZES = (64, 128)


def converted(diffusers: Path, out: Path, weights: Any) -> Path:
    """The tiny model converted (--precision q4f16) in `weights`' format at OUT, reused when already there."""
    from builder.convert.convert import convert

    if (out / manifest.MANIFEST_NAME).is_file():
        print(f"(reusing {out})", file=sys.stderr)
    else:
        convert(diffusers, out, precision="q4f16", weights=weights, log=lambda line: print(line, file=sys.stderr))
    return out


def run_graph(path: Path, feed: dict[str, np.ndarray]) -> np.ndarray:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, feed)[0])


def component_feeds(fp32_repo: Path) -> Iterator[tuple[str, str, dict[str, np.ndarray]]]:
    """(component, fp32 variant, inputs): the prompts' tokens; one step at 128x128 on the fp32 embeddings of
    the first prompt; latents for the VAE decoder."""
    from builder.pipeline.latents import pack_latents, prepare_latent_ids, prepare_text_ids
    from builder.pipeline.prompt import load_tokenizer
    from builder.pipeline.rng import torch_randn
    from builder.pipeline.schedule import model_timestep, retrieve_timesteps

    tokenizer = load_tokenizer(fp32_repo)
    tokens = [tokenizer.encode(prompt) for prompt in PROMPTS]
    text = {
        "input_ids": np.concatenate([t.input_ids for t in tokens]),
        "attention_mask": np.concatenate([t.attention_mask for t in tokens]),
    }
    yield "text_encoder", "fp32", text
    embeds = run_graph(fp32_repo / manifest.graph_path("text_encoder", "fp32"), text)[:1]
    latents = torch_randn((1, 128, 8, 8), 1)
    timesteps = retrieve_timesteps(4, 64)[1]
    yield (
        "transformer",
        "fp32",
        {
            "hidden_states": pack_latents(latents),
            "encoder_hidden_states": embeds,
            "timestep": model_timestep(timesteps[0]),
            "img_ids": prepare_latent_ids(8, 8),
            "txt_ids": prepare_text_ids(embeds.shape[1]),
        },
    )
    yield "vae_decoder", "fp32", {"latents": latents}


def tiny_study(tiny: Path, work: Path) -> None:
    from builder.pipeline.imaging import psnr
    from builder.pipeline.reference import generate

    repos = {name: converted(tiny / "diffusers", work / name, fmt) for name, fmt in studied_formats().items()}
    fp32_repo = tiny / "fp32"
    print(
        f"# Weight formats on the tiny model ({datetime.date.today().isoformat()}, "
        f"`python scripts/weight_format_study.py tiny {tiny} {work}`)"
    )
    print("\n## Each component's output against the fp32 graph\n")
    print(row("component", "format", "variant", "relative L2", "max abs error", "max abs output"))
    print(row(*["---"] * 6))
    for component, variant, feed in component_feeds(fp32_repo):
        expected = run_graph(fp32_repo / manifest.graph_path(component, variant), feed)
        variants = ("fp32", "fp16") if component == "vae_decoder" else ("q4", "q4f16")
        for name, repo in repos.items():
            for graph_variant in variants:
                relative, worst = errors(
                    run_graph(repo / manifest.graph_path(component, graph_variant), feed), expected
                )
                print(
                    row(
                        component,
                        name,
                        graph_variant,
                        f"{relative:.4f}",
                        f"{worst:.3e}",
                        f"{np.abs(expected).max():.3e}",
                    )
                )

    print(
        "\n## Whole images (4 steps, seed 1, 3 prompts): PSNR in dB against the seed format's q4f16 image "
        "and against the fp32 image, min / mean over the prompts\n"
    )
    print(row("size", "format", "text encoder + transformer", "VAE", "vs seed q4f16", "vs fp32"))
    print(row(*["---"] * 6))

    def image(repo: Path, variants: dict[str, str] | None, prompt: str, size: int) -> np.ndarray:
        return generate(
            repo, prompt=prompt, seed=1, width=size, height=size, steps=4, log=lambda _m: None, variants=variants
        ).image

    for size in IMAGE_SIZES:
        fp32_images = [image(fp32_repo, None, prompt, size) for prompt in PROMPTS]
        seed_pinned = {"text_encoder": "q4f16", "transformer": "q4f16", "vae_decoder": "fp16"}
        today = [image(repos["seed"], seed_pinned, prompt, size) for prompt in PROMPTS]
        for name, repo in repos.items():
            for variant, vae in (("q4", "fp32"), ("q4f16", "fp16")):
                pinned = {"text_encoder": variant, "transformer": variant, "vae_decoder": vae}
                images = [image(repo, pinned, prompt, size) for prompt in PROMPTS]
                against_today = [psnr(a, b) for a, b in zip(images, today, strict=True)]
                against_fp32 = [psnr(a, b) for a, b in zip(images, fp32_images, strict=True)]
                print(row(f"{size}x{size}", name, variant, vae, span(against_today), span(against_fp32)))


def span(values: list[float]) -> str:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return "identical"
    return f"{min(values):.1f} / {sum(finite) / len(finite):.1f}" + (
        " (some identical)" if len(finite) < len(values) else ""
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    bytes_parser = sub.add_parser("bytes", help="a repository's bytes per graph and tensor kind")
    bytes_parser.add_argument("repo", type=Path)
    bytes_parser.add_argument("--variant", default=None, help="only this variant's graphs (and the VAE's)")
    tiny_parser = sub.add_parser("tiny", help="component errors and image PSNR of every format on the tiny model")
    tiny_parser.add_argument("tiny", type=Path, help="a klein-web make-tiny folder")
    tiny_parser.add_argument("work", type=Path, help="where the converted repositories go (reused when present)")
    sub.add_parser("full", help="full-width embedding and AdaLN tensors")
    args = parser.parse_args(argv)
    if args.command == "bytes":
        repo_bytes(args.repo, args.variant)
    elif args.command == "tiny":
        tiny_study(args.tiny, args.work)
    else:
        print(
            f"# Weight formats at full width ({datetime.date.today().isoformat()}, "
            "`python scripts/weight_format_study.py full`)"
        )
        sizes_table()
        embedding_study()
        adaln_study()
        layer_study()


if __name__ == "__main__":
    main()
