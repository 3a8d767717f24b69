"""The VAE's GroupNorms as onnxruntime's com.microsoft GroupNorm, rewritten in an exported graph (no torch needed).

GroupNorm exports as its decomposition (Reshape, InstanceNormalization, Reshape, Mul, Add), which every
onnxruntime EP runs. `fuse_group_norms` rewrites each one (and the SiLU after it) into com.microsoft GroupNorm,
which only onnxruntime's WebGPU EP (onnxruntime-web 1.31 and later) and GPU EPs run, channels-last only, hence the
Transposes around it: an opt-in variant for measuring, not what `convert` writes (export_vae(group_norm=True)
exports one; scripts/vae_group_norm.py makes one from a converted repository).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from builder.convert.onnx_graph import MS_DOMAIN


def fuse_group_norms(model: onnx.ModelProto, *, data_dir: Path | None = None) -> int:
    """Rewrite every exported GroupNorm into Transpose (channels first to last), com.microsoft GroupNorm
    (channels_last=1; activation=1 when a SiLU, x * Sigmoid(x), is all that reads it), Transpose back. Returns how
    many.

    Matches the decomposition in fp32 graphs and in their fp16 variants (a Cast to float32 before the
    InstanceNormalization and one back after it): Reshape(x, [0, G, -1]), InstanceNormalization with scale 1 and
    bias 0, Reshape to Shape(x), Mul by gamma [C, 1, 1], Add beta [C, 1, 1]. gamma and beta become [C] tensors in
    the graph (a few KB); a weight stored in external data is read from `data_dir`.
    """
    graph = model.graph
    index = _GraphIndex(model, data_dir)
    ranks = _ranks(model)
    fused: dict[int, list[onnx.NodeProto]] = {}
    gone: set[int] = set()
    for norm in [n for n in graph.node if n.op_type == "InstanceNormalization"]:
        found = _match_group_norm(norm, index)
        # The resnets' norms see [N, C, H, W]; the mid-block attention's [N, C, H*W].
        rank = ranks.get(found.x) if found is not None else None
        if found is None or rank not in (3, 4):
            continue
        to_last, to_first = ([0, 2, 3, 1], [0, 3, 1, 2]) if rank == 4 else ([0, 2, 1], [0, 2, 1])
        k = len(fused)
        names = (f"group_norm_{k}_gamma", f"group_norm_{k}_beta", f"group_norm_{k}_in", f"group_norm_{k}_out")
        graph.initializer.extend(
            [numpy_helper.from_array(found.gamma, names[0]), numpy_helper.from_array(found.beta, names[1])]
        )
        fused[id(norm)] = [
            helper.make_node("Transpose", [found.x], [names[2]], name=f"group_norm_{k}_channels_last", perm=to_last),
            helper.make_node(
                "GroupNorm",
                [names[2], names[0], names[1]],
                [names[3]],
                name=f"group_norm_{k}",
                domain=MS_DOMAIN,
                activation=int(found.silu),
                channels_last=1,
                epsilon=found.epsilon,
                groups=found.groups,
            ),
            helper.make_node(
                "Transpose", [names[3]], [found.out], name=f"group_norm_{k}_channels_first", perm=to_first
            ),
        ]
        gone |= {id(node) for node in found.removed}
    if not fused:
        return 0
    nodes: list[onnx.NodeProto] = []
    for node in graph.node:
        nodes.extend(fused.get(id(node), []))
        if id(node) not in gone:
            nodes.append(node)
    # The decompositions' shape constants are read by nothing now.
    outputs = {o.name for o in graph.output}
    while True:
        read = outputs | {name for node in nodes for name in node.input}
        kept = [node for node in nodes if any(out in read for out in node.output)]
        if len(kept) == len(nodes):
            break
        nodes = kept
    graph.ClearField("node")
    graph.node.extend(nodes)
    used = {name for node in graph.node for name in node.input}
    for i in reversed(range(len(graph.initializer))):
        if graph.initializer[i].name not in used:
            del graph.initializer[i]
    if not any(o.domain == MS_DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    return len(fused)


def _ranks(model: onnx.ModelProto) -> dict[str, int]:
    """The rank of every tensor shape inference can tell (weights need not be loaded)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    values = [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]
    return {v.name: len(v.type.tensor_type.shape.dim) for v in values if v.type.tensor_type.HasField("shape")}


