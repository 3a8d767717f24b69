"""`klein-web convert --lora`: LoRA weights merged into the transformer, checked against diffusers itself.

The oracle is `Flux2KleinPipeline.load_lora_weights(path)` + `fuse_lora(lora_scale=s)` (diffusers with its PEFT
backend) on the tiny model; ours is builder.convert.lora merged into the same transformer in torch, and the fp32
ONNX transformer that `klein-web convert --lora` writes, run on onnxruntime CPU. The LoRA files are random and
written here, in the layouts diffusers' Flux2 loader reads: diffusers/PEFT (with alpha in the adapter metadata),
kohya and BFL.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

from builder.cli import main
from builder.convert import lora as lora_module
from builder.errors import ConversionError
from builder.repo import manifest as repo

RANK = 4
# Attention (joint and single-stream), feed-forward, and the layers around the blocks.
PEFT_TARGETS = (
    "transformer_blocks.0.attn.to_q",
    "transformer_blocks.0.attn.to_v",
    "transformer_blocks.0.attn.to_out.0",
    "transformer_blocks.0.attn.add_k_proj",
    "transformer_blocks.0.ff.linear_in",
    "transformer_blocks.0.ff_context.linear_out",
    "single_transformer_blocks.0.attn.to_qkv_mlp_proj",
    "single_transformer_blocks.0.attn.to_out",
    "x_embedder",
    "proj_out",
)
# The merged output must equal diffusers' fused LoRA within this (max |diff| / max |expected|); torch vs torch.
TORCH_TOLERANCE = 1e-5
# The ONNX graph computes RoPE in fp32 where diffusers uses fp64 (docs/converting.md: fp32 graphs within 1e-4 relative in
# general); at these inputs' few positions that costs about 2e-7.
ONNX_TOLERANCE = 1e-5


# ---------------------------------------------------------------------------------------------------
# LoRA files in each layout.


def linear_shapes(tiny_models: dict[str, Path]) -> dict[str, tuple[int, int]]:
    from diffusers import Flux2Transformer2DModel

    model = Flux2Transformer2DModel.from_pretrained(tiny_models["diffusers"], subfolder="transformer")
    return {
        name: (int(layer.weight.shape[0]), int(layer.weight.shape[1]))
        for name, layer in model.named_modules()
        if isinstance(layer, torch.nn.Linear)
    }


def random(shape: tuple[int, ...], generator: torch.Generator, std: float = 0.2) -> torch.Tensor:
    return torch.randn(shape, generator=generator) * std


def peft_lora(
    path: Path,
    shapes: dict[str, tuple[int, int]],
    *,
    seed: int,
    alpha: float | None = 8.0,
    targets: tuple[str, ...] = PEFT_TARGETS,
    alpha_pattern: dict[str, float] | None = None,
) -> Path:
    """diffusers/PEFT keys; alpha, when given, in the LoraConfig metadata as `save_lora_weights` writes it."""
    generator = torch.Generator().manual_seed(seed)
    state = {}
    for name in targets:
        out_features, in_features = shapes[name]
        state[f"transformer.{name}.lora_A.weight"] = random((RANK, in_features), generator)
        state[f"transformer.{name}.lora_B.weight"] = random((out_features, RANK), generator)
    metadata = {"format": "pt"}
    if alpha is not None:
        config = {
            "r": RANK,
            "lora_alpha": alpha,
            "target_modules": sorted(targets),
            "alpha_pattern": alpha_pattern or {},
        }
        metadata[lora_module.METADATA_KEY] = json.dumps({f"transformer.{k}": v for k, v in config.items()})
    save_file(state, str(path), metadata=metadata)
    return path


def kohya_lora(path: Path, shapes: dict[str, tuple[int, int]], *, seed: int) -> Path:
    """kohya sd-scripts keys: BFL module names with underscores, lora_down/lora_up and a per-module alpha."""
    generator = torch.Generator().manual_seed(seed)
    inner = shapes["transformer_blocks.0.attn.to_q"][1]
    modules = {  # kohya name -> (in, out)
        "lora_unet_double_blocks_0_img_attn_qkv": (inner, 3 * inner),
        "lora_unet_double_blocks_0_txt_attn_proj": (inner, inner),
        "lora_unet_double_blocks_0_img_mlp_0": shapes["transformer_blocks.0.ff.linear_in"][::-1],
        "lora_unet_single_blocks_0_linear1": shapes["single_transformer_blocks.0.attn.to_qkv_mlp_proj"][::-1],
        "lora_unet_final_layer_linear": shapes["proj_out"][::-1],
    }
    state = {}
    for index, (name, (in_features, out_features)) in enumerate(modules.items()):
        state[f"{name}.lora_down.weight"] = random((RANK, in_features), generator)
        state[f"{name}.lora_up.weight"] = random((out_features, RANK), generator)
        state[f"{name}.alpha"] = torch.tensor(float(2 + index))
    save_file(state, str(path))
    return path


def bfl_lora(path: Path, shapes: dict[str, tuple[int, int]], *, seed: int) -> Path:
    """BFL / ai-toolkit keys: `diffusion_model.double_blocks.0.img_attn.qkv.lora_A.weight`, fused QKV."""
    generator = torch.Generator().manual_seed(seed)
    inner = shapes["transformer_blocks.0.attn.to_q"][1]
    modules = {
        "double_blocks.0.txt_attn.qkv": (inner, 3 * inner),
        "double_blocks.0.img_mlp.2": shapes["transformer_blocks.0.ff.linear_out"][::-1],
        "single_blocks.0.linear2": shapes["single_transformer_blocks.0.attn.to_out"][::-1],
        "txt_in": shapes["context_embedder"][::-1],
    }
    state = {}
    for name, (in_features, out_features) in modules.items():
        state[f"diffusion_model.{name}.lora_A.weight"] = random((RANK, in_features), generator)
        state[f"diffusion_model.{name}.lora_B.weight"] = random((out_features, RANK), generator)
    save_file(state, str(path))
    return path


# ---------------------------------------------------------------------------------------------------
# The oracle and ours.


def step_inputs(h: int = 4, w: int = 3, txt: int = 7, seed: int = 5) -> dict[str, np.ndarray]:
    generator = torch.Generator().manual_seed(seed)
    img_ids = torch.cartesian_prod(torch.arange(1), torch.arange(h), torch.arange(w), torch.arange(1))
    txt_ids = torch.cartesian_prod(torch.arange(1), torch.arange(1), torch.arange(1), torch.arange(txt))
    return {
        "hidden_states": torch.randn(1, h * w, 128, generator=generator).numpy(),
        "encoder_hidden_states": torch.randn(1, txt, 96, generator=generator).numpy(),
        "timestep": np.array([0.7], dtype=np.float32),
        "img_ids": img_ids.numpy(),
        "txt_ids": txt_ids.numpy(),
    }


def run_transformer(transformer: Any, feed: dict[str, np.ndarray]) -> np.ndarray:
    with torch.no_grad():
        out = transformer(
            hidden_states=torch.from_numpy(feed["hidden_states"]),
            encoder_hidden_states=torch.from_numpy(feed["encoder_hidden_states"]),
            timestep=torch.from_numpy(feed["timestep"]),
            img_ids=torch.from_numpy(feed["img_ids"])[None],
            txt_ids=torch.from_numpy(feed["txt_ids"])[None],
            guidance=None,
            return_dict=False,
        )[0]
    result: np.ndarray = out.numpy()
    return result


def diffusers_fused(
    tiny_models: dict[str, Path], loras: list[tuple[Path, float]], feed: dict[str, np.ndarray]
) -> np.ndarray:
    """diffusers' own: load_lora_weights for each file, then fuse_lora (per-adapter weights for several)."""
    from diffusers import Flux2KleinPipeline

    pipe = Flux2KleinPipeline.from_pretrained(tiny_models["diffusers"], dtype=torch.float32)
    if len(loras) == 1:
        pipe.load_lora_weights(str(loras[0][0]))
        pipe.fuse_lora(lora_scale=loras[0][1])
    else:
        names = [f"lora{i}" for i in range(len(loras))]
        for name, (path, _scale) in zip(names, loras, strict=True):
            pipe.load_lora_weights(str(path), adapter_name=name)
        pipe.set_adapters(names, adapter_weights=[scale for _path, scale in loras])
        pipe.fuse_lora(adapter_names=names)
    pipe.unload_lora_weights()  # the fused weights stay; the adapter layers go
    return run_transformer(pipe.transformer.eval(), feed)


