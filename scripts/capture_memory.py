"""GPU memory of the transformer with and without graph capture, per layer, on the WebGPU EP.

    python scripts/capture_memory.py [--singles 1,2,4] [--sizes 512,1024]

A capturing session keeps the buffers its recorded kernels use, so its memory may grow with the depth of
the graph where a plain session recycles them. This builds q4f16 chains of the real width with 0 double
and k single blocks, runs the graph the app runs at each size in its own process (builder.check.bench.ort_timing's worker:
NVML device memory above the level before the session, sampled every 5 ms), and prints the peak of each
and the growth per single block, which extrapolates to the 25 blocks of klein-4B. A development aid.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--singles", default="1,2,4")
    parser.add_argument("--sizes", default="512,1024")
    args = parser.parse_args()
    from builder.check.bench.graphs import app_choice, export_graphs, graph_bytes
    from builder.check.bench.models import full_scale, make_inputs
    from builder.check.bench.ort_timing import time_ort

    scale = full_scale()
    singles = [int(k) for k in args.singles.split(",")]
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="capture-memory-"))
    peaks: dict[tuple[int, int], tuple[float, float]] = {}
    for k in singles:
        graphs = export_graphs(
            scale, "transformer", (0, k), work / f"chain{k}", precisions=["q4f16"], log=lambda _m: None
        )
        weights = graph_bytes(graphs[app_choice(scale, sizes[0], "q4f16")])  # shared by every class
        for size in sizes:
            label = app_choice(scale, size, "q4f16")
            npz = work / f"in-{size}.npz"
            np.savez(npz, **make_inputs(scale, "transformer", size))
            result = time_ort(
                graphs[label],
                {str(size): npz},
                provider="webgpu",
                warmup=1,
                repeats=2,
                timeout_s=300,
                workdir=work,
                capture=True,
            )
            if "error" in result:
                print(f"0+{k} {size}^2 {label}: failed {result['error']}", flush=True)
                continue
            plain, captured = (result.get(key) or 0 for key in ("peak_bytes", "capture_peak_bytes"))
            peaks[(k, size)] = (plain / 2**30, captured / 2**30)
            print(
                f"0+{k} single blocks, {size}^2, {label}: plain {plain / 2**30:.2f} GiB, captured "
                f"{captured / 2**30:.2f} GiB (weights on disk {weights / 2**30:.2f} GiB)",
                flush=True,
            )
    for size in sizes:
        points = [(k, *peaks[(k, size)]) for k in singles if (k, size) in peaks]
        if len(points) >= 2:
            ks = np.array([p[0] for p in points], dtype=float)
            for i, name in ((1, "plain"), (2, "captured")):
                slope, intercept = np.polyfit(ks, np.array([p[i] for p in points]), 1)
                print(
                    f"{size}^2 {name}: {slope:.3f} GiB per single block; at 25 blocks "
                    f"~{intercept + 25 * slope:.2f} GiB (linear in depth)",
                    flush=True,
                )


if __name__ == "__main__":
    main()
