"""Time one full-width transformer chain on an onnxruntime EP for several attention query-block counts.

    python scripts/query_blocks_sweep.py [--provider webgpu] [--blocks 0,1] [--counts 1,4,8,16,52]

A development aid for builder/attention.py's block count: it prints a median per count and size.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--provider", default="webgpu", choices=["webgpu", "cpu"])
    parser.add_argument("--blocks", default="0,1")
    parser.add_argument("--counts", default="1,4,8,16,52")
    parser.add_argument("--sizes", default="512,1024")
    args = parser.parse_args()

    import onnxruntime as ort

    from builder import bench
    from builder.convert import write_graphs
    from builder.export_transformer import export_transformer

    scale = bench.full_scale()
    module = bench.build_transformer(scale, tuple(int(x) for x in args.blocks.split(",")), device="cpu")
    for count in (int(c) for c in args.counts.split(",")):
        work = Path(tempfile.mkdtemp(prefix=f"klein-qb{count}-"))
        graphs = write_graphs(lambda placement, n=count: export_transformer(module, query_blocks=n, placement=placement),
                              "transformer", "q4f16", work, max_data_file_bytes=1_800_000_000, log=lambda _m: None)
        path = work / next(g for g in graphs if g.variant == "q4f16").entry().path
        options = ort.SessionOptions()
        if args.provider == "webgpu":
            options.add_provider_for_devices([bench._webgpu_device()], {})
            session = ort.InferenceSession(str(path), sess_options=options)
        else:
            session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        for size in (int(s) for s in args.sizes.split(",")):
            feeds = bench.make_inputs(scale, "transformer", size)
            try:
                session.run(None, feeds)
                samples = []
                for _ in range(5):
                    began = time.perf_counter()
                    session.run(None, feeds)
                    samples.append((time.perf_counter() - began) * 1000)
                print(f"query_blocks {count:3d} at {size}^2: {statistics.median(samples):8.1f} ms", flush=True)
            except Exception as exc:  # noqa: BLE001
                print(f"query_blocks {count:3d} at {size}^2: failed {str(exc)[:120]}", flush=True)
        del session


if __name__ == "__main__":
    main()
