"""Attention that fits the adapter's buffer limit: split the decomposed attention of an ONNX graph into query blocks.

The exported graphs compute attention as `MatMul(q, k^T) -> Softmax -> MatMul(., v)`, which materialises
the whole [heads, tokens, tokens] score tensor in one buffer. At 1024^2 px that is 1 GiB per VAE
mid-block attention (16384^2 fp32) and 2 GB per transformer layer (24 x 4608^2 fp32) -- over the
`maxBufferSize` of many browsers' adapters (1 GiB on SwiftShader), so the session fails to run.

`chunk_attention` rewrites every such site into `query_blocks` blocks along the query axis:

    q -> Slice(rows b_i .. b_{i+1}) -> MatMul(., k^T) -> [Mul scale, Cast] -> Softmax -> [Cast] -> MatMul(., v) -> Concat

(the Casts are the fp16 graphs' fp32 Softmax).

This is exact (softmax normalises each query row on its own; k and v are shared), uses only ops in the
allowed lists (Shape, Mul, Div, Slice, Concat on int64 shape values), and the block count is fixed at
conversion time while the token count stays dynamic: block i covers rows [i*S//N, (i+1)*S//N), so the
largest score buffer is heads * ceil(S/N) * S values. `query_blocks_for` picks N so that buffer stays
under MAX_ATTENTION_BUFFER_BYTES at the longest supported attention (a 2048^2 px image; for the transformer also
a 1024^2 edit with four reference images); the manifest records
N per graph (GraphEntry.attention_query_blocks) and the app computes the footprint from it.

Blocks cost kernels, so the transformer gets one graph per size class (`size_classes`, written by
builder.convert.convert_graphs.write_size_classes on the same weight files), each split just enough for its sizes.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper, numpy_helper

from builder.errors import ConversionError

# Largest supported image side (px) and the byte budget of one attention score buffer at that size.
# Half of SwiftShader's 1 GiB maxBufferSize, so the limit holds with room for allocator rounding.
MAX_IMAGE_SIDE = 2048
MAX_ATTENTION_BUFFER_BYTES = 512 * 1024 * 1024

# Tokens per image side in each graph's attention: transformer tokens are 16x16-px patches (plus the
# 512 text tokens of the joint attention); the VAE mid-block attends over the 8x-downsampled grid.
TEXT_TOKENS = 512


# Editing adds the tokens of up to 4 reference images, each used at up to 1024^2 px (4096 tokens): the
# numbers of builder.pipeline.limits REFERENCES_MAX and IMAGE_AREA_MAX, which tests/test_attention.py holds
# equal (builder.convert does not import the pipeline). The longest transformer attention the converter sizes for is
# a 1024^2 edit with four such references, or a 2048^2 text-to-image, whichever is longer.
REFERENCE_TOKENS_MAX = 4 * (1024 // 16) ** 2
MAX_TRANSFORMER_TOKENS = max((MAX_IMAGE_SIDE // 16) ** 2, (1024 // 16) ** 2 + REFERENCE_TOKENS_MAX) + TEXT_TOKENS


def max_attention_tokens(component: str, *, side: int | None = None) -> int:
    """Attention sequence length at a side x side image (default: the longest supported): what chunking must fit."""
    if component == "transformer":
        return MAX_TRANSFORMER_TOKENS if side is None else (side // 16) ** 2 + TEXT_TOKENS
    if component in ("vae_decoder", "vae_encoder"):
        return ((MAX_IMAGE_SIDE if side is None else side) // 8) ** 2
    raise ValueError(f"component {component!r} has no chunked attention (only transformer and the VAE).")


def query_blocks_for(
    *, heads: int, tokens: int, bytes_per_value: int = 4, budget: int = MAX_ATTENTION_BUFFER_BYTES
) -> int:
    """Smallest block count N whose largest score buffer, heads * ceil(tokens/N) * tokens * bytes, fits `budget`."""
    if heads < 1 or tokens < 1:
        raise ValueError(f"heads={heads} and tokens={tokens} must be positive.")
    rows_that_fit = budget // (heads * tokens * bytes_per_value)
    if rows_that_fit < 1:
        raise ConversionError(
            f"Even one query row of attention ({heads} heads x {tokens} tokens) exceeds "
            f"{budget} bytes; lower MAX_IMAGE_SIDE."
        )
    return max(1, math.ceil(tokens / rows_that_fit))


# The transformer gets one graph per size class, all sharing the same weight files, each with its
# attention split just enough for images up to that side (text-to-image), the last for the longest edit: every
# block costs six kernels, so fewer blocks run faster (per-layer times from scripts/attention_kernels.py in
# docs/performance.md). The app runs the least-split graph that fits its token count (image + reference + text
# tokens).
SIZE_CLASS_SIDES = (512, 1024, 1536, MAX_IMAGE_SIDE)


def size_classes(component: str, *, heads: int, budget: int = MAX_ATTENTION_BUFFER_BYTES) -> list[tuple[int, int]]:
    """[(query blocks, longest attention in tokens whose score buffer fits `budget`)], most blocks first."""
    lengths = [max_attention_tokens(component, side=side) for side in SIZE_CLASS_SIDES]
    lengths.append(max_attention_tokens(component))
    blocks = sorted({query_blocks_for(heads=heads, tokens=tokens, budget=budget) for tokens in lengths}, reverse=True)
    return [(n, max_tokens_for(heads=heads, query_blocks=n, budget=budget)) for n in blocks]


def max_tokens_for(
    *, heads: int, query_blocks: int, budget: int = MAX_ATTENTION_BUFFER_BYTES, bytes_per_value: int = 4
) -> int:
    """The longest attention (tokens) whose largest score buffer in `query_blocks` blocks fits `budget`."""
    low, high = 1, 1 << 20
    while low < high:  # the buffer grows with the token count: binary search the last length that fits
        middle = (low + high + 1) // 2
        if (
            largest_score_bytes(heads=heads, tokens=middle, query_blocks=query_blocks, bytes_per_value=bytes_per_value)
            <= budget
        ):
            low = middle
        else:
            high = middle - 1
    return low


def largest_score_bytes(*, heads: int, tokens: int, query_blocks: int, bytes_per_value: int = 4) -> int:
    """Bytes of the largest score buffer of a chunked attention site (what the app checks, too)."""
    return heads * math.ceil(tokens / query_blocks) * tokens * bytes_per_value


# Where a graph records its block count (read back by the converter for the manifest) and its heads.
METADATA_KEY = "klein_web.attention_query_blocks"
HEADS_KEY = "klein_web.attention_heads"


def apply_query_blocks(model: onnx.ModelProto, *, query_blocks: int, expected_sites: int) -> None:
    """chunk_attention + a check that every attention site was found + the count in the graph's metadata."""
    if query_blocks > 1:
        found = chunk_attention(model, query_blocks=query_blocks)
        if found != expected_sites:
            raise ConversionError(
                f"Found {found} attention sites to split into query blocks, expected {expected_sites}; "
                "the exported attention no longer has the MatMul-Softmax-MatMul form."
            )
    for entry in model.metadata_props:
        if entry.key == METADATA_KEY:
            entry.value = str(query_blocks)
            return
    model.metadata_props.add(key=METADATA_KEY, value=str(query_blocks))