def ours(tiny_models: dict[str, Path], loras: list[tuple[Path, float]], feed: dict[str, np.ndarray]) -> np.ndarray:
    from diffusers import Flux2Transformer2DModel

    model = Flux2Transformer2DModel.from_pretrained(tiny_models["diffusers"], subfolder="transformer").eval()
    lora_module.merge(model, [lora_module.load(lora_module.LoraSpec(path, scale)) for path, scale in loras])
    return run_transformer(model, feed)


def base_output(tiny_models: dict[str, Path], feed: dict[str, np.ndarray]) -> np.ndarray:
    return ours(tiny_models, [], feed)


def compare(actual: np.ndarray, expected: np.ndarray) -> tuple[float, float]:
    """(max |diff|, max |diff| / max |expected|)."""
    diff = float(np.abs(actual - expected).max())
    return diff, diff / float(np.abs(expected).max())


@pytest.fixture(scope="module")
def shapes(tiny_models: dict[str, Path]) -> dict[str, tuple[int, int]]:
    return linear_shapes(tiny_models)


@pytest.fixture(scope="module")
def feed() -> dict[str, np.ndarray]:
    return step_inputs()


MAKERS: dict[str, Callable[..., Path]] = {"peft": peft_lora, "kohya": kohya_lora, "bfl": bfl_lora}


