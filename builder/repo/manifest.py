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
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from builder.errors import ModelRepoError
from builder.repo import paths
from builder.repo.files import atomic_write_bytes

MANIFEST_NAME = "manifest.json"
MAX_MANIFEST_BYTES = 16 << 20  # the real repo's manifest is about 20 kB
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


@dataclass(frozen=True)
class PipelineDefaults:
    """What kind of FLUX.2 [klein] model the repository holds, and the defaults diffusers runs it with.

    Distilled models (klein-4B, klein-9B: `"is_distilled": true` in their model_index.json) run one transformer call
    a step and ignore any guidance scale; base models run classifier-free guidance when the scale is above 1: a
    second call a step on the negative prompt's embeddings. `klein-web convert` reads both from the checkpoint and
    from diffusers' own defaults (builder.convert.pipeline_kind); a manifest without them (the seed repository, older
    conversions) holds distilled klein."""

    is_distilled: bool = True
    steps: int = 4  # the model card's 4 for distilled models; Flux2KleinPipeline's 50 for base models
    guidance_scale: float | None = None  # text and editing (Flux2KleinPipeline); None: no guidance (distilled)
    inpaint_guidance_scale: float | None = None  # inpainting (Flux2KleinInpaintPipeline)


DISTILLED = PipelineDefaults()


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


# Bounds of the schema: a size above this is a typo or an attack, not a model file (the real files are < 2 GB).
MAX_FILE_SIZE = 1 << 40
# Blocks of a file's block hashes (Blocks): what the app's downloader holds per block in flight.
BLOCK_SIZE = 16 << 20
MIN_BLOCK_SIZE, MAX_BLOCK_SIZE = 1 << 20, 1 << 30
SHA256 = re.compile(r"[0-9a-f]{64}")
GRAPH_KEYS = {"component", "variant", "path", "external_data", "precision", "inputs", "outputs"}
OPTIONAL_GRAPH_KEYS = {
    "requires_f16",
    "cpu_nodes_without_f16",
    "attention_query_blocks",
    "attention_max_tokens",
    "attention_heads",
}


class _Invalid(Exception):
    """One schema violation; `_from_json` turns it into the single ModelRepoError the caller sees."""


def _require(condition: bool, field_name: str, what: str) -> None:
    if not condition:
        raise _Invalid(f"{field_name} {what}")


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _int_in(value: object, low: int, high: int) -> bool:
    return _is_int(value) and low <= value <= high


def _string(obj: dict[str, Any], key: str, where: str) -> str:
    _require(isinstance(obj.get(key), str), f"{where}{key}", f"must be a string, got {obj.get(key)!r}")
    return str(obj[key])


def _tensors(value: object, where: str) -> list[TensorSpec]:
    _require(isinstance(value, list), where, "must be a list of {name, dtype, shape}")
    specs = []
    items: list[Any] = value  # type: ignore[assignment]
    for i, item in enumerate(items):
        at = f"{where}[{i}]"
        _require(
            isinstance(item, dict) and set(item) == {"name", "dtype", "shape"},
            at,
            "must be an object with exactly name, dtype and shape",
        )
        name, dtype = _string(item, "name", at + "."), _string(item, "dtype", at + ".")
        shape = item["shape"]
        _require(
            isinstance(shape, list)
            and len(shape) <= 8
            and all(_int_in(d, 0, 2**31 - 1) or (isinstance(d, str) and 0 < len(d) <= 64) for d in shape),
            at + ".shape",
            "must be a list of non-negative integers or dimension names",
        )
        specs.append(TensorSpec(name=name, dtype=dtype, shape=list(shape)))
    return specs


def _count(g: dict[str, Any], key: str, where: str, *, nullable: bool) -> int | None:
    value = g.get(key, None if nullable else 1)
    if value is None and nullable:
        return None
    _require(
        _int_in(value, 1, 2**31 - 1),
        where + key,
        f"must be a positive integer{' or null' if nullable else ''}, got {value!r}",
    )
    return int(value)  # type: ignore[arg-type]