def recorded_query_blocks(model: onnx.ModelProto) -> int:
    """The block count apply_query_blocks stored (1: attention not split, or a graph without attention)."""
    return int(_metadata(model, METADATA_KEY) or 1)


def record_heads(model: onnx.ModelProto, heads: int) -> None:
    """Store the attention head count, which sizes the score buffers (read by `recorded_heads`)."""
    model.metadata_props.add(key=HEADS_KEY, value=str(heads))


def recorded_heads(model: onnx.ModelProto) -> int:
    value = _metadata(model, HEADS_KEY)
    if value is None:
        raise ConversionError(f"The graph does not record its attention heads ({HEADS_KEY}); re-export it.")
    return int(value)


def _metadata(model: onnx.ModelProto, key: str) -> str | None:
    return next((entry.value for entry in model.metadata_props if entry.key == key), None)


def chunk_attention(model: onnx.ModelProto, *, query_blocks: int) -> int:
    """Rewrite each `MatMul -> [Mul|Div by a constant] -> Softmax(last axis) -> MatMul` into query blocks.

    Returns the number of attention sites rewritten. `query_blocks` 1 leaves the graph unchanged.
    Sites with a mask (an Add between the scores and the Softmax) are left alone: the text encoder's
    512-token attention is small, and its mask's query axis may be broadcast.
    """
    if query_blocks < 1:
        raise ValueError(f"query_blocks={query_blocks} must be >= 1.")
    if query_blocks == 1:
        return 0
    graph = model.graph
    producers = {out: node for node in graph.node for out in node.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    constants = {t.name for t in graph.initializer} | {n.output[0] for n in graph.node if n.op_type == "Constant"}

    sites = []
    for softmax in graph.node:
        site = _match_site(softmax, producers, consumers, constants)
        if site is not None:
            sites.append(site)
    if not sites:
        return 0

    replaced: dict[int, list[onnx.NodeProto]] = {}
    removed: set[int] = set()
    for index, (scores, before, softmax, after, weighted) in enumerate(sites):
        new_nodes = _blocked_site(graph, index, scores, before, softmax, after, weighted, query_blocks)
        for node in (scores, *before, softmax, *after):
            removed.add(id(node))
        # The blocks go where the output MatMul was: q, k^T and v are all computed before it.
        replaced[id(weighted)] = new_nodes
    nodes: list[onnx.NodeProto] = []
    for node in graph.node:
        if id(node) in replaced:
            nodes.extend(replaced[id(node)])
        elif id(node) not in removed:
            nodes.append(node)
    graph.ClearField("node")
    graph.node.extend(nodes)
    return len(sites)


# (scores MatMul, [nodes between it and the Softmax], Softmax, [nodes after it], output MatMul)
AttentionSite = tuple[onnx.NodeProto, list[onnx.NodeProto], onnx.NodeProto, list[onnx.NodeProto], onnx.NodeProto]


def _match_site(
    softmax: onnx.NodeProto,
    producers: dict[str, onnx.NodeProto],
    consumers: dict[str, list[onnx.NodeProto]],
    constants: set[str],
) -> AttentionSite | None:
    """(scores MatMul, [nodes between it and the Softmax], Softmax, [nodes after it], output MatMul) when
    `softmax` heads a plain attention site. Between the MatMuls only row-wise nodes are allowed: a scale
    by a constant (Mul, Div) and Casts (the fp16 graphs run the Softmax in fp32)."""
    if softmax.op_type != "Softmax" or softmax.domain:
        return None
    axis = next((a.i for a in softmax.attribute if a.name == "axis"), -1)
    if axis != -1:
        return None
    after: list[onnx.NodeProto] = []
    node = softmax
    while True:
        users = consumers.get(node.output[0], [])
        if len(users) != 1:
            return None
        if users[0].op_type == "Cast" and not after:
            after.append(users[0])
            node = users[0]
            continue
        break
    if users[0].op_type != "MatMul" or users[0].input[0] != node.output[0]:
        return None
    before: list[onnx.NodeProto] = []
    producer = producers.get(softmax.input[0])
    while (
        producer is not None
        and producer.op_type in ("Mul", "Div", "Cast")
        and len(consumers.get(producer.output[0], [])) == 1
    ):
        if producer.op_type != "Cast" and producer.input[1] not in constants:  # only a constant scale commutes
            return None
        before.insert(0, producer)
        producer = producers.get(producer.input[0])
    if producer is None or producer.op_type != "MatMul" or len(consumers.get(producer.output[0], [])) != 1:
        return None
    return producer, before, softmax, after, users[0]


def _blocked_site(
    graph: onnx.GraphProto,
    index: int,
    scores: onnx.NodeProto,
    before: list[onnx.NodeProto],
    softmax: onnx.NodeProto,
    after: list[onnx.NodeProto],
    weighted: onnx.NodeProto,
    blocks: int,
) -> list[onnx.NodeProto]:
    """The replacement nodes of one site; new constants are added to graph.initializer."""
    scope = softmax.name.rsplit("/", 1)[0] if "/" in softmax.name else ""
    prefix = f"{scope}/query_blocks"
    query, keys_t = scores.input[0], scores.input[1]
    values = weighted.input[1]

    def const(name: str, value: int | list[int]) -> str:
        full = f"{prefix}_{index}/{name}"
        graph.initializer.append(numpy_helper.from_array(np.array(value, dtype=np.int64), full))
        return full

    nodes = []
    rows = f"{prefix}_{index}/rows"
    # Shape(start=-2, end=-1) is the query length as a 1-D [1] tensor, ready for Slice's starts/ends.
    nodes.append(helper.make_node("Shape", [query], [rows], name=f"{prefix}/Shape", start=-2, end=-1))
    axes = const("axes", [-2])
    count = const("count", [blocks])
    bounds = [const("zero", [0])]
    for i in range(1, blocks):
        scaled, bound = f"{prefix}_{index}/rows_x{i}", f"{prefix}_{index}/bound_{i}"
        nodes.append(helper.make_node("Mul", [rows, const(f"i{i}", [i])], [scaled], name=f"{prefix}/Mul_{i}"))
        # int64 Div truncates, which is floor division for these non-negative values.
        nodes.append(helper.make_node("Div", [scaled, count], [bound], name=f"{prefix}/Div_{i}"))
        bounds.append(bound)
    bounds.append(rows)

    def copy_chain(chain: list[onnx.NodeProto], current: str, tag: str, block: str, side: str) -> str:
        """Copies of the row-wise nodes (scale, Cast) of one block, with their attributes; returns the last output."""
        for k, original in enumerate(chain):
            out = f"{tag}/{side}_{k}"
            copy = helper.make_node(
                original.op_type, [current, *original.input[1:]], [out], name=f"{block}/{original.op_type}_{side}{k}"
            )
            copy.attribute.extend(original.attribute)
            nodes.append(copy)
            current = out
        return current

    outputs = []
    for i in range(blocks):
        block = f"{prefix}/block_{i}"
        tag = f"{prefix}_{index}/b{i}"
        nodes.append(
            helper.make_node("Slice", [query, bounds[i], bounds[i + 1], axes], [f"{tag}/q"], name=f"{block}/Slice")
        )
        current = f"{tag}/scores"
        nodes.append(helper.make_node("MatMul", [f"{tag}/q", keys_t], [current], name=f"{block}/MatMul"))
        current = copy_chain(before, current, tag, block, "pre")
        nodes.append(helper.make_node("Softmax", [current], [f"{tag}/probs"], name=f"{block}/Softmax", axis=-1))
        current = copy_chain(after, f"{tag}/probs", tag, block, "post")
        nodes.append(helper.make_node("MatMul", [current, values], [f"{tag}/out"], name=f"{block}/MatMul_1"))
        outputs.append(f"{tag}/out")
    nodes.append(helper.make_node("Concat", outputs, [weighted.output[0]], name=f"{prefix}/Concat", axis=-2))
    return nodes