# ---------------------------------------------------------------------------------------------------
# 1. The merge equals diffusers' fuse_lora, per format, in torch.


# diffusers' fuse of several adapters warns about the second peft_config it injects; expected here.
MULTIPLE_ADAPTERS = "ignore:Already found a `peft_config` attribute"


@pytest.mark.parametrize(("kind", "scale"), [("peft", 0.75), ("kohya", 1.0), ("bfl", -0.5)])
def test_merge_matches_diffusers_fuse_lora(
    tiny_models: dict[str, Path],
    shapes: dict[str, tuple[int, int]],
    feed: dict[str, np.ndarray],
    tmp_path: Path,
    kind: str,
    scale: float,
) -> None:
    path = MAKERS[kind](tmp_path / f"{kind}.safetensors", shapes, seed=1)
    expected = diffusers_fused(tiny_models, [(path, scale)], feed)
    actual = ours(tiny_models, [(path, scale)], feed)
    moved, _ = compare(expected, base_output(tiny_models, feed))
    diff, relative = compare(actual, expected)
    print(
        f"{kind} scale {scale}: LoRA moves the output by {moved:.3g}; merged vs diffusers max |diff| {diff:.3g} "
        f"({relative:.3g} relative)"
    )
    assert moved > 1e-2 * float(np.abs(expected).max())  # the LoRA matters, so the comparison means something
    assert relative <= TORCH_TOLERANCE


def test_alpha_pattern_and_default_alpha(
    tiny_models: dict[str, Path], shapes: dict[str, tuple[int, int]], feed: dict[str, np.ndarray], tmp_path: Path
) -> None:
    """Per-module alpha (PEFT alpha_pattern) and a file without metadata (alpha = rank) both as diffusers has them."""
    patterned = peft_lora(
        tmp_path / "pattern.safetensors",
        shapes,
        seed=2,
        alpha=2.0,
        alpha_pattern={"ff.linear_in": 16.0, "^single_transformer_blocks.0.attn.to_out": 1.0},
    )
    plain = peft_lora(tmp_path / "plain.safetensors", shapes, seed=3, alpha=None)
    for path in (patterned, plain):
        diff, relative = compare(
            ours(tiny_models, [(path, 1.25)], feed), diffusers_fused(tiny_models, [(path, 1.25)], feed)
        )
        print(f"{path.name}: max |diff| {diff:.3g} ({relative:.3g} relative)")
        assert relative <= TORCH_TOLERANCE