def _graph(g: object, i: int) -> GraphEntry:
    where = f"graphs[{i}]."
    _require(isinstance(g, dict), f"graphs[{i}]", "must be an object")
    assert isinstance(g, dict)
    missing = sorted(GRAPH_KEYS - set(g))
    _require(not missing, f"graphs[{i}]", f"lacks {', '.join(missing)}")
    unknown = sorted(set(g) - GRAPH_KEYS - OPTIONAL_GRAPH_KEYS)
    _require(not unknown, f"graphs[{i}]", f"has unknown field(s) {', '.join(map(repr, unknown))}")
    component = g["component"]
    known = (*COMPONENTS, *OPTIONAL_COMPONENTS)
    _require(component in known, where + "component", f"must be one of {', '.join(known)}, got {component!r}")
    variant = g["variant"]
    _require(variant in VARIANTS, where + "variant", f"must be one of {', '.join(VARIANTS)}, got {variant!r}")
    path = _string(g, "path", where)
    reason = paths.unsafe_reason(path)
    _require(reason is None, where + "path", f"{path!r} {reason}")
    _require(
        path.startswith(f"{component}/") and path.endswith(".onnx") and path.count("/") == 1,
        where + "path",
        f"must name an .onnx file in {component}/, got {path!r}",
    )
    data = g["external_data"]
    _require(isinstance(data, list), where + "external_data", "must be a list of bare file names")
    for name in data:
        reason = paths.unsafe_reason(name)
        _require(
            reason is None and "/" not in name,
            where + "external_data",
            f"entry {name!r} must be a bare file name ({reason or 'it has a /'})",
        )
    nodes = g.get("cpu_nodes_without_f16", [])
    _require(
        isinstance(nodes, list) and all(isinstance(n, str) for n in nodes),
        where + "cpu_nodes_without_f16",
        "must be a list of node names",
    )
    requires_f16 = g.get("requires_f16", False)
    _require(isinstance(requires_f16, bool), where + "requires_f16", f"must be true or false, got {requires_f16!r}")
    return GraphEntry(
        component=component,
        variant=variant,
        path=path,
        external_data=list(data),
        precision=_string(g, "precision", where),
        inputs=_tensors(g["inputs"], where + "inputs"),
        outputs=_tensors(g["outputs"], where + "outputs"),
        requires_f16=requires_f16,
        cpu_nodes_without_f16=list(nodes),
        attention_query_blocks=int(_count(g, "attention_query_blocks", where, nullable=False) or 1),
        attention_max_tokens=_count(g, "attention_max_tokens", where, nullable=True),
        attention_heads=_count(g, "attention_heads", where, nullable=True),
    )


def _file(rel: object, entry: object) -> FileEntry:
    where = f"files[{rel!r}]"
    reason = paths.unsafe_reason(rel)
    _require(reason is None, f"files key {rel!r}", f"{reason}: a model file must be a relative path in the folder")
    _require(
        isinstance(entry, dict) and set(entry) <= {"size", "sha256", "blocks"} and "size" in entry,
        where,
        "must be an object {size, sha256, blocks?}",
    )
    assert isinstance(entry, dict)
    size = entry["size"]
    _require(
        _int_in(size, 0, MAX_FILE_SIZE), where + ".size", f"must be an integer from 0 to {MAX_FILE_SIZE}, got {size!r}"
    )
    sha256 = entry.get("sha256")
    _require(
        sha256 is None or (isinstance(sha256, str) and SHA256.fullmatch(sha256) is not None),
        where + ".sha256",
        f"must be 64 lowercase hex digits (or null), got {sha256!r}",
    )
    blocks = entry.get("blocks")
    if blocks is None:
        return FileEntry(size=size, sha256=sha256)
    _require(sha256 is not None, where + ".blocks", "needs the file's sha256 beside it")
    _require(
        isinstance(blocks, dict) and set(blocks) == {"size", "sha256"},
        where + ".blocks",
        "must be an object {size, sha256}",
    )
    block_size = blocks["size"]
    _require(
        _int_in(block_size, MIN_BLOCK_SIZE, MAX_BLOCK_SIZE),
        where + ".blocks.size",
        f"must be an integer from {MIN_BLOCK_SIZE} to {MAX_BLOCK_SIZE}, got {block_size!r}",
    )
    digests = blocks["sha256"]
    count = math.ceil(size / block_size)
    _require(
        isinstance(digests, list)
        and len(digests) == count
        and all(isinstance(d, str) and SHA256.fullmatch(d) for d in digests),
        where + ".blocks.sha256",
        f"must be a list of {count} SHA-256 digests (64 lowercase hex digits), one per block",
    )
    return FileEntry(size=size, sha256=sha256, blocks=Blocks(size=block_size, sha256=tuple(digests)))


MAX_LORAS = 64


