"""builder.convert.checkpoint: safetensors read tensor by tensor, skeleton modules, and the converter's streaming."""

from __future__ import annotations

import json
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from builder.convert import checkpoint as ckpt
from builder.convert.checkpoint import Checkpoint, build_skeleton, weight_value
from builder.errors import ConversionError


def test_reads_every_float_dtype_exactly_and_across_shards(tmp_path: Path) -> None:
    gen = torch.Generator().manual_seed(0)
    tensors = {
        "a.bf16": torch.randn(3, 5, generator=gen).to(torch.bfloat16),
        "b.fp16": (torch.randn(7, generator=gen) * 1000).to(torch.float16),
        "c.fp32": torch.randn(2, 2, 2, generator=gen),
        "d.int64": torch.arange(6, dtype=torch.int64).reshape(2, 3),
    }
    save_file({k: v for k, v in tensors.items() if k < "c"}, str(tmp_path / "model-00001-of-00002.safetensors"))
    save_file({k: v for k, v in tensors.items() if k >= "c"}, str(tmp_path / "model-00002-of-00002.safetensors"))
    store = Checkpoint(tmp_path)
    assert sorted(store.tensors) == sorted(tensors)
    for key, value in tensors.items():
        got = store.read(key)
        want = value.float().numpy() if value.is_floating_point() else value.numpy()
        assert got.dtype == want.dtype and got.shape == want.shape, key
        np.testing.assert_array_equal(got, want, err_msg=key)
        assert store.shape(key) == tuple(value.shape)


def test_index_and_standard_names_choose_the_files(tmp_path: Path) -> None:
    """A sharded index names its shards; a variant file beside the standard one is ignored."""
    save_file({"a": torch.zeros(2)}, str(tmp_path / "diffusion_pytorch_model.safetensors"))
    save_file({"a": torch.ones(2, dtype=torch.float16)}, str(tmp_path / "diffusion_pytorch_model.fp16.safetensors"))
    np.testing.assert_array_equal(Checkpoint(tmp_path).read("a"), np.zeros(2, np.float32))

    sharded = tmp_path / "sharded"
    sharded.mkdir()
    save_file({"a": torch.ones(2)}, str(sharded / "model-00001-of-00002.safetensors"))
    save_file({"b": torch.ones(3)}, str(sharded / "model-00002-of-00002.safetensors"))
    save_file({"a": torch.ones(2)}, str(sharded / "stale-copy.safetensors"))
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index))
    assert sorted(Checkpoint(sharded).tensors) == ["a", "b"]
    (sharded / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(ConversionError, match="lacks the shard"):
        Checkpoint(sharded)


def test_bad_checkpoints_are_named_with_the_fix(tmp_path: Path) -> None:
    (tmp_path / "pytorch_model.bin").write_bytes(b"pickle")
    with pytest.raises(ConversionError, match=r"pytorch_model\.bin.*safe_serialization=True"):
        Checkpoint(tmp_path)

    good = tmp_path / "good"
    good.mkdir()
    save_file({"w": torch.ones(4, 4)}, str(good / "model.safetensors"))
    with pytest.raises(ConversionError, match="'missing' is missing"):
        Checkpoint(good).read("missing")
    with pytest.raises(ConversionError, match=r"shape \[4, 4\].*\[4, 5\]"):
        Checkpoint(good).read("w", shape=(4, 5))

    truncated = tmp_path / "truncated"
    truncated.mkdir()
    data = (good / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").write_bytes(data[:-8])
    with pytest.raises(ConversionError, match="damaged"):
        Checkpoint(truncated)

    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "model.safetensors").write_bytes(b"\xff" * 64)
    with pytest.raises(ConversionError, match="not a safetensors file"):
        Checkpoint(garbage)

    twice = tmp_path / "twice"
    twice.mkdir()
    save_file({"w": torch.ones(2)}, str(twice / "a.safetensors"))
    save_file({"w": torch.ones(2)}, str(twice / "b.safetensors"))
    with pytest.raises(ConversionError, match="stored twice"):
        Checkpoint(twice)


def test_skeleton_holds_no_weights_and_reads_them_from_the_checkpoint(tiny_models: dict[str, Path]) -> None:
    from diffusers import AutoencoderKLFlux2

    folder = tiny_models["diffusers"] / "vae"
    real = AutoencoderKLFlux2.from_pretrained(folder)
    skeleton = build_skeleton(
        lambda: AutoencoderKLFlux2.from_config(AutoencoderKLFlux2.load_config(folder)), Checkpoint(folder)
    )
    real_params = dict(real.named_parameters())
    assert set(dict(skeleton.named_parameters())) == set(real_params)
    for name, param in skeleton.named_parameters():
        assert param.untyped_storage().nbytes() == 4, f"{name} holds real memory"
        np.testing.assert_array_equal(weight_value(param), real_params[name].detach().numpy(), err_msg=name)
    # Persistent buffers (the latent BatchNorm statistics) are real values from the checkpoint.
    torch.testing.assert_close(skeleton.bn.running_mean, real.bn.running_mean, rtol=0, atol=0)
    torch.testing.assert_close(skeleton.bn.running_var, real.bn.running_var, rtol=0, atol=0)


def test_skeleton_rejects_a_checkpoint_that_does_not_match_its_config(
    tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    from diffusers import AutoencoderKLFlux2

    folder = tiny_models["diffusers"] / "vae"
    config = json.loads((folder / "config.json").read_text())
    config["latent_channels"] = 16
    with pytest.raises(ConversionError, match=r"does not match its config\.json"):
        build_skeleton(lambda: AutoencoderKLFlux2.from_config(config), Checkpoint(folder))


def test_convert_streams_weights_one_at_a_time(
    tiny_models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The converter never holds two checkpoint tensors at once, nor the checkpoint: each weight read is
    placed (stored or quantised) and freed before the next read. That is what bounds its peak memory."""
    from builder.convert.convert import convert

    alive: set[int] = set()
    most = 0
    reads: dict[str, int] = {}
    original = ckpt.Checkpoint.read

    def tracked_read(self: Checkpoint, key: str, **kwargs: Any) -> np.ndarray:
        nonlocal most
        array = original(self, key, **kwargs)
        token = id(array)
        alive.add(token)
        weakref.finalize(array, alive.discard, token)
        most = max(most, len(alive))
        reads[f"{self.folder.name}/{key}"] = reads.get(f"{self.folder.name}/{key}", 0) + 1
        return array

    monkeypatch.setattr(ckpt.Checkpoint, "read", tracked_read)
    # One process (jobs=1): the patched reader is this process's; the parts' own processes stream the same way.
    convert(tiny_models["diffusers"], tmp_path / "repo", precision="q4f16", log=lambda _m: None, jobs=1)
    assert most == 1, f"{most} checkpoint tensors were alive at once"
    # Each weight is read once (q4f16 is derived from the saved q4 graph, not re-read), lm_head never.
    assert reads and max(reads.values()) == 1, sorted(k for k, n in reads.items() if n > 1)[:5]
    assert not any("lm_head" in key for key in reads)
