"""The model-repository contract: layout, graph I/O and manifest.json, shared by convert, fetch, serve and reference.

A model repository (on the Hub, or a local folder) looks like the seed repo
`kny/FLUX.2-klein-4B-onnx-web`:

    text_encoder/text_encoder_q4.onnx   (+ text_encoder_q4.onnx_data, text_encoder_q4.onnx_data_1, ...)
    transformer/transformer_q4.onnx     (+ transformer_q4.onnx_data, ...)
    vae_decoder/vae_decoder_fp16.onnx   (+ vae_decoder_fp16.onnx_data)
    tokenizer/                          (tokenizer.json, tokenizer_config.json, ...)
    scheduler/scheduler_config.json
    manifest.json                       (written by `klein-web convert` and `klein-web fetch`; a folder without
                                        one is described from its files by builder.repo.seed_layout)

Graph files are named `{component}/{component}_{variant}.onnx`; their external-data files sit in the same
folder and are named `{component}_{variant}.onnx_data`, `..._1`, ... The `location` stored in the graph is
the bare file name, which is exactly the `path` onnxruntime-web's `externalData` entries must carry.

Variants: `q4` (MatMulNBits, the seed's precision), `fp32` (no quantisation, for exact tests and
adapters without shader-f16), `fp16` (the VAE), `q4f16` (fp16 activations, the fast path). A repo may
hold several variants of one component; the manifest lists each, and the app picks one per component.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from builder.errors import ModelRepoError
from builder.repo import schema_check
from builder.repo.files import atomic_write_bytes

MANIFEST_NAME = "manifest.json"
MAX_MANIFEST_BYTES = 16 << 20  # the real repo's manifest is about 20 kB
# The schema of manifest.json, which the app reads too (web_src/src/shared/model_repo.js): every field, its bounds,
# and the names below.
SCHEMA_FILE = Path(__file__).with_name("manifest_schema.json")
SCHEMA: dict[str, Any] = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
_GRAPH_FIELDS: dict[str, Any] = SCHEMA["$defs"]["graph"]["properties"]
FORMAT: str = SCHEMA["properties"]["format"]["const"]
FORMAT_VERSION: int = SCHEMA["properties"]["format_version"]["maximum"]

# The components text-to-image runs: every repo has them (the schema's graphs contain one of each).
COMPONENTS: tuple[str, ...] = tuple(
    part["contains"]["properties"]["component"]["const"] for part in SCHEMA["properties"]["graphs"]["allOf"]
)
# Components a repo may lack: the VAE encoder, which only editing with reference images needs. `klein-web convert`
# writes it; the seed repo has none.
OPTIONAL_COMPONENTS: tuple[str, ...] = tuple(c for c in _GRAPH_FIELDS["component"]["enum"] if c not in COMPONENTS)
VARIANTS: tuple[str, ...] = tuple(_GRAPH_FIELDS["variant"]["enum"])

# Files the app and the reference pipeline read besides the graphs (the schema's files require them).
TOKENIZER_FILES: tuple[str, ...] = tuple(SCHEMA["properties"]["files"]["required"])
OPTIONAL_TOKENIZER_FILES = ("tokenizer/chat_template.jinja",)
SCHEDULER_CONFIG = "scheduler/scheduler_config.json"
# The step previews' colour map `convert` fits to the VAE (builder.convert.preview_map); optional, like the VAE encoder.
PREVIEW_MAP_FILE = "vae_decoder/preview_map.json"

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
    # Flux2KleinPipeline packs into reference-image tokens (builder.convert.export_vae_encoder).
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
    # The graph's attention runs in this many query blocks (builder.convert.attention): its largest score buffer is
    # heads * ceil(tokens / blocks) * tokens values instead of heads * tokens^2. 1 = not split.
    attention_query_blocks: int = 1
    # The longest attention (image + text tokens) this graph keeps within the converter's score-buffer budget
    # (builder.convert.attention). A transformer repo lists one graph per size class for a variant, all on the same
    # weight files; the app runs the least-split one whose limit covers its size. None: not recorded (one
    # graph for every size, like the seed repo's).
    attention_max_tokens: int | None = None
    # Attention heads of the graph's score buffers (heads x ceil(tokens / blocks) x tokens fp32 values), so
    # the app can also check a size class against the adapter's own buffer limit. None: not recorded.
    attention_heads: int | None = None
    # The bytes of its largest weight as stored, the largest buffer it binds for one tensor (the text encoder's
    # token embedding, a transformer's widest linear), so the app weighs the adapter's buffer limit against the
    # model's real sizes (klein-9B's are larger than klein-4B's). None: not recorded (the seed repo's).
    largest_weight_bytes: int | None = None

    def files(self) -> list[str]:
        folder = self.path.rsplit("/", 1)[0]
        return [self.path] + [f"{folder}/{name}" for name in self.external_data]


@dataclass(frozen=True)
class Blocks:
    """The SHA-256 of each `size`-byte block of a file, in order (the last one may be shorter): what lets the browser
    check a download with its native SHA-256 (WebCrypto, which digests whole buffers only), block by block as the
    bytes arrive, instead of one sequential SHA-256 over the whole file in WebAssembly."""

    size: int
    sha256: tuple[str, ...]


@dataclass(frozen=True)
class FileEntry:
    size: int
    sha256: str | None = None
    # Optional in manifest.json (a manifest without them is checked by the whole file's sha256 alone); written by
    # every command that hashes the files. Only with a sha256.
    blocks: Blocks | None = None


@dataclass(frozen=True)
class LoraEntry:
    """A LoRA that `klein-web convert --lora` merged into the transformer's weights."""

    file: str  # the LoRA file's bare name
    sha256: str
    scale: float


