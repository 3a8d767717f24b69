"""A copy of a converted repository whose VAE graphs run each GroupNorm as one com.microsoft GroupNorm.

    python scripts/vae_group_norm.py REPO OUT

`convert` exports every GroupNorm of the VAE as its decomposition (Reshape, InstanceNormalization, Reshape, Mul,
Add), which every onnxruntime EP runs. onnxruntime-web 1.31 added a WebGPU GroupNorm kernel (channels-last, with
the SiLU after it fused); this writes OUT, REPO with the VAE decoder's and encoder's graphs rewritten to use it
(builder/convert/group_norm.py fuse_group_norms), so the two can be timed against each other on a GPU
(docs/performance.md says how). Only the small .onnx graph files and manifest.json change; every other file is
copied, not linked: onnx refuses to read external data from a file with several hard links, so a linked copy would
make REPO itself unreadable to the converter's tools while OUT exists. OUT runs in the browser on WebGPU with onnxruntime-web >= 1.31 only:
onnxruntime's CPU EP and onnxruntime-web 1.30 have no GroupNorm kernel.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from builder.convert.group_norm import fuse_group_norms
from builder.errors import InputError
from builder.repo import manifest, verify
from builder.repo.files import atomic_write_bytes

COMPONENTS = ("vae_decoder", "vae_encoder")


def copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, target)


def rewrite(repo: Path, out: Path) -> dict[str, int]:
    """Write OUT (see the module docstring); returns the GroupNorms fused per graph path."""
    repo, out = Path(repo), Path(out)
    if out.exists():
        raise InputError(f"{out} exists; give a new folder for the rewritten repository.")
    if not (repo / manifest.MANIFEST_NAME).is_file():
        raise InputError(f"{repo} has no {manifest.MANIFEST_NAME}: pass a repository `klein-web convert` wrote.")
    repo_manifest = manifest.load(repo)
    graphs = [g for g in repo_manifest.graphs if g.component in COMPONENTS]
    if not graphs:
        raise InputError(f"{repo} has no VAE graph ({', '.join(COMPONENTS)}).")
    staging = out.with_name(f".{out.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    fused: dict[str, int] = {}
    rewritten: dict[str, bytes] = {}
    for graph in graphs:
        model = onnx.load(repo / graph.path, load_external_data=False)
        fused[graph.path] = fuse_group_norms(model, data_dir=(repo / graph.path).parent)
        if fused[graph.path] == 0:
            raise InputError(
                f"{graph.path} has no GroupNorm to fuse (already rewritten, or not a `convert` VAE graph)."
            )
        rewritten[graph.path] = model.SerializeToString()
    for path in sorted(p for p in repo.rglob("*") if p.is_file()):
        rel = path.relative_to(repo).as_posix()
        if rel != manifest.MANIFEST_NAME and rel not in rewritten:
            copy(path, staging / rel)
    files = dict(repo_manifest.files)
    for rel, data in rewritten.items():
        target = staging / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(target, data)
        digests = verify.file_digests(target)
        files[rel] = manifest.FileEntry(size=target.stat().st_size, sha256=digests.sha256, blocks=digests.blocks)
        print(f"{rel}: {fused[rel]} GroupNorms fused", flush=True)
    repo_manifest.files = files
    manifest.write(staging, repo_manifest)
    staging.rename(out)
    return fused


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repo", type=Path, help="a repository `klein-web convert` wrote")
    parser.add_argument("out", type=Path, help="where the rewritten copy goes (a new folder)")
    args = parser.parse_args()
    try:
        rewrite(args.repo, args.out)
    except InputError as exc:
        raise SystemExit(str(exc)) from None


if __name__ == "__main__":
    main()
