"""Malformed LoRA files given to `klein-web convert --lora`: one line each, exit code 1, never a traceback.

Each file is written byte by byte here: a safetensors header that is JSON but no object, tensor entries whose
`data_offsets`, `dtype` or `shape` are missing or of the wrong kind, a tensor entry that is a string, metadata that
is no string map; a LoRA config whose rank_pattern / alpha_pattern key is no regular expression; a kohya fused qkv
whose lora_up rows do not split in three. Nothing may be written beside OUT.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import torch
from click.testing import CliRunner
from safetensors.torch import save_file

from builder.cli import main
from builder.convert import lora as lora_module

RANK = 4
A_KEY = "transformer.proj_out.lora_A.weight"
B_KEY = "transformer.proj_out.lora_B.weight"


def raw_safetensors(header: Any, data: bytes) -> bytes:
    text = json.dumps(header).encode("utf-8")
    return struct.pack("<Q", len(text)) + text + data


def good_entry(shape: list[int], begin: int = 0) -> dict[str, Any]:
    return {"dtype": "F32", "shape": shape, "data_offsets": [begin, begin + 4 * shape[0] * shape[1]]}


def two_tensors(**a_changes: Any) -> dict[str, Any]:
    """proj_out's A [4, 32] and B [128, 4] in F32, with A's entry changed as given."""
    a = {**good_entry([RANK, 32]), **a_changes}
    return {A_KEY: a, B_KEY: good_entry([128, RANK], begin=512)}  # B: bytes 512 to 2560


HEADERS: dict[str, Any] = {
    "header-a-list": [],
    "header-a-number": 3,
    "header-a-string": "tensors",
    "header-null": None,
    "data_offsets-three-numbers": two_tensors(data_offsets=[0, 256, 512]),
    "data_offsets-a-string": two_tensors(data_offsets="0-512"),
    "data_offsets-reversed": two_tensors(data_offsets=[512, 0]),
    "no-dtype": {A_KEY: {"shape": [RANK, 32], "data_offsets": [0, 512]}},
    "dtype-a-number": two_tensors(dtype=7),
    "shape-a-string": two_tensors(shape="4x32"),
    "shape-negative": two_tensors(shape=[-4, -32]),
    "shape-of-floats": two_tensors(shape=[4.5, 32]),
    "entry-a-string": {A_KEY: "F32 [4, 32]", B_KEY: good_entry([128, RANK], begin=512)},
    "metadata-a-list": {"__metadata__": ["x"], **two_tensors()},
    "metadata-values-not-strings": {"__metadata__": {"format": 3}, **two_tensors()},
}


def config_file(path: Path, **config: Any) -> Path:
    generator = torch.Generator().manual_seed(0)
    packed = {"r": RANK, "lora_alpha": RANK, **config}
    save_file(
        {A_KEY: torch.randn(RANK, 32, generator=generator), B_KEY: torch.randn(128, RANK, generator=generator)},
        str(path),
        metadata={lora_module.METADATA_KEY: json.dumps({f"transformer.{k}": v for k, v in packed.items()})},
    )
    return path


def kohya_qkv(path: Path, rows: int) -> Path:
    """kohya's fused img_attn.qkv of the tiny model (inner 32): lora_up must have 3 x 32 rows."""
    save_file(
        {
            "lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight": torch.randn(RANK, 32),
            "lora_unet_double_blocks_0_img_attn_qkv.lora_up.weight": torch.randn(rows, RANK),
            "lora_unet_double_blocks_0_img_attn_qkv.alpha": torch.tensor(4.0),
        },
        str(path),
    )
    return path


def malformed(folder: Path) -> dict[str, Path]:
    files = {}
    for name, header in HEADERS.items():
        files[name] = folder / f"{name}.safetensors"
        files[name].write_bytes(raw_safetensors(header, b"\0" * 2560))
    files["rank_pattern-not-a-regex"] = config_file(folder / "rank.safetensors", rank_pattern={"proj_(out": 4})
    files["alpha_pattern-not-a-regex"] = config_file(folder / "alpha.safetensors", alpha_pattern={"*proj": 2.0})
    files["r-a-string"] = config_file(folder / "r.safetensors", r="four")
    files["kohya-qkv-95-rows"] = kohya_qkv(folder / "qkv95.safetensors", 95)
    files["kohya-qkv-97-rows"] = kohya_qkv(folder / "qkv97.safetensors", 97)
    return files


def test_malformed_lora_files_give_one_line(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "loras").mkdir()
    files = malformed(tmp_path / "loras")
    failures = []
    for name, path in files.items():
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
        errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
        print(f"{name}: exit {result.exit_code}: {errors or repr(result.exception)}")
        if not (
            result.exit_code == 1
            and len(errors) == 1
            and str(path) in errors[0]
            and "Traceback" not in result.output
            and result.exception is not None
            and type(result.exception) is SystemExit
            and list(parent.iterdir()) == []
        ):
            failures.append(name)
    assert failures == []
