"""builder/convert/group_norm.py fuse_group_norms: the VAE's exported GroupNorms as com.microsoft GroupNorm.

onnxruntime's CPU EP has no GroupNorm kernel, so the rewritten graph is evaluated here by onnx's reference
evaluator, with GroupNorm written out from onnxruntime's contrib-op definition (channels last, SiLU activation), and
compared with the exported graph run by onnxruntime on the CPU. tests/browser/test_vae_group_norm_webgpu.py runs
it on WebGPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun

from builder import REPO_ROOT
from builder.convert.group_norm import fuse_group_norms
from builder.repo import manifest

# Measured on the seed-0 tiny model: max |diff| 1e-6 order (float32 sums in another order).
FP32_MAX_ABS = 1e-4


class GroupNorm(OpRun):
    """com.microsoft GroupNorm (onnxruntime contrib_defs): X [N, spatial..., C], per (n, group) mean and variance
    over the spatial dims and the group's channels, then gamma and beta per channel, then SiLU when activation is 1."""

    op_domain = "com.microsoft"

    def _run(
        self,
        x: Any,
        gamma: Any,
        beta: Any,
        activation: int = 0,
        channels_last: int = 1,
        epsilon: float = 1e-5,
        groups: int = 1,
    ) -> tuple[Any]:
        assert channels_last == 1
        n, c = x.shape[0], x.shape[-1]
        grouped = x.astype(np.float32).reshape(n, -1, groups, c // groups)
        mean = grouped.mean(axis=(1, 3), keepdims=True)
        var = grouped.var(axis=(1, 3), keepdims=True)
        y = ((grouped - mean) / np.sqrt(var + epsilon)).reshape(x.shape) * gamma + beta
        if activation == 1:
            y = y / (1 + np.exp(-y))
        return (y.astype(x.dtype),)


def decoder_graph(repo: Path, variant: str) -> tuple[onnx.ModelProto, Path]:
    path = repo / manifest.graph_path("vae_decoder", variant)
    return onnx.load(path, load_external_data=False), path.parent


def test_fused_graph_decodes_what_the_exported_one_does(tiny_models: dict[str, Path]) -> None:
    model, folder = decoder_graph(tiny_models["fp32"], "fp32")
    exported = ort.InferenceSession(str(folder / "vae_decoder_fp32.onnx"), providers=["CPUExecutionProvider"])
    norms = sum(1 for node in model.graph.node if node.op_type == "InstanceNormalization")
    assert fuse_group_norms(model, data_dir=folder) == norms > 0
    ops = {node.op_type for node in model.graph.node}
    assert "InstanceNormalization" not in ops and "GroupNorm" in ops
    activations = [
        next(a.i for a in node.attribute if a.name == "activation")
        for node in model.graph.node
        if node.op_type == "GroupNorm"
    ]
    # Only the attention's has no SiLU.
    assert activations.count(0) == 1 and activations.count(1) == norms - 1, activations
    onnx.load_external_data_for_model(model, str(folder))
    fused = ReferenceEvaluator(model, new_ops=[GroupNorm])
    latents = np.random.default_rng(0).standard_normal((1, 128, 3, 2)).astype(np.float32)
    expected = exported.run(None, {"latents": latents})[0]
    outputs = fused.run(None, {"latents": latents})
    assert isinstance(outputs, list)  # None asks for every output, as a list
    got = outputs[0]
    assert got.shape == expected.shape
    assert np.abs(got - expected).max() <= FP32_MAX_ABS


def test_fp16_graph_keeps_its_types_and_drops_the_casts_around_each_norm(tiny_models: dict[str, Path]) -> None:
    model, folder = decoder_graph(tiny_models["q4"], "fp16")
    casts = sum(1 for node in model.graph.node if node.op_type == "Cast")
    norms = fuse_group_norms(model, data_dir=folder)
    assert norms > 0
    # The decomposition computes in float32 between two Casts; GroupNorm takes and gives float16 itself.
    assert sum(1 for node in model.graph.node if node.op_type == "Cast") == casts - 2 * norms
    weights = {t.name: t for t in model.graph.initializer}
    for node in (n for n in model.graph.node if n.op_type == "GroupNorm"):
        assert {weights[name].data_type for name in node.input[1:]} == {onnx.TensorProto.FLOAT16}, node.name


def test_a_graph_without_group_norms_is_left_as_it_is(tiny_models: dict[str, Path]) -> None:
    model, folder = decoder_graph(tiny_models["fp32"], "fp32")
    assert fuse_group_norms(model, data_dir=folder) > 0
    again = model.SerializeToString()
    assert fuse_group_norms(model, data_dir=folder) == 0
    assert model.SerializeToString() == again


def test_the_script_writes_a_copy_whose_vae_graphs_use_group_norm(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    """scripts/vae_group_norm.py on a repository on the same file system: weights copied, graphs rewritten, the source
    still readable by onnx."""
    import importlib.util
    import shutil

    spec = importlib.util.spec_from_file_location("vae_group_norm", REPO_ROOT / "scripts" / "vae_group_norm.py")
    assert spec and spec.loader
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    source = tmp_path / "repo"
    shutil.copytree(tiny_models["q4"], source)
    # Every weight in the external-data file, as at full size, where the norms' scales are too large to stay inline:
    # the rewrite then reads external data that the copy also links.
    for graph in manifest.load(source).graphs:
        if graph.component in ("vae_decoder", "vae_encoder"):
            model = onnx.load(source / graph.path)
            data_name = f"{Path(graph.path).name}_data"
            (source / graph.path).with_name(data_name).unlink(missing_ok=True)
            onnx.save(model, source / graph.path, save_as_external_data=True, location=data_name, size_threshold=0)
    out = tmp_path / "group-norm"
    fused = script.rewrite(source, out)
    rewritten = manifest.load(out)
    vae_paths = {g.path for g in rewritten.graphs if g.component in ("vae_decoder", "vae_encoder")}
    assert set(fused) == vae_paths and all(count > 0 for count in fused.values())
    for path in vae_paths:
        graph = onnx.load(out / path, load_external_data=False)
        assert any(node.op_type == "GroupNorm" for node in graph.graph.node), path
        assert rewritten.files[path].size == (out / path).stat().st_size
    for data in (out / "transformer").iterdir():
        if data.name.endswith(".onnx_data") or ".onnx_data_" in data.name:
            assert data.read_bytes() == (source / "transformer" / data.name).read_bytes()
    # The source stays readable: onnx refuses external data in a file with several hard links.
    for graph in manifest.load(source).graphs:
        if graph.component == "vae_decoder":
            onnx.load(source / graph.path)
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # no staging folder left