def _whole(value: Any) -> Any:
    """A number the schema checked to be an integer, as an int (JSON's 1.0 is one too)."""
    return int(value) if isinstance(value, float) else value


@dataclass(frozen=True)
class PipelineDefaults:
    """What kind of FLUX.2 [klein] model the repository holds, and the defaults diffusers runs it with.

    Distilled models (klein-4B, klein-9B: `"is_distilled": true` in their model_index.json) run one transformer call
    a step and ignore any guidance scale; base models run classifier-free guidance when the scale is above 1: a
    second call a step on the negative prompt's embeddings. `klein-web convert` reads both from the checkpoint and
    from diffusers' own defaults (builder.convert.pipeline_kind); a manifest without them (the seed repository, older
    conversions) holds distilled klein."""

    is_distilled: bool
    steps: int  # the model card's 4 for distilled models; Flux2KleinPipeline's 50 for base models
    guidance_scale: float | None  # text and editing (Flux2KleinPipeline); None: no guidance (distilled)
    inpaint_guidance_scale: float | None  # inpainting (Flux2KleinInpaintPipeline)


def _pipeline(value: dict[str, Any]) -> PipelineDefaults:
    """manifest.json's `pipeline`, which the schema checked."""

    def scale(key: str) -> float | None:
        return None if value[key] is None else float(value[key])

    return PipelineDefaults(
        is_distilled=value["is_distilled"],
        steps=_whole(value["steps"]),
        guidance_scale=scale("guidance_scale"),
        inpaint_guidance_scale=scale("inpaint_guidance_scale"),
    )


# A manifest without `pipeline` holds distilled klein: the schema's default.
DISTILLED = _pipeline(SCHEMA["properties"]["pipeline"]["default"])


@dataclass
class Manifest:
    source: str
    converter: str
    files: dict[str, FileEntry]
    graphs: list[GraphEntry]
    format: str = FORMAT
    format_version: int = FORMAT_VERSION
    # The LoRAs baked into the weights, in the order they were added. Optional in manifest.json and left out when
    # empty, so a manifest without LoRAs stays readable by a reader that does not know the key.
    loras: list[LoraEntry] = field(default_factory=list)
    # Optional in manifest.json and left out for distilled models, so their manifests read as before.
    pipeline: PipelineDefaults = DISTILLED

    def graph(self, component: str, variant: str) -> GraphEntry:
        for entry in self.graphs:
            if entry.component == component and entry.variant == variant:
                return entry
        have = ", ".join(f"{g.component}/{g.variant}" for g in self.graphs) or "none"
        raise ModelRepoError(f"The model repository has no {component} graph of variant `{variant}` (it has: {have}).")

    def variants(self, component: str) -> list[str]:
        return [g.variant for g in self.graphs if g.component == component]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        if not self.loras:
            del data["loras"]
        if self.pipeline == DISTILLED:
            del data["pipeline"]
        for entry in data["files"].values():
            if entry["blocks"] is None:
                del entry["blocks"]
            else:
                entry["blocks"]["sha256"] = list(entry["blocks"]["sha256"])
        return data


