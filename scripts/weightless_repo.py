"""Move a multi-GB model repository to a machine it cannot be copied to: ship its structure, refill its weights.

`strip REPO OUT` writes OUT/ with every file of REPO except the external-data (weight) files, plus
`weights.json`: for each weight file its size and, for each tensor stored in it, the dtype, byte range and
statistics (mean and standard deviation of a float tensor, the nibble frequencies of a packed q4 tensor).
Tensors under EXACT_BYTES and integer tensors are kept byte for byte in `exact.bin`. For the full-size
klein-4B repo (11 GB of q4 + q4f16 weights) OUT is about 20 MB.

`fill OUT REPO2 [--seed N]` writes REPO2: the same graphs, tokenizer and scheduler, and weight files of
exactly the same sizes whose tensors are random draws with each original tensor's statistics; then
manifest.json with the new files' sha256. The graphs, I/O and numeric ranges are those of the original, so
timings, memory and GPU-vs-CPU comparisons made on REPO2 hold for REPO. (A random-weight repo made by
`klein-web make-tiny --full-size` + `convert` has no meaningful weights to lose.)

    python scripts/weightless_repo.py strip /data/full-q4f16 /tmp/full-structure
    python scripts/weightless_repo.py fill /tmp/full-structure /tmp/full-q4f16 --seed 0
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from builder.repo import manifest, verify

WEIGHTS_JSON = "weights.json"
EXACT_BIN = "exact.bin"
# Small tensors (norm weights of tiny layers, shape constants) are kept as they are.
EXACT_BYTES = 4096
FLOAT_TYPES = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.FLOAT16: np.float16}
PACKED_TYPES = {onnx.TensorProto.UINT8: np.uint8}


def external_tensors(graph_file: Path) -> list[dict[str, Any]]:
    """Every initializer of a graph stored in an external file: name, dtype, file, byte range."""
    model = onnx.load(str(graph_file), load_external_data=False)
    tensors = []
    for tensor in model.graph.initializer:
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {entry.key: entry.value for entry in tensor.external_data}
        tensors.append(
            {
                "name": tensor.name,
                "dtype": int(tensor.data_type),
                "file": info["location"],
                "offset": int(info.get("offset", 0)),
                "length": int(info["length"]),
            }
        )
    return tensors


def nibble_frequencies(data: np.ndarray) -> list[float]:
    counts = np.bincount(data & 0x0F, minlength=16) + np.bincount(data >> 4, minlength=16)
    return [float(share) for share in counts / counts.sum()]


def strip(repo: Path, out: Path) -> None:
    repo_manifest = manifest.load(repo)
    weight_files: dict[str, str] = {}  # repo-relative path -> its folder
    for graph in repo_manifest.graphs:
        for rel in graph.files()[1:]:
            weight_files[rel] = rel.rsplit("/", 1)[0]
    out.mkdir(parents=True, exist_ok=True)
    for rel in [*sorted(set(repo_manifest.files) - set(weight_files)), manifest.MANIFEST_NAME]:
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(repo / rel, out / rel)

    # Size-class graphs share their main graph's weight files: each byte range is described once.
    ranges: dict[tuple[str, int], dict[str, Any]] = {}
    for graph in repo_manifest.graphs:
        folder = graph.path.rsplit("/", 1)[0]
        for tensor in external_tensors(repo / graph.path):
            ranges.setdefault((f"{folder}/{tensor['file']}", tensor["offset"]), tensor)

    described: dict[str, Any] = {rel: {"size": (repo / rel).stat().st_size, "tensors": []} for rel in weight_files}
    with open(out / EXACT_BIN, "wb") as exact:
        for (rel, offset), tensor in sorted(ranges.items()):
            with open(repo / rel, "rb") as handle:
                handle.seek(offset)
                raw = handle.read(tensor["length"])
            entry: dict[str, Any] = {
                "name": tensor["name"],
                "offset": offset,
                "length": tensor["length"],
                "dtype": tensor["dtype"],
            }
            if tensor["length"] <= EXACT_BYTES or tensor["dtype"] not in {**FLOAT_TYPES, **PACKED_TYPES}:
                entry.update(kind="exact", at=exact.tell())
                exact.write(raw)
            elif tensor["dtype"] in FLOAT_TYPES:
                values = np.frombuffer(raw, dtype=FLOAT_TYPES[tensor["dtype"]]).astype(np.float64)
                entry.update(kind="normal", mean=float(values.mean()), std=float(values.std()))
            else:
                entry.update(kind="nibbles", p=nibble_frequencies(np.frombuffer(raw, dtype=np.uint8)))
            described[rel]["tensors"].append(entry)
    (out / WEIGHTS_JSON).write_text(json.dumps(described, indent=1) + "\n")
    total = sum(entry["size"] for entry in described.values())
    print(f"strip: {len(ranges)} tensors in {len(described)} weight files ({total / 1e9:.2f} GB) described in {out}")


def draw(entry: dict[str, Any], rng: np.random.Generator, exact: np.ndarray) -> bytes:
    """Random bytes for one tensor with the recorded statistics (or the recorded bytes themselves)."""
    if entry["kind"] == "exact":
        return bytes(exact[entry["at"] : entry["at"] + entry["length"]].tobytes())
    if entry["kind"] == "normal":
        dtype = FLOAT_TYPES[entry["dtype"]]
        count = entry["length"] // np.dtype(dtype).itemsize
        values = rng.standard_normal(count, dtype=np.float32) * np.float32(entry["std"]) + np.float32(entry["mean"])
        return bytes(values.astype(dtype).tobytes())
    # Packed q4: each byte's two nibbles drawn from the recorded frequencies, through a 16-bit lookup table.
    cdf = np.cumsum(np.asarray(entry["p"], dtype=np.float64))
    nibble = np.searchsorted(cdf / cdf[-1], (np.arange(256) + 0.5) / 256).clip(0, 15).astype(np.uint8)
    table = (nibble[np.arange(65536) >> 8] << 4 | nibble[np.arange(65536) & 0xFF]).astype(np.uint8)
    return bytes(table[rng.integers(0, 65536, entry["length"], dtype=np.uint16)].tobytes())


def fill_file(target: Path, spec: dict[str, Any], exact: np.ndarray, seed: int) -> None:
    rng = np.random.default_rng(seed)
    partial = target.with_name(target.name + ".partial")
    with open(partial, "wb") as handle:
        handle.truncate(spec["size"])
        for entry in spec["tensors"]:
            handle.seek(entry["offset"])
            handle.write(draw(entry, rng, exact))
    partial.replace(target)


def fill(structure: Path, out: Path, *, seed: int, workers: int) -> None:
    started = time.monotonic()
    described: dict[str, Any] = json.loads((structure / WEIGHTS_JSON).read_text())
    source_manifest = manifest.load(structure)
    out.mkdir(parents=True, exist_ok=True)
    for rel in sorted(set(source_manifest.files) - set(described)):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(structure / rel, out / rel)
    exact_path = structure / EXACT_BIN
    exact = np.memmap(exact_path, dtype=np.uint8, mode="r") if exact_path.stat().st_size else np.zeros(0, np.uint8)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        jobs = []
        for index, (rel, spec) in enumerate(sorted(described.items())):
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            jobs.append(pool.submit(fill_file, out / rel, spec, exact, seed * 1000 + index))
        for job in jobs:
            job.result()
        # The weight files are new: their hashes go into the manifest (sizes are the original's).
        hashes = dict(zip(described, pool.map(lambda rel: verify.file_digests(out / rel), described), strict=False))
    files = dict(source_manifest.files)
    for rel, digests in hashes.items():
        size = (out / rel).stat().st_size
        files[rel] = manifest.FileEntry(size=size, sha256=digests.sha256, blocks=digests.blocks)
    source_manifest.files = files
    source_manifest.source = f"{source_manifest.source} (weights redrawn with seed {seed})"
    manifest.write(out, source_manifest)
    verify.check_files(out, manifest.load(out), check_sha256=False, log=print)
    total = sum(spec["size"] for spec in described.values())
    print(
        f"fill: {total / 1e9:.2f} GB of weights in {len(described)} files, {time.monotonic() - started:.0f} s -> {out}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    strip_parser = commands.add_parser("strip", help="REPO -> structure + weight statistics")
    strip_parser.add_argument("repo", type=Path)
    strip_parser.add_argument("out", type=Path)
    fill_parser = commands.add_parser("fill", help="structure -> repo with redrawn weights")
    fill_parser.add_argument("structure", type=Path)
    fill_parser.add_argument("out", type=Path)
    fill_parser.add_argument("--seed", type=int, default=0)
    fill_parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args(argv)
    if args.command == "strip":
        strip(args.repo, args.out)
    else:
        fill(args.structure, args.out, seed=args.seed, workers=args.workers)


if __name__ == "__main__":
    main()
