"""`klein-web convert --precision q4f16` on the tiny model: graph contract and measured fidelity bounds.

The q4f16 repo is converted once per module from make-tiny's diffusers folder (about 30 s on 2 cores;
make-tiny itself stays q4 + fp32 so the session fixture stays fast). Expected images come from the fp32
and q4 graphs of the same model through builder.pipeline.reference, computed at test time.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from graph_helpers import at_accuracy_level
from onnx import TensorProto

from builder.convert.fp16_compute import Q4F16_FP32_SCOPES, residual_adds, value_types
from builder.convert.fp16_storage import STORED_FP16
from builder.convert.onnx_checks import ALLOWED_OPS, check_no_float64
from builder.convert.onnx_graph import IR_VERSION, MS_DOMAIN
from builder.pipeline.imaging import psnr
from builder.pipeline.reference import generate
from builder.repo import manifest as repo
from builder.repo import verify

PROMPTS = ("a red fox sitting in the snow", "x", "an astronaut riding a horse on the moon, 35mm photo")

# Measured on make-tiny seed 0, steps 4, seed 1 (PSNR in dB, uint8 images):
#   64x64:   q4f16 vs fp32 34.3, q4 vs fp32 34.3, q4f16 vs q4 55.1-56.6
#   128x128: q4f16 vs fp32 38.4, q4 vs fp32 38.4, q4f16 vs q4 56.1-56.5
# i.e. q4f16 adds a small fraction of q4's own quantisation error. (The q4 graphs run accuracy_level 4, int8
# activations; while the q4 transformer ran at level 0, q4f16 vs q4 was 59.5-61.9 dB.) Bounds leave a few dB
# of margin.
Q4F16_VS_Q4_MIN_DB = 50.0
Q4F16_VS_FP32_MIN_DB = 32.0


def test_q4f16_repo_layout_and_manifest(q4f16_repo: Path) -> None:
    manifest = repo.load(q4f16_repo)
    verify.check_files(q4f16_repo, manifest, log=print)
    variants = {(g.component, g.variant): g for g in manifest.graphs}
    # q4 and q4f16 side by side (adapters without shader-f16 run q4), plus both VAE decoders and encoders.
    assert set(variants) == {
        ("text_encoder", "q4"),
        ("text_encoder", "q4f16"),
        ("transformer", "q4"),
        ("transformer", "q4f16"),
        ("vae_decoder", "fp16"),
        ("vae_decoder", "fp32"),
        ("vae_encoder", "fp16"),
        ("vae_encoder", "fp32"),
    }
    for component in ("text_encoder", "transformer"):
        fast = variants[(component, "q4f16")]
        assert fast.requires_f16 and fast.cpu_nodes_without_f16 == [] and "fp16 activations" in fast.precision
        assert fast.attention_query_blocks == variants[(component, "q4")].attention_query_blocks
        assert len(fast.external_data) >= 2  # split like the real repo (tiny caps)


@pytest.mark.parametrize("component", ["text_encoder", "transformer"])
def test_q4f16_graph_contract(q4f16_repo: Path, component: str) -> None:
    path = q4f16_repo / repo.graph_path(component, "q4f16")
    model = onnx.load(str(path), load_external_data=False)
    assert model.ir_version <= IR_VERSION
    ops = {(n.domain if n.domain != "ai.onnx" else "", n.op_type) for n in model.graph.node}
    assert ops <= ALLOWED_OPS[component], ops - ALLOWED_OPS[component]
    check_no_float64(model, what=component)
    # fp32 graph I/O: the app's contract is unchanged.
    inputs, outputs = repo.CONTRACT[component]
    elem = {"float32": TensorProto.FLOAT, "int64": TensorProto.INT64}
    assert [(v.name, v.type.tensor_type.elem_type) for v in model.graph.input] == [
        (s.name, elem[s.dtype]) for s in inputs
    ]
    assert [(v.name, v.type.tensor_type.elem_type) for v in model.graph.output] == [
        (s.name, elem[s.dtype]) for s in outputs
    ]
    # Every MatMulNBits runs at accuracy_level 0 with fp16 scales, except the fp32 AdaLN / time embedding, whose
    # fp32 scales are stored in fp16 and cast up when the session is created; Softmax / norm statistics stay fp32.
    inits = {t.name: t for t in model.graph.initializer}
    nbits = [n for n in model.graph.node if n.domain == MS_DOMAIN and n.op_type == "MatMulNBits"]
    assert nbits
    for node in nbits:
        if any(scope in node.name for scope in Q4F16_FP32_SCOPES):
            # fp32 scales: stored in fp16 beside a Cast up, or inline as float32 when too small to be worth it.
            stored = inits.get(node.input[2] + STORED_FP16)
            scales = stored if stored is not None else inits[node.input[2]]
            assert scales.data_type == (TensorProto.FLOAT if stored is None else TensorProto.FLOAT16), node.name
        else:
            assert inits[node.input[2]].data_type == TensorProto.FLOAT16, node.name
        assert {a.name: a.i for a in node.attribute}["accuracy_level"] == 0
    casts_up = {
        n.output[0]
        for n in model.graph.node
        if n.op_type == "Cast" and {a.name: a.i for a in n.attribute}["to"] == TensorProto.FLOAT
    }
    # The scores reach Softmax in fp32: cast up, or from the fp32 Add of the attention mask.
    fp32_adds = {out for n in model.graph.node if n.name in residual_adds(model.graph) for out in n.output}
    softmax_inputs = [n.input[0] for n in model.graph.node if n.op_type == "Softmax"]
    assert softmax_inputs and all(name in casts_up | fp32_adds for name in softmax_inputs)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.type for i in session.get_outputs()] == ["tensor(float)"]


def test_q4f16_embeds_and_step_close_to_q4(q4f16_repo: Path) -> None:
    """One text-encoder call and one transformer step: q4f16 vs q4 (same packed weights)."""
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 151000, size=(1, 512)).astype(np.int64)
    mask = np.zeros((1, 512), dtype=np.int64)
    mask[:, :40] = 1

    # q4f16 computes the q4 graph's packed weights on fp16 activations: it is checked against that graph at
    # accuracy_level 0 (fp32 activations), not as saved (level 4: int8 activations, a rounding of its own).
    def plain_and_fast(component: str) -> dict[str, ort.InferenceSession]:
        return {
            "q4": ort.InferenceSession(
                at_accuracy_level(q4f16_repo / repo.graph_path(component, "q4"), 0), providers=["CPUExecutionProvider"]
            ),
            "q4f16": ort.InferenceSession(
                str(q4f16_repo / repo.graph_path(component, "q4f16")), providers=["CPUExecutionProvider"]
            ),
        }

    embeds = {
        variant: session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
        for variant, session in plain_and_fast("text_encoder").items()
    }
    embeds_error = np.abs(embeds["q4f16"] - embeds["q4"]).max() / np.abs(embeds["q4"]).max()
    assert embeds_error < 3e-3, embeds_error  # measured 7.7e-4

    h = w = 16
    feed = {
        "hidden_states": rng.standard_normal((1, h * w, 128)).astype(np.float32),
        "encoder_hidden_states": embeds["q4"],
        "timestep": np.array([0.9], dtype=np.float32),
        "img_ids": np.array([(0, i, j, 0) for i in range(h) for j in range(w)], dtype=np.int64),
        "txt_ids": np.array([(0, 0, 0, k) for k in range(512)], dtype=np.int64),
    }
    steps = {variant: session.run(None, feed)[0] for variant, session in plain_and_fast("transformer").items()}
    error = np.abs(steps["q4f16"] - steps["q4"]).max() / np.abs(steps["q4"]).max()
    print(f"q4f16 vs q4 at accuracy_level 0: text encoder {embeds_error:.3g}, transformer step {error:.3g}")
    assert np.isfinite(steps["q4f16"]).all() and error < 3e-3, error  # measured 6.4e-4


@pytest.mark.parametrize("size", [64, 128])
def test_q4f16_images_hold_psnr(q4f16_repo: Path, tiny_models: dict[str, Path], size: int) -> None:
    """3 prompts x 2 sizes through the whole pipeline (builder.pipeline.reference with pinned variants)."""

    def image(model_dir: Path, variant: str | None, prompt: str) -> np.ndarray:
        variants = None if variant is None else {"text_encoder": variant, "transformer": variant, "vae_decoder": "fp32"}
        return generate(
            model_dir, prompt=prompt, seed=1, width=size, height=size, steps=4, log=lambda _m: None, variants=variants
        ).image

    for prompt in PROMPTS:
        fast = image(q4f16_repo, "q4f16", prompt)
        against_q4, against_fp32 = (
            psnr(fast, image(q4f16_repo, "q4", prompt)),
            psnr(fast, image(tiny_models["fp32"], None, prompt)),
        )
        print(f"{size}x{size} {prompt!r}: q4f16 vs q4 {against_q4:.1f} dB, vs fp32 {against_fp32:.1f} dB")
        assert against_q4 >= Q4F16_VS_Q4_MIN_DB, prompt
        assert against_fp32 >= Q4F16_VS_FP32_MIN_DB, prompt


def test_q4f16_accumulates_the_residual_stream_in_fp32() -> None:
    """Real checkpoints carry residual activations past fp16's 65504 (random tiny weights never do):
    a pre-norm block `x + W @ LayerNorm(x)` with |x| ~ 1e5 must stay finite and right in q4f16."""
    from onnx import helper, numpy_helper

    from builder.convert.fp16_compute import to_q4f16
    from builder.convert.quantize import quantize_matmul

    rng = np.random.default_rng(0)
    width = 64
    weight = rng.normal(0, 0.1, (width, width)).astype(np.float32)
    nodes = [
        helper.make_node(
            "LayerNormalization",
            ["x", "ln_scale", "ln_bias"],
            ["n"],
            name="/block/norm/LayerNorm",
            axis=-1,
            epsilon=1e-6,
        ),
        helper.make_node("MatMul", ["n", "w"], ["branch"], name="/block/ff/MatMul"),
        helper.make_node("Add", ["x", "branch"], ["y"], name="/block/Add"),
    ]
    graph = helper.make_graph(
        nodes,
        "residual",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "seq", width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "seq", width])],
        initializer=[
            numpy_helper.from_array(np.ones(width, np.float32), "ln_scale"),
            numpy_helper.from_array(np.zeros(width, np.float32), "ln_bias"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid(MS_DOMAIN, 1)])
    model.ir_version = IR_VERSION
    quantize_matmul(model.graph, model.graph.node[1], weight, accuracy_level=4)  # as convert's q4 graphs are
    fast = to_q4f16(model)

    x = (rng.normal(0, 1, (1, 8, width)) * 1e5).astype(np.float32)  # past fp16's largest finite value
    # onnxruntime's CPU EP has no fp16 Add kernel: it casts around it and drops the Cast pair, so a CPU run
    # cannot show the saturation the WebGPU EP would hit. Check the graph itself: the residual Add reads the
    # fp32 stream directly, and the fp16 branch is cast up to meet it.
    add = next(node for node in fast.graph.node if node.name == "/block/Add")
    producers = {out: node for node in fast.graph.node for out in node.output}
    assert add.input[0] == "x", list(add.input)
    cast_up = producers[add.input[1]]
    assert cast_up.op_type == "Cast" and cast_up.attribute[0].i == TensorProto.FLOAT, cast_up
    session = ort.InferenceSession(fast.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"x": x})
    assert np.isfinite(y).all(), "the residual Add saturated in fp16"
    branch = ((x - x.mean(-1, keepdims=True)) / x.std(-1, keepdims=True)) @ weight
    np.testing.assert_allclose(y, x + branch, rtol=0, atol=np.abs(x).max() * 1e-6 + np.abs(branch).max() * 0.2)


@pytest.mark.parametrize("variant", ["fp32", "q4", "q4f16"])
def test_every_rms_norm_and_rotary_embedding_is_one_op(
    q4f16_repo: Path, tiny_models: dict[str, Path], variant: str
) -> None:
    """RMSNorm exports as one SimplifiedLayerNormalization and RoPE as one RotaryEmbedding per use, the
    single-stream projection and every SwiGLU are cut by one Split: none of the kernels they replace is left
    (on WebGPU each was a dispatch over the whole activation). In q4f16 both fused ops run in fp32."""
    import json

    root = {"fp32": tiny_models["fp32"], "q4": tiny_models["q4"], "q4f16": q4f16_repo}[variant]
    config = json.loads((tiny_models["diffusers"] / "transformer" / "config.json").read_text())
    double, single = config["num_layers"], config["num_single_layers"]
    text_layers = 27  # PromptEmbedder runs layers 1..27
    expected = {
        "transformer": {
            "SimplifiedLayerNormalization": 4 * double + 2 * single,  # q, k (+ text q, k)
            "RotaryEmbedding": 2 * (double + single),
            "Split": single + 2 * double,
        },
        "text_encoder": {"SimplifiedLayerNormalization": 4 * text_layers, "RotaryEmbedding": 2 * text_layers},
    }
    for component, counts in expected.items():
        graph_variant = "fp32" if variant == "fp32" else variant
        model = onnx.load(str(root / repo.graph_path(component, graph_variant)), load_external_data=False)
        ops = [n.op_type for n in model.graph.node]
        assert {op: ops.count(op) for op in counts} == counts, component
        assert "Pow" not in ops and "ReduceMean" not in ops and "Neg" not in ops, component
        fused = [n for n in model.graph.node if n.op_type in ("SimplifiedLayerNormalization", "RotaryEmbedding")]
        types = value_types(model)
        assert all(types[n.input[0]] == types[n.output[0]] == TensorProto.FLOAT for n in fused), component
        rotary = [n for n in fused if n.op_type == "RotaryEmbedding"]
        interleaved = {next(a.i for a in n.attribute if a.name == "interleaved") for n in rotary}
        assert interleaved == ({1} if component == "transformer" else {0}), component
    # The single-stream blocks' Split gives q, k, v, gate and up at once.
    transformer = onnx.load(str(root / repo.graph_path("transformer", variant)), load_external_data=False)
    assert (
        sorted(len(n.output) for n in transformer.graph.node if n.op_type == "Split") == [2] * 2 * double + [5] * single
    )