# Blocks of a file's block hashes (Blocks): what the app's downloader holds per block in flight.
BLOCK_SIZE = 16 << 20
# The graph fields a manifest may leave out; GraphEntry's defaults are the schema's.
OPTIONAL_GRAPH_FIELDS = tuple(key for key in _GRAPH_FIELDS if key not in SCHEMA["$defs"]["graph"]["required"])


def _graph(g: dict[str, Any]) -> GraphEntry:
    def tensors(specs: list[dict[str, Any]]) -> list[TensorSpec]:
        return [TensorSpec(t["name"], t["dtype"], [_whole(d) for d in t["shape"]]) for t in specs]

    return GraphEntry(
        component=g["component"],
        variant=g["variant"],
        path=g["path"],
        external_data=list(g["external_data"]),
        precision=g["precision"],
        inputs=tensors(g["inputs"]),
        outputs=tensors(g["outputs"]),
        **{key: _whole(g[key]) for key in OPTIONAL_GRAPH_FIELDS if key in g},
    )


def _file(entry: dict[str, Any]) -> FileEntry:
    blocks = entry.get("blocks")
    return FileEntry(
        size=_whole(entry["size"]),
        sha256=entry.get("sha256"),
        blocks=None if blocks is None else Blocks(size=_whole(blocks["size"]), sha256=tuple(blocks["sha256"])),
    )


def _from_json(data: Any, where: Path | str) -> Manifest:
    """The one schema check of manifest.json (manifest_schema.json): any violation is a ModelRepoError naming the
    field."""
    version = data.get("format_version") if isinstance(data, dict) else None
    if version is not None and schema_check.type_of(version) == "integer" and version > FORMAT_VERSION:
        raise ModelRepoError(
            f"{where} is format version {_whole(version)}; this klein-web reads up to {FORMAT_VERSION}. "
            "Upgrade klein-web."
        )
    try:
        schema_check.check(SCHEMA, data)
    except schema_check.SchemaProblem as exc:
        raise ModelRepoError(
            f"{where} is malformed: {exc}. Re-create it with `klein-web fetch` or `klein-web convert`."
        ) from None
    return Manifest(
        source=data["source"],
        converter=data["converter"],
        files={rel: _file(entry) for rel, entry in data["files"].items()},
        graphs=[_graph(g) for g in data["graphs"]],
        loras=[LoraEntry(file=x["file"], sha256=x["sha256"], scale=float(x["scale"])) for x in data.get("loras", [])],
        pipeline=_pipeline(data["pipeline"]) if "pipeline" in data else DISTILLED,
    )


def load(repo_dir: Path) -> Manifest:
    """Read and validate `repo_dir/manifest.json`; a clear error when it is missing or malformed."""
    path = Path(repo_dir) / MANIFEST_NAME
    if not Path(repo_dir).is_dir():
        raise ModelRepoError(
            f"Model folder {repo_dir} does not exist. Create one with `klein-web fetch --dir {repo_dir}`."
        )
    if not path.is_file():
        raise ModelRepoError(
            f"{path} is missing. A model folder needs the manifest that `klein-web fetch` or `klein-web convert` writes."
        )
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ModelRepoError(
            f"{path} cannot be read ({exc}); re-create it with `klein-web fetch` or `convert`."
        ) from None
    return parse(raw, path)


def parse(text: bytes, where: Path | str) -> Manifest:
    """A manifest from bytes (read from a folder, or served), through the one schema check."""
    if len(text) > MAX_MANIFEST_BYTES:
        raise ModelRepoError(
            f"{where} is {len(text)} bytes, more than a manifest ever needs "
            f"({MAX_MANIFEST_BYTES}); re-create it with `klein-web fetch` or `convert`."
        )
    try:
        data = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ModelRepoError(
            f"{where} is not readable JSON ({exc}); re-create it with `klein-web fetch` or `convert`."
        ) from None
    return _from_json(data, where)


def write(repo_dir: Path, manifest: Manifest) -> Path:
    """Write manifest.json atomically (temp file + rename), so a crash never leaves half a manifest."""
    path = Path(repo_dir) / MANIFEST_NAME
    atomic_write_bytes(path, to_bytes(manifest), what="manifest")
    return path


def to_bytes(manifest: Manifest) -> bytes:
    return (json.dumps(manifest.to_json(), indent=2, sort_keys=True) + "\n").encode("utf-8")