def test_alpha_tensors_beside_peft_keys(
    tiny_models: dict[str, Path], shapes: dict[str, tuple[int, int]], feed: dict[str, np.ndarray], tmp_path: Path
) -> None:
    """`transformer.<module>.alpha` tensors (diffusers' Flux2 loader refuses them) mean what a LoraConfig with
    the same per-module alphas means: the oracle loads the same factors with the alphas as metadata."""
    with_metadata = peft_lora(
        tmp_path / "metadata.safetensors",
        shapes,
        seed=9,
        alpha=3.0,
        alpha_pattern={f"^{name}": 1.0 + i for i, name in enumerate(PEFT_TARGETS)},
    )
    state = load_file(str(with_metadata))
    state.update({f"transformer.{name}.alpha": torch.tensor(1.0 + i) for i, name in enumerate(PEFT_TARGETS)})
    with_tensors = tmp_path / "tensors.safetensors"
    save_file(state, str(with_tensors))
    diff, relative = compare(
        ours(tiny_models, [(with_tensors, 0.9)], feed), diffusers_fused(tiny_models, [(with_metadata, 0.9)], feed)
    )
    print(f"alpha tensors: max |diff| {diff:.3g} ({relative:.3g} relative)")
    assert relative <= TORCH_TOLERANCE


@pytest.mark.filterwarnings(MULTIPLE_ADAPTERS)
def test_two_loras_add_up(
    tiny_models: dict[str, Path], shapes: dict[str, tuple[int, int]], feed: dict[str, np.ndarray], tmp_path: Path
) -> None:
    first = peft_lora(tmp_path / "a.safetensors", shapes, seed=4)
    second = kohya_lora(tmp_path / "b.safetensors", shapes, seed=5)
    loras = [(first, 0.6), (second, 1.3)]
    diff, relative = compare(ours(tiny_models, loras, feed), diffusers_fused(tiny_models, loras, feed))
    print(f"two LoRAs: max |diff| {diff:.3g} ({relative:.3g} relative)")
    assert relative <= TORCH_TOLERANCE


# ---------------------------------------------------------------------------------------------------
# 2. `klein-web convert --lora`: the fp32 ONNX transformer, the manifest.


@pytest.mark.filterwarnings(MULTIPLE_ADAPTERS)
def test_convert_with_loras_bakes_them_into_the_onnx_transformer(
    tiny_models: dict[str, Path], shapes: dict[str, tuple[int, int]], feed: dict[str, np.ndarray], tmp_path: Path
) -> None:
    folder = tmp_path / "with:colon"  # a ':' inside the path is part of it, not a scale
    folder.mkdir()
    first = peft_lora(folder / "style.safetensors", shapes, seed=6)
    second = kohya_lora(folder / "kohya.safetensors", shapes, seed=7)
    out = tmp_path / "repo"
    result = CliRunner().invoke(
        main,
        [
            "convert",
            str(tiny_models["diffusers"]),
            str(out),
            "--precision",
            "fp32",
            "--lora",
            f"{first}:0.8",
            "--lora",
            str(second),
        ],
    )
    assert result.exit_code == 0, result.output

    session = ort.InferenceSession(
        str(out / repo.graph_path("transformer", "fp32")), providers=["CPUExecutionProvider"]
    )
    actual = session.run(None, feed)[0]
    expected = diffusers_fused(tiny_models, [(first, 0.8), (second, 1.0)], feed)
    unmerged = ort.InferenceSession(
        str(tiny_models["fp32"] / repo.graph_path("transformer", "fp32")), providers=["CPUExecutionProvider"]
    ).run(None, feed)[0]
    diff, relative = compare(actual, expected)
    base_diff, base_relative = compare(unmerged, base_output(tiny_models, feed))
    print(
        f"convert --lora fp32 ONNX vs diffusers fuse_lora: max |diff| {diff:.3g} ({relative:.3g} relative); "
        f"the same graph without LoRA vs diffusers: {base_diff:.3g} ({base_relative:.3g})"
    )
    assert relative <= ONNX_TOLERANCE

    manifest = repo.load(out)
    assert [(e.file, e.scale) for e in manifest.loras] == [("style.safetensors", 0.8), ("kohya.safetensors", 1.0)]
    assert manifest.loras[0].sha256 == lora_module._sha256(first)
    assert manifest.converter.endswith("--lora style.safetensors:0.8 --lora kohya.safetensors:1.0")
    # A repo converted without LoRAs keeps a manifest without the field.
    assert "loras" not in json.loads((tiny_models["fp32"] / repo.MANIFEST_NAME).read_text())


