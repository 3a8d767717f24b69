"""A tiny pipeline whose transformer is wide enough (inner 512, head_dim 128) for onnxruntime's matrix-unit kernels."""
import sys
from pathlib import Path
from builder.convert import tiny
tiny.TRANSFORMER_CONFIG.update({"attention_head_dim": 128, "num_attention_heads": 4, "axes_dims_rope": (32, 32, 32, 32)})
out = Path(sys.argv[1])
print(tiny.make_tiny(out, seed=0, log=print))
