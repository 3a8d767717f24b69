"""The q/k norm and RoPE of a transformer block (web_src/src/kernels/qk_norm_rope.js): from q, k, v projection rows,
q and k RMS-normalised per head with their weights and rotated by each token's RoPE angles (interleaved pairs), v
copied, all three written [heads, tokens, headDim]; tokens before `split` take norm weights A. The lab's output is
the three one after the other. Its float64 reference; no onnxruntime equivalent is timed beside it (in the graphs it
is reshapes, SimplifiedLayerNormalization, RotaryEmbedding and transposes: the step's table compares the whole)."""

from __future__ import annotations

import numpy as np

from builder.check.kernel_lab import shapes
from builder.check.kernel_lab.cases import Case, Tensor, sample_rows, timing

NAME = "qk_norm_rope"
EPS = 1e-6


def _shapes(shape_set: str) -> list[tuple[int, int, int, int]]:
    """(tokens, heads, head dim, split) of each case."""
    if shape_set == "real":
        return [
            (tokens, shapes.HEADS, shapes.HEAD_DIM, shapes.TEXT_TOKENS) for tokens in shapes.ATTENTION_TOKENS.values()
        ]
    # klein's head size and the tiny model's; a split inside the tokens and none.
    return [(37, 3, shapes.HEAD_DIM, 10), (50, 2, 16, 0)]


def cases(shape_set: str, *, seed: int = 21) -> list[Case]:
    out = []
    for index, (tokens, heads, dim, split) in enumerate(_shapes(shape_set)):
        inner = heads * dim
        out.append(
            Case(
                id=f"{NAME}/t{tokens}xh{heads}xd{dim}s{split}",
                kernel=NAME,
                shape={"tokens": tokens, "heads": heads, "headDim": dim, "split": split},
                inputs=(
                    Tensor("qkv", (tokens, 3 * inner), seed=seed + 3 * index, scale=2.0),
                    Tensor("norms", (4, dim), type="f32", seed=seed + 3 * index + 1, offset=1.0),
                    Tensor("rope", (tokens, dim // 2, 2), type="f32", seed=seed + 3 * index + 2),
                ),
                output=Tensor("out", (3 * heads * tokens, dim)),
                rows=sample_rows(3 * heads * tokens, limit=48 if shape_set == "real" else 1024, seed=seed + index),
                timing=timing(shape_set),
                flops=12.0 * tokens * inner,
            )
        )
    return out


def reference(case: Case, dtype: str) -> np.ndarray:
    tokens, heads, dim, split = (case.shape[k] for k in ("tokens", "heads", "headDim", "split"))
    inner = heads * dim
    qkv = case.input("qkv").values(dtype).reshape(tokens, 3, heads, dim)
    norms = case.input("norms").values(dtype)
    rope = case.input("rope").values(dtype)
    text = (np.arange(tokens) < split)[:, None, None]

    def normed(x: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        scaled = x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + EPS)
        out: np.ndarray = np.where(text, scaled * a, scaled * b)
        return out

    def rotated(x: np.ndarray) -> np.ndarray:
        cos, sin = rope[:, None, :, 0], rope[:, None, :, 1]
        real, imag = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = real * cos - imag * sin
        out[..., 1::2] = imag * cos + real * sin
        return out

    q = rotated(normed(qkv[:, 0], norms[0], norms[2]))
    k = rotated(normed(qkv[:, 1], norms[1], norms[3]))
    v = qkv[:, 2]
    # [3, heads, tokens, dim] as rows of dim.
    whole = np.stack([t.transpose(1, 0, 2) for t in (q, k, v)]).reshape(-1, dim)
    assert whole.shape[0] == 3 * heads * tokens and inner == heads * dim
    picked: np.ndarray = whole[np.asarray(case.rows)]
    return picked


def graphs(_case: Case) -> dict[str, object]:
    return {}
