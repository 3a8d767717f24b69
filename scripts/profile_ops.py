"""Where the time of one transformer block goes on an onnxruntime EP: per-op totals from ORT's profiler.

    python scripts/profile_ops.py [--provider webgpu|cpu] [--size 512] [--blocks 0,1] [--variant q4f16]

Builds a full-width random transformer chain (`--blocks double,single`), writes it with the converter's
own code, runs it a few times with session profiling on, and prints the summed time per op type and
per event category (GPU timestamp events, where the EP records them, show up as their own category).
A development aid for the speed work of builder/check/bench/native.py; it prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import collections
import json
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--provider", default="webgpu", choices=["webgpu", "cpu"])
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--blocks", default="0,1", help="double,single block counts of the chain")
    parser.add_argument("--variant", default="q4f16", choices=["q4", "q4f16", "fp32"])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="also copy the raw profile JSON here")
    args = parser.parse_args()

    import onnxruntime as ort

    from builder.check.bench.graphs import app_choice, export_graphs
    from builder.check.bench.models import full_scale, make_inputs
    from builder.check.bench.ort_timing import session_options

    scale = full_scale()
    layers = tuple(int(x) for x in args.blocks.split(","))
    work = Path(tempfile.mkdtemp(prefix="klein-profile-"))
    precision = "fp32" if args.variant == "fp32" else "q4f16"
    graphs = export_graphs(scale, "transformer", layers, work, precisions=[precision], log=print)
    graph = graphs[app_choice(scale, args.size, args.variant)]  # the size class the app runs
    feeds = make_inputs(scale, "transformer", args.size)

    options = session_options(args.provider, cpu_fallback=True)  # the profile shows what falls back to the CPU
    options.enable_profiling = True
    options.profile_file_prefix = str(work / "profile")
    providers = None if args.provider == "webgpu" else ["CPUExecutionProvider"]
    session = ort.InferenceSession(str(graph), sess_options=options, providers=providers)
    session.run(None, feeds)  # warm-up (shader compilation)
    began = time.perf_counter()
    for _ in range(args.runs):
        session.run(None, feeds)
    wall_ms = (time.perf_counter() - began) * 1000 / args.runs
    profile = Path(session.end_profiling())
    events = json.loads(profile.read_text())
    if args.out:
        args.out.write_text(profile.read_text())

    by_op: dict[tuple[str, str, str], float] = collections.defaultdict(float)
    count: dict[tuple[str, str, str], int] = collections.Counter()
    for event in events:
        if event.get("ph") != "X" or event.get("name", "").endswith(("_fence_before", "_fence_after")):
            continue
        event_args = event.get("args", {})
        op = event_args.get("op_name") or event.get("name", "?")
        key = (event.get("cat", "?"), event_args.get("provider", ""), op)
        by_op[key] += event.get("dur", 0) / 1000
        count[key] += 1
    runs = args.runs + 1
    print(f"{args.variant} chain {layers} at {args.size}^2 on {args.provider}: {wall_ms:.1f} ms per run (wall)")
    print(f"{'category':10} {'provider':28} {'op':28} {'ms/run':>8} {'calls/run':>9}")
    for key, total in sorted(by_op.items(), key=lambda item: -item[1])[:40]:
        print(f"{key[0]:10} {key[1][:28]:28} {key[2][:28]:28} {total / runs:8.2f} {count[key] / runs:9.0f}")


if __name__ == "__main__":
    main()