def test_convert_q4_with_a_lora_moves_the_quantised_graph(
    tiny_models: dict[str, Path], shapes: dict[str, tuple[int, int]], feed: dict[str, np.ndarray], tmp_path: Path
) -> None:
    """The merge happens before quantisation: the q4 graph follows the merged weights, not the base ones."""
    path = peft_lora(tmp_path / "lora.safetensors", shapes, seed=8)
    out = tmp_path / "repo"
    result = CliRunner().invoke(main, ["convert", str(tiny_models["diffusers"]), str(out), "--lora", f"{path}:1.5"])
    assert result.exit_code == 0, result.output
    actual = ort.InferenceSession(
        str(out / repo.graph_path("transformer", "q4")), providers=["CPUExecutionProvider"]
    ).run(None, feed)[0]
    expected = diffusers_fused(tiny_models, [(path, 1.5)], feed)
    base = base_output(tiny_models, feed)
    _, to_merged = compare(actual, expected)
    _, to_base = compare(actual, base)
    print(f"q4 with LoRA: {to_merged:.3g} relative to diffusers' fused LoRA, {to_base:.3g} to the base model")
    assert to_merged < to_base / 3


# ---------------------------------------------------------------------------------------------------
# 3. Refusals: one line, exit code 1, nothing written.


def bad_files(tmp_path: Path, shapes: dict[str, tuple[int, int]]) -> dict[str, tuple[Path, str]]:
    """name -> (a LoRA file convert must refuse, a word its error must contain)."""
    out_features, in_features = shapes["transformer_blocks.0.attn.to_q"]
    pickle = tmp_path / "pickle.safetensors"
    torch.save({"transformer.x.lora_A.weight": torch.zeros(2, 2)}, str(pickle))
    cases: dict[str, tuple[Path | dict[str, torch.Tensor], str]] = {
        "not-safetensors": (pickle, "not a safetensors file"),
        "missing": (tmp_path / "nope.safetensors", "no such file"),
        "unknown-module": (
            {
                "transformer.transformer_blocks.7.attn.to_q.lora_A.weight": torch.zeros(RANK, in_features),
                "transformer.transformer_blocks.7.attn.to_q.lora_B.weight": torch.zeros(out_features, RANK),
            },
            "transformer_blocks.7.attn.to_q",
        ),
        "not-a-linear": (
            {
                "transformer.transformer_blocks.0.attn.norm_q.lora_A.weight": torch.zeros(RANK, 16),
                "transformer.transformer_blocks.0.attn.norm_q.lora_B.weight": torch.zeros(16, RANK),
            },
            "not a Linear",
        ),
        "shape": (
            {
                "transformer.transformer_blocks.0.attn.to_q.lora_A.weight": torch.zeros(RANK, 2 * in_features),
                "transformer.transformer_blocks.0.attn.to_q.lora_B.weight": torch.zeros(out_features, RANK),
            },
            "shapes do not fit",
        ),
        "text-encoder": (
            {
                "lora_te_text_model_encoder_layers_0_mlp_fc1.lora_down.weight": torch.zeros(RANK, 8),
                "lora_te_text_model_encoder_layers_0_mlp_fc1.lora_up.weight": torch.zeros(8, RANK),
                "lora_unet_final_layer_linear.lora_down.weight": torch.zeros(RANK, in_features),
                "lora_unet_final_layer_linear.lora_up.weight": torch.zeros(128, RANK),
            },
            "text-encoder LoRA weights are not supported",
        ),
        "unknown-format": ({"model.layers.0.weight": torch.zeros(4, 4)}, "not a LoRA"),
        "kohya-unknown-layer": (
            {
                "lora_unet_double_blocks_0_img_mod_lin.lora_down.weight": torch.zeros(RANK, 8),
                "lora_unet_double_blocks_0_img_mod_lin.lora_up.weight": torch.zeros(8, RANK),
            },
            "lora_unet_double_blocks_0_img_mod_lin",
        ),
        "lokr": ({"transformer.proj_out.lokr_w1": torch.zeros(2, 2)}, "LoKr"),
        "half-pair": ({"transformer.proj_out.lora_A.weight": torch.zeros(RANK, in_features)}, "lora_B"),
        "stray-alpha": (
            {
                "transformer.proj_out.lora_A.weight": torch.zeros(RANK, in_features),
                "transformer.proj_out.lora_B.weight": torch.zeros(128, RANK),
                "transformer.x_embedder.alpha": torch.tensor(2.0),
            },
            "x_embedder",
        ),
    }
    files = {}
    for name, (content, word) in cases.items():
        if isinstance(content, Path):
            files[name] = (content, word)
            continue
        path = tmp_path / f"{name}.safetensors"
        save_file(content, str(path))
        files[name] = (path, word)
    return files