def _loras(value: object) -> list[LoraEntry]:
    _require(
        isinstance(value, list) and len(value) <= MAX_LORAS,
        "loras",
        f"must be a list of at most {MAX_LORAS} {{file, sha256, scale}}",
    )
    entries = []
    items: list[Any] = value  # type: ignore[assignment]
    for i, item in enumerate(items):
        at = f"loras[{i}]"
        _require(
            isinstance(item, dict) and set(item) == {"file", "sha256", "scale"},
            at,
            "must be an object with exactly file, sha256 and scale",
        )
        name = _string(item, "file", at + ".")
        _require(
            0 < len(name) <= 255 and "/" not in name and "\\" not in name and "\x00" not in name,
            at + ".file",
            f"must be a bare file name, got {name!r}",
        )
        sha256 = item["sha256"]
        _require(
            isinstance(sha256, str) and SHA256.fullmatch(sha256) is not None,
            at + ".sha256",
            f"must be 64 lowercase hex digits, got {sha256!r}",
        )
        scale = item["scale"]
        _require(
            isinstance(scale, int | float) and not isinstance(scale, bool) and math.isfinite(scale),
            at + ".scale",
            f"must be a finite number, got {scale!r}",
        )
        entries.append(LoraEntry(file=name, sha256=sha256, scale=float(scale)))
    return entries


def _guidance(value: object, where: str) -> float | None:
    _require(
        value is None
        or (isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 1),
        where,
        f"must be a finite number of at least 1, or null, got {value!r}",
    )
    return None if value is None else float(value)  # type: ignore[arg-type]


def _pipeline(value: object) -> PipelineDefaults:
    keys = {"is_distilled", "steps", "guidance_scale", "inpaint_guidance_scale"}
    _require(
        isinstance(value, dict) and set(value) == keys,
        "pipeline",
        "must be an object {is_distilled, steps, guidance_scale, inpaint_guidance_scale}",
    )
    assert isinstance(value, dict)
    _require(isinstance(value["is_distilled"], bool), "pipeline.is_distilled", "must be true or false")
    _require(_int_in(value["steps"], 1, 1000), "pipeline.steps", f"must be a positive integer, got {value['steps']!r}")
    return PipelineDefaults(
        is_distilled=value["is_distilled"],
        steps=value["steps"],
        guidance_scale=_guidance(value["guidance_scale"], "pipeline.guidance_scale"),
        inpaint_guidance_scale=_guidance(value["inpaint_guidance_scale"], "pipeline.inpaint_guidance_scale"),
    )


def _from_json(data: object, where: Path | str) -> Manifest:
    """The one schema check of manifest.json: any violation is a ModelRepoError naming the field."""
    try:
        _require(isinstance(data, dict), "the top level", f"must be a JSON object, got a {type(data).__name__}")
        assert isinstance(data, dict)
        _require(data.get("format") == FORMAT, "format", f"must be {FORMAT!r}, got {data.get('format')!r}")
        version = data.get("format_version")
        if not _is_int(version) or version < 1:
            raise _Invalid(f"format_version must be a positive integer, got {version!r}")
        if version > FORMAT_VERSION:
            raise ModelRepoError(
                f"{where} is format version {version}; this klein-web reads up to {FORMAT_VERSION}. Upgrade klein-web."
            )
        top = {"format", "format_version", "source", "converter", "files", "graphs", "loras", "pipeline"}
        unknown = sorted(set(data) - top)
        _require(not unknown, "the top level", f"has unknown field(s) {', '.join(map(repr, unknown))}")
        source, converter = _string(data, "source", ""), _string(data, "converter", "")
        _require(
            isinstance(data.get("files"), dict) and bool(data["files"]),
            "files",
            "must be a non-empty object of {path: {size, sha256}}",
        )
        files = {str(rel): _file(rel, entry) for rel, entry in data["files"].items()}
        _require(isinstance(data.get("graphs"), list) and bool(data["graphs"]), "graphs", "must be a non-empty list")
        graphs = [_graph(g, i) for i, g in enumerate(data["graphs"])]
        for i, graph in enumerate(graphs):
            for rel in graph.files():
                _require(rel in files, f"graphs[{i}]", f"file {rel} is not listed in files")
        for component in COMPONENTS:
            _require(any(g.component == component for g in graphs), "graphs", f"has no {component} graph")
        for rel in TOKENIZER_FILES:
            _require(rel in files, "files", f"does not list {rel}")
        loras = _loras(data["loras"]) if "loras" in data else []
        pipeline = _pipeline(data["pipeline"]) if "pipeline" in data else DISTILLED
    except _Invalid as exc:
        raise ModelRepoError(
            f"{where} is malformed: {exc}. Re-create it with `klein-web fetch` or `klein-web convert`."
        ) from None
    return Manifest(source=source, converter=converter, files=files, graphs=graphs, loras=loras, pipeline=pipeline)


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
