"""`klein-web convert --lora` never writes a model with NaN or infinite weights, and never replaces OUT with one.

Each LoRA here is finite nowhere it matters (a NaN or an infinity in lora_A or lora_B, a NaN or 1e400 `lora_alpha`,
a NaN alpha tensor, an alpha_pattern of infinity, a kohya alpha of NaN), or its scale makes the update overflow
(`:1e38`), or two LoRAs that are each within range add up beyond float16's range. convert must refuse each with
one line, and OUT, a good repository from make-tiny, must stay byte for byte as it was, with no staging folder left.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper
from safetensors.torch import save_file

from builder.cli import main
from builder.convert import finite_weights
from builder.convert import lora as lora_module
from builder.errors import ConversionError

RANK = 4
IN_FEATURES = 32  # the tiny transformer's proj_out: [128, 32]
OUT_FEATURES = 128


def proj_out(down: torch.Tensor | None = None, up: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    return {
        "transformer.proj_out.lora_A.weight": down
        if down is not None
        else torch.randn(RANK, IN_FEATURES, generator=generator) * 0.2,
        "transformer.proj_out.lora_B.weight": up
        if up is not None
        else torch.randn(OUT_FEATURES, RANK, generator=generator) * 0.2,
    }


def with_value(shape: tuple[int, int], index: tuple[int, int], value: float) -> torch.Tensor:
    tensor = torch.randn(*shape, generator=torch.Generator().manual_seed(4)) * 0.2
    tensor[index] = value
    return tensor


def metadata(**config: object) -> dict[str, str]:
    packed = {"r": RANK, "lora_alpha": RANK, "target_modules": ["proj_out"], **config}
    # json.dumps writes NaN / Infinity, which Python's json (and so diffusers) reads back.
    return {lora_module.METADATA_KEY: json.dumps({f"transformer.{k}": v for k, v in packed.items()})}


def save(path: Path, state: dict[str, torch.Tensor], meta: dict[str, str] | None = None) -> Path:
    save_file(state, str(path), metadata=meta)
    return path


def hostile_loras(folder: Path) -> dict[str, tuple[list[str], str]]:
    """name -> (the --lora arguments, a phrase the one error line must hold)."""
    ones = {
        "transformer.proj_out.lora_A.weight": torch.ones(RANK, IN_FEATURES),
        "transformer.proj_out.lora_B.weight": torch.ones(OUT_FEATURES, RANK),
    }  # update = scale * 4 everywhere
    kohya_nan_alpha = {
        "lora_unet_final_layer_linear.lora_down.weight": torch.randn(RANK, IN_FEATURES) * 0.2,
        "lora_unet_final_layer_linear.lora_up.weight": torch.randn(OUT_FEATURES, RANK) * 0.2,
        "lora_unet_final_layer_linear.alpha": torch.tensor(float("nan")),
    }
    files = {
        "nan-in-A": (
            save(folder / "nan-a.safetensors", proj_out(down=with_value((RANK, IN_FEATURES), (1, 5), float("nan")))),
            "NaN or infinite",
        ),
        "inf-in-B": (
            save(folder / "inf-b.safetensors", proj_out(up=with_value((OUT_FEATURES, RANK), (7, 2), float("-inf")))),
            "NaN or infinite",
        ),
        "lora_alpha-nan": (
            save(folder / "alpha-nan.safetensors", proj_out(), metadata(lora_alpha=float("nan"))),
            "lora_alpha = nan",
        ),
        "alpha_pattern-inf": (
            save(folder / "pattern-inf.safetensors", proj_out(), metadata(alpha_pattern={"proj_out": float("inf")})),
            "alpha_pattern",
        ),
        "alpha-tensor-nan": (
            save(
                folder / "alpha-tensor.safetensors",
                {**proj_out(), "transformer.proj_out.alpha": torch.tensor(float("nan"))},
            ),
            "an alpha must be a finite number",
        ),
        "kohya-alpha-nan": (save(folder / "kohya.safetensors", kohya_nan_alpha), "NaN or infinite"),
        "rank-zero": (save(folder / "rank-zero.safetensors", proj_out(), metadata(r=0)), "not positive"),
    }
    # lora_alpha 1e400: a JSON number Python reads as infinity.
    huge = folder / "alpha-1e400.safetensors"
    save(
        huge,
        proj_out(),
        {
            lora_module.METADATA_KEY: json.dumps({"transformer.r": RANK}).replace(
                "}", ', "transformer.lora_alpha": 1e400}'
            )
        },
    )
    cases = {name: ([str(path)], word) for name, (path, word) in files.items()}
    cases["lora_alpha-1e400"] = ([str(huge)], "lora_alpha = inf")
    plain = save(folder / "plain.safetensors", proj_out())
    cases["scale-1e38"] = ([f"{plain}:1e38"], "beyond the 65504")
    cases["scale-1e39"] = ([f"{plain}:1e39"], "NaN or infinite")  # beyond float32: the update is infinite
    cases["scale-1e6-beyond-float16"] = ([f"{plain}:1e6"], "beyond the 65504")
    # Each update is 40000 everywhere, within range; merged, 80000 is not (found as the weight is streamed in).
    ones_path = save(folder / "ones.safetensors", ones)
    cases["two-add-up-beyond-float16"] = ([f"{ones_path}:10000", f"{ones_path}:10000"], "merged weight")
    return cases


def snapshot(folder: Path) -> dict[str, bytes]:
    return {
        path.relative_to(folder).as_posix(): path.read_bytes() if path.is_file() else b"<dir>"
        for path in sorted(folder.rglob("*"))
    }


@pytest.mark.parametrize("precision", ["fp32", "q4"])
def test_non_finite_loras_are_refused_and_out_keeps_the_good_repo(
    tiny_models: dict[str, Path], tmp_path: Path, precision: str
) -> None:
    cases = hostile_loras(tmp_path)
    if precision == "q4":  # the q4 repo, which would make an image with no error: the main places suffice
        cases = {name: cases[name] for name in ("nan-in-A", "scale-1e38", "two-add-up-beyond-float16")}
    for name, (loras, word) in cases.items():
        parent = tmp_path / f"out-{name}"
        parent.mkdir()
        out = parent / "repo"
        shutil.copytree(tiny_models[precision], out)
        before = snapshot(out)
        args = ["convert", str(tiny_models["diffusers"]), str(out), "--precision", precision]
        for item in loras:
            args += ["--lora", item]
        result = CliRunner().invoke(main, args)
        errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
        print(f"{name}: {errors}")
        assert result.exit_code == 1, (name, result.output)
        assert len(errors) == 1 and word in errors[0], (name, result.output)
        assert "Traceback" not in result.output, (name, result.output)
        assert snapshot(out) == before, name
        assert [p.name for p in parent.iterdir()] == ["repo"], (name, list(parent.iterdir()))


def test_a_finite_lora_still_converts(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    """The checks refuse what is broken only: a plain LoRA at scale 2 replaces OUT as before."""
    out = tmp_path / "repo"
    shutil.copytree(tiny_models["fp32"], out)
    path = save(tmp_path / "plain.safetensors", proj_out())
    result = CliRunner().invoke(
        main, ["convert", str(tiny_models["diffusers"]), str(out), "--precision", "fp32", "--lora", f"{path}:2"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads((out / "manifest.json").read_text())["loras"][0]["scale"] == 2.0


@pytest.mark.parametrize(
    ("dtype", "value"),
    [(TensorProto.FLOAT, float("nan")), (TensorProto.FLOAT16, float("inf")), (TensorProto.FLOAT, 1.0)],
)
def test_the_graph_check_reads_external_data(tmp_path: Path, dtype: int, value: float) -> None:
    """The check of the stored graph finds a non-finite weight in an external-data file, and passes a finite one."""
    array = np.full((64, 64), 0.5, dtype=np.float32 if dtype == TensorProto.FLOAT else np.float16)
    array[40, 3] = value
    weight = numpy_helper.from_array(array, "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", dtype, [1, 64])],
        [helper.make_tensor_value_info("y", dtype, [1, 64])],
        [weight],
    )
    model = helper.make_model(graph)
    onnx.save(model, str(tmp_path / "g.onnx"), save_as_external_data=True, location="g.onnx_data", size_threshold=0)
    if np.isfinite(value):
        finite_weights.check_finite_graph(tmp_path / "g.onnx", what="--lora")
    else:
        with pytest.raises(ConversionError, match="NaN or infinite weights \\(w\\)"):
            finite_weights.check_finite_graph(tmp_path / "g.onnx", what="--lora")