class _GraphIndex:
    """Who produces and who reads each tensor of a graph, and the value of a constant one."""

    def __init__(self, model: onnx.ModelProto, data_dir: Path | None) -> None:
        self.producer = {out: node for node in model.graph.node for out in node.output}
        self.readers: dict[str, list[onnx.NodeProto]] = {}
        for node in model.graph.node:
            for name in node.input:
                self.readers.setdefault(name, []).append(node)
        self.initializers = {t.name: t for t in model.graph.initializer}
        self.data_dir = data_dir

    def constant(self, name: str) -> np.ndarray | None:
        if name in self.initializers:
            tensor = self.initializers[name]
            if tensor.data_location == onnx.TensorProto.EXTERNAL:
                if self.data_dir is None:
                    return None
                onnx.external_data_helper.load_external_data_for_tensor(tensor, str(self.data_dir))
            return numpy_helper.to_array(tensor)
        node = self.producer.get(name)
        if node is not None and node.op_type == "Constant":
            return numpy_helper.to_array(node.attribute[0].t)
        return None

    def only_reader(self, name: str, op_type: str) -> onnx.NodeProto | None:
        found = self.readers.get(name, [])
        return found[0] if len(found) == 1 and found[0].op_type == op_type else None

    def made_by(self, name: str, op_type: str) -> onnx.NodeProto | None:
        node = self.producer.get(name)
        return node if node is not None and node.op_type == op_type else None


@dataclass
class _GroupNormSite:
    removed: list[onnx.NodeProto]  # the decomposition's nodes (and the SiLU's, when it is fused)
    x: str  # the NCHW input
    out: str  # the tensor its readers read
    gamma: np.ndarray  # [C]
    beta: np.ndarray  # [C]
    groups: int
    epsilon: float
    silu: bool


def _past_cast(index: _GraphIndex, name: str, removed: list[onnx.NodeProto], *, downstream: bool) -> str:
    """`name`, or across the Cast an fp16 graph puts there (the Cast's output read, or its input made), which then
    goes into `removed`: the fp16 variant computes the decomposition in float32 between two Casts."""
    cast = index.only_reader(name, "Cast") if downstream else index.made_by(name, "Cast")
    if cast is None:
        return name
    removed.append(cast)
    return str(cast.output[0] if downstream else cast.input[0])


def _match_group_norm(norm: onnx.NodeProto, index: _GraphIndex) -> _GroupNormSite | None:
    """The exported GroupNorm around `norm` (see fuse_group_norms), or None when `norm` is not one."""
    removed = [norm]
    reshape = index.made_by(_past_cast(index, norm.input[0], removed, downstream=False), "Reshape")
    target = index.constant(reshape.input[1]) if reshape is not None else None
    scale, bias = index.constant(norm.input[1]), index.constant(norm.input[2])
    if reshape is None or target is None or target.shape != (3,) or target[0] != 0 or target[2] != -1:
        return None
    if scale is None or bias is None or not (np.all(scale == 1) and np.all(bias == 0)):
        return None
    x = reshape.input[0]
    back = index.only_reader(norm.output[0], "Reshape")
    shape = index.made_by(back.input[1], "Shape") if back is not None else None
    if back is None or shape is None or shape.input[0] != x:
        return None
    removed += [reshape, back, shape]
    mul = index.only_reader(_past_cast(index, back.output[0], removed, downstream=True), "Mul")
    add = index.only_reader(mul.output[0], "Add") if mul is not None else None
    if mul is None or add is None:
        return None
    gamma, beta = index.constant(mul.input[1]), index.constant(add.input[1])
    groups = int(target[1])
    if gamma is None or beta is None or gamma.size % groups or beta.size != gamma.size:
        return None
    removed += [mul, add]
    out = add.output[0]
    # A SiLU reads the output twice: Sigmoid(out), then out * that.
    readers = index.readers.get(out, [])
    sigmoid = next((r for r in readers if r.op_type == "Sigmoid"), None)
    silu = index.only_reader(sigmoid.output[0], "Mul") if sigmoid is not None else None
    fuse_silu = (
        sigmoid is not None
        and silu is not None
        and len(readers) == 2
        and silu in readers
        and set(silu.input) == {out, sigmoid.output[0]}
    )
    if sigmoid is not None and silu is not None and fuse_silu:
        removed += [sigmoid, silu]
        out = silu.output[0]
    epsilon = float(helper.get_attribute_value(next(a for a in norm.attribute if a.name == "epsilon")))
    return _GroupNormSite(
        removed=removed,
        x=x,
        out=out,
        gamma=gamma.reshape(-1),
        beta=beta.reshape(-1),
        groups=groups,
        epsilon=epsilon,
        silu=bool(fuse_silu),
    )
