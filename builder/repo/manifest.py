"""The model-repository contract: layout, graph I/O and manifest.json, shared by convert, fetch, serve and reference.

A model repository (on the Hub, or a local folder) looks like the seed repo
`kny/FLUX.2-klein-4B-onnx-web`:

    text_encoder/text_encoder_q4.onnx   (+ text_encoder_q4.onnx_data, text_encoder_q4.onnx_data_1, ...)
    transformer/transformer_q4.onnx     (+ transformer_q4.onnx_data, ...)
    vae_decoder/vae_decoder_fp16.onnx   (+ vae_decoder_fp16.onnx_data)
    tokenizer/                          (tokenizer.json, tokenizer_config.json, ...)
    scheduler/scheduler_config.json
    manifest.json                       (written by `klein-web convert` and `klein-web fetch`)

Graph files are named `{component}/{component}_{variant}.onnx`; their external-data files sit in the same
folder and are named `{component}_{variant}.onnx_data`, `..._1`, ... The `location` stored in the graph is
the bare file name, which is exactly the `path` onnxruntime-web's `externalData` entries must carry.

Variants: `q4` (MatMulNBits, the seed's precision), `fp32` (no quantisation, for exact tests and
adapters without shader-f16), `fp16` (the VAE), `q4f16` (fp16 activations, the fast path). A repo may
hold several variants of one component; the manifest lists each, and the app picks one per component.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from builder.errors import ModelRepoError

MANIFEST_NAME = "manifest.json"
FORMAT = "klein-web-model-repo"
FORMAT_VERSION = 1

# The components text-to-image runs: every repo has them.
COMPONENTS = ("text_encoder", "transformer", "vae_decoder")
# Components a repo may lack: the VAE encoder, which only editing with reference images needs. `klein-web convert`
# writes it; the seed repo has none.
OPTIONAL_COMPONENTS = ("vae_encoder",)
VARIANTS = ("q4", "q4f16", "fp32", "fp16")

# Files the app and the reference pipeline read besides the graphs.
TOKENIZER_FILES = ("tokenizer/tokenizer.json", "tokenizer/tokenizer_config.json")
OPTIONAL_TOKENIZER_FILES = ("tokenizer/chat_template.jinja",)
SCHEDULER_CONFIG = "scheduler/scheduler_config.json"

MAX_SEQUENCE_LENGTH = 512  # Flux2KleinPipeline.tokenizer_max_length


@dataclass(frozen=True)
class TensorSpec:
    """One graph input or output. Symbolic dims are strings (`batch`, `seq`, `img_seq`, ...)."""

    name: str
    dtype: str
    shape: list[int | str]


# The I/O contract of each component, exactly as the seed model card states it.
# `hidden` is the text-encoder width times 3 (7680 for klein-4B, 96 for the tiny test model).
CONTRACT: dict[str, tuple[list[TensorSpec], list[TensorSpec]]] = {
    "text_encoder": (
        [TensorSpec("input_ids", "int64", ["batch", "seq"]), TensorSpec("attention_mask", "int64", ["batch", "seq"])],
        [TensorSpec("prompt_embeds", "float32", ["batch", "seq", "joint_dim"])],
    ),
    "transformer": (
        [
            TensorSpec("hidden_states", "float32", [1, "img_seq", 128]),
            TensorSpec("encoder_hidden_states", "float32", [1, "txt_seq", "joint_dim"]),
            TensorSpec("timestep", "float32", [1]),
            TensorSpec("img_ids", "int64", ["img_seq", 4]),
            TensorSpec("txt_ids", "int64", ["txt_seq", 4]),
        ],
        [TensorSpec("noise_pred", "float32", [1, "img_seq", 128])],
    ),
    "vae_decoder": (
        [TensorSpec("latents", "float32", ["batch", 128, "latent_h", "latent_w"])],
        [TensorSpec("image", "float32", ["batch", 3, "height", "width"])],
    ),
    # Not in the seed model card: an image in [0, 1] (sides multiples of 16) -> its BN-normalised latents, what
    # Flux2KleinPipeline packs into reference-image tokens (builder.repo.export_vae_encoder).
    "vae_encoder": (
        [TensorSpec("image", "float32", ["batch", 3, "height", "width"])],
        [TensorSpec("image_latents", "float32", ["batch", 128, "latent_h", "latent_w"])],
    ),
}


def graph_path(component: str, variant: str) -> str:
    """`transformer`, `q4` -> `transformer/transformer_q4.onnx`."""
    return f"{component}/{component}_{variant}.onnx"


def external_data_names(component: str, variant: str, count: int) -> list[str]:
    """Bare external-data file names: `transformer_q4.onnx_data`, `transformer_q4.onnx_data_1`, ..."""
    base = f"{component}_{variant}.onnx_data"
    return [base if i == 0 else f"{base}_{i}" for i in range(count)]


@dataclass(frozen=True)
class GraphEntry:
    component: str
    variant: str
    path: str
    external_data: list[str]
    precision: str  # human-readable, e.g. "q4 MatMulNBits block 32, accuracy_level 4; embedding fp16"
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    # True when the graph computes in fp16 somewhere, so the WebGPU EP needs the `shader-f16` feature.
    requires_f16: bool = False
    # Node names the app may place on the CPU (WebGPU EP `forceCpuNodeNames`) when the adapter lacks
    # shader-f16, so the rest of the graph still runs on WebGPU (the fp16 token embedding Gather + Cast).
    cpu_nodes_without_f16: list[str] = field(default_factory=list)
    # The graph's attention runs in this many query blocks (builder.repo.attention): its largest score buffer is
    # heads * ceil(tokens / blocks) * tokens values instead of heads * tokens^2. 1 = not split.
    attention_query_blocks: int = 1
    # The longest attention (image + text tokens) this graph keeps within the converter's score-buffer budget
    # (builder.repo.attention). A transformer repo lists one graph per size class for a variant, all on the same
    # weight files; the app runs the least-split one whose limit covers its size. None: not recorded (one
    # graph for every size, like the seed repo's).
    attention_max_tokens: int | None = None
    # Attention heads of the graph's score buffers (heads x ceil(tokens / blocks) x tokens fp32 values), so
    # the app can also check a size class against the adapter's own buffer limit. None: not recorded.
    attention_heads: int | None = None

    def files(self) -> list[str]:
        folder = self.path.rsplit("/", 1)[0]
        return [self.path] + [f"{folder}/{name}" for name in self.external_data]


@dataclass(frozen=True)
class FileEntry:
    size: int
    sha256: str | None = None


@dataclass
class Manifest:
    source: str
    converter: str
    files: dict[str, FileEntry]
    graphs: list[GraphEntry]
    format: str = FORMAT
    format_version: int = FORMAT_VERSION

    def graph(self, component: str, variant: str) -> GraphEntry:
        for entry in self.graphs:
            if entry.component == component and entry.variant == variant:
                return entry
        have = ", ".join(f"{g.component}/{g.variant}" for g in self.graphs) or "none"
        raise ModelRepoError(f"The model repository has no {component} graph of variant `{variant}` (it has: {have}).")

    def variants(self, component: str) -> list[str]:
        return [g.variant for g in self.graphs if g.component == component]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# The seed repo on the Hub ships no manifest.json; this is its layout, used by `fetch` and by the app.
SEED_GRAPHS: tuple[tuple[str, str, int, str, bool], ...] = (
    ("text_encoder", "q4", 2, "q4 MatMulNBits (block 32, symmetric, accuracy_level 4); token embedding fp16", True),
    ("transformer", "q4", 2, "q4 MatMulNBits (block 32, symmetric); modulation Gemms, norms, biases fp32", False),
    ("vae_decoder", "fp16", 1, "fp16 weights and compute, fp32 I/O", True),
)


def seed_graphs() -> list[GraphEntry]:
    return [
        GraphEntry(
            component=component,
            variant=variant,
            path=graph_path(component, variant),
            external_data=external_data_names(component, variant, n_data),
            precision=precision,
            inputs=CONTRACT[component][0],
            outputs=CONTRACT[component][1],
            requires_f16=f16,
        )
        for component, variant, n_data, precision, f16 in SEED_GRAPHS
    ]


def _from_json(data: dict[str, Any], where: Path) -> Manifest:
    try:
        if data.get("format") != FORMAT or int(data.get("format_version", 0)) > FORMAT_VERSION:
            raise ModelRepoError(
                f"{where} is not a klein-web manifest of a version this tool reads "
                f"(format={data.get('format')!r}, version={data.get('format_version')!r}); upgrade klein-web."
            )
        unknown = sorted({str(g["component"]) for g in data["graphs"]} - {*COMPONENTS, *OPTIONAL_COMPONENTS})
        if unknown:
            raise ModelRepoError(f"{where} lists graphs of unknown component(s) {', '.join(unknown)}; "
                                 "upgrade klein-web.")
        graphs = [
            GraphEntry(
                **{
                    **g,
                    "inputs": [TensorSpec(**t) for t in g["inputs"]],
                    "outputs": [TensorSpec(**t) for t in g["outputs"]],
                }
            )
            for g in data["graphs"]
        ]
        files = {path: FileEntry(**entry) for path, entry in data["files"].items()}
        return Manifest(source=data["source"], converter=data["converter"], files=files, graphs=graphs)
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelRepoError(f"{where} is malformed ({exc!r}); re-create it with `klein-web fetch` or `convert`.") from exc


def load(repo_dir: Path) -> Manifest:
    """Read `repo_dir/manifest.json`; a clear error when it is missing or malformed."""
    path = Path(repo_dir) / MANIFEST_NAME
    if not Path(repo_dir).is_dir():
        raise ModelRepoError(f"Model folder {repo_dir} does not exist. Create one with `klein-web fetch --dir {repo_dir}`.")
    if not path.is_file():
        raise ModelRepoError(
            f"{path} is missing. A model folder needs the manifest that `klein-web fetch` or `klein-web convert` writes."
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelRepoError(f"{path} is not readable JSON ({exc}); re-create it with `klein-web fetch` or `convert`.") from exc
    return _from_json(data, path)


def write(repo_dir: Path, manifest: Manifest) -> Path:
    """Write manifest.json atomically (temp file + rename), so a crash never leaves half a manifest."""
    path = Path(repo_dir) / MANIFEST_NAME
    text = json.dumps(manifest.to_json(), indent=2, sort_keys=True) + "\n"
    atomic_write_bytes(path, text.encode("utf-8"))
    return path


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def sha256_file(path: Path, *, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def describe_files(repo_dir: Path, paths: list[str], *, with_sha256: bool = True) -> dict[str, FileEntry]:
    """Size (and sha256) of each repo-relative path, for a manifest."""
    entries = {}
    for rel in sorted(paths):
        full = Path(repo_dir) / rel
        entries[rel] = FileEntry(size=full.stat().st_size, sha256=sha256_file(full) if with_sha256 else None)
    return entries


def verify(repo_dir: Path, manifest: Manifest, *, paths: list[str] | None = None, check_sha256: bool = False) -> None:
    """Every listed file exists with the manifest's size (and hash). Raises ModelRepoError naming the file."""
    for rel in paths if paths is not None else sorted(manifest.files):
        entry = manifest.files.get(rel)
        if entry is None:
            raise ModelRepoError(f"{rel} is not listed in {Path(repo_dir) / MANIFEST_NAME}; the manifest is stale.")
        full = Path(repo_dir) / rel
        if not full.is_file():
            raise ModelRepoError(f"Model file {full} is missing. Run `klein-web fetch` again to complete the folder.")
        size = full.stat().st_size
        if size != entry.size:
            raise ModelRepoError(
                f"Model file {full} has {size} bytes but the manifest says {entry.size}: it is truncated or "
                "corrupt. Delete it and run `klein-web fetch` again."
            )
        if check_sha256 and entry.sha256 and sha256_file(full) != entry.sha256:
            raise ModelRepoError(f"Model file {full} fails its sha256 check. Delete it and run `klein-web fetch` again.")