def test_bad_loras_are_refused_with_one_line_and_nothing_written(
    tiny_models: dict[str, Path], shapes: dict[str, tuple[int, int]], tmp_path: Path
) -> None:
    for name, (path, word) in bad_files(tmp_path, shapes).items():
        parent = tmp_path / f"out-{name}"
        parent.mkdir()
        result = CliRunner().invoke(
            main,
            [
                "convert",
                str(tiny_models["diffusers"]),
                str(parent / "repo"),
                "--precision",
                "fp32",
                "--lora",
                str(path),
            ],
        )
        assert result.exit_code == 1, (name, result.output)
        errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1 and word in errors[0], (name, result.output)
        assert "Traceback" not in result.output
        assert list(parent.iterdir()) == [], (name, list(parent.iterdir()))  # no repo, no staging folder
        print(f"{name}: {errors[0]}")


def test_a_refused_lora_leaves_an_existing_repo_alone(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "repo"
    shutil.copytree(tiny_models["fp32"], out)
    before = {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    result = CliRunner().invoke(
        main, ["convert", str(tiny_models["diffusers"]), str(out), "--lora", str(tmp_path / "missing.safetensors:2")]
    )
    assert result.exit_code == 1 and "no such file" in result.output, result.output
    assert {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repo"]


# ---------------------------------------------------------------------------------------------------
# 4. PATH[:SCALE].


@pytest.mark.parametrize(
    ("text", "path", "scale"),
    [
        ("a.safetensors", "a.safetensors", 1.0),
        ("a.safetensors:0.5", "a.safetensors", 0.5),
        ("a.safetensors:-1", "a.safetensors", -1.0),
        ("a.safetensors:1e-1", "a.safetensors", 0.1),
        ("dir:with:colons/a.safetensors", "dir:with:colons/a.safetensors", 1.0),
        ("dir:2/a.safetensors:3", "dir:2/a.safetensors", 3.0),
        ("a.safetensors:", "a.safetensors:", 1.0),
        (":2", ":2", 1.0),
    ],
)
def test_parse_spec(text: str, path: str, scale: float) -> None:
    spec = lora_module.parse_spec(text)
    assert (str(spec.path), spec.scale) == (path, scale)


def test_parse_spec_prefers_an_existing_file_named_with_a_colon(tmp_path: Path) -> None:
    named = tmp_path / "lora:2"
    named.write_bytes(b"")
    assert lora_module.parse_spec(str(named)) == lora_module.LoraSpec(named, 1.0)
    (tmp_path / "lora").write_bytes(b"")  # both exist: the trailing number is a scale
    assert lora_module.parse_spec(str(named)) == lora_module.LoraSpec(tmp_path / "lora", 2.0)


@pytest.mark.parametrize("text", ["a.safetensors:inf", "a.safetensors:nan"])
def test_parse_spec_refuses_a_scale_that_is_no_number(text: str) -> None:
    with pytest.raises(ConversionError, match="finite"):
        lora_module.parse_spec(text)
