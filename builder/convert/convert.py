"""`klein-web convert`: a diffusers FLUX.2 [klein] folder -> the ONNX web model repo the app loads.

    SRC (diffusers format)              OUT (the seed repo's layout, builder/repo/manifest.py)
    text_encoder/  (Qwen3ForCausalLM)   text_encoder/text_encoder_{q4|q4f16|fp32}.onnx + .onnx_data, .onnx_data_1, ...
    transformer/   (Flux2Transformer)   transformer/transformer_{q4|q4f16|fp32}.onnx   + data files
    vae/           (AutoencoderKLFlux2) vae_decoder/vae_decoder_fp16.onnx (q4, q4f16) and vae_decoder_fp32.onnx
                                        vae_encoder/vae_encoder_fp16.onnx (q4, q4f16) and vae_encoder_fp32.onnx
                                        vae_decoder/preview_map.json: the step previews' colours, fitted to
                                        the VAE (builder/convert/preview_map.py)

--precision q4f16 writes the q4 graphs too (same packed weights), so one repo serves adapters with and
without shader-f16; the manifest marks the q4f16 graphs requires_f16.
    tokenizer/, scheduler/              copied unchanged
                                        manifest.json (every file with size + sha256, every graph's I/O)

--weights compact|seed: how the q4/q4f16 graphs store their weights (builder.convert.weight_format).

Memory: the checkpoint is never loaded. Each component is built as a skeleton (its classes and config,
placeholder weights: builder.convert.checkpoint), exported without weights, and then its weights are streamed
from the safetensors files one tensor at a time, each stored or quantised as it arrives; so the peak is
about one output graph. The log prints each component's peak RSS next to its graph size. --jobs N builds the
three parts (text encoder, transformer, VAE) in N processes at once (builder.convert.convert_jobs).

OUT is assembled in a temp folder beside it and swapped in at the end: a failed or interrupted
conversion never leaves a half-written repo, and a swap killed half-way leaves the old repo where the next run
puts it back (builder.repo.files.replace_folder). With --lora every merged weight is checked to be finite as it is
made, and the transformer graphs written are read back and checked again, before anything at OUT is replaced.

--lora PATH[:SCALE] (repeatable) merges LoRA weights into the transformer before its export and quantisation
(builder.convert.lora); the manifest lists them.

This module runs the steps: SRC is read by builder.convert.convert_source, each component's graphs are written by
builder.convert.convert_graphs.
"""

from __future__ import annotations

import functools
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from builder import __version__
from builder.convert import lora, preview_map
from builder.convert.convert_graphs import SavedGraph, exporter, write_graphs
from builder.convert.convert_jobs import choose_jobs, estimated_peak, run_parts
from builder.convert.convert_source import (
    SOURCE_FOLDER,
    SOURCE_FOLDERS,
    check_config,
    check_source,
    copy_unchanged,
    load_skeleton,
    prepare_loras,
)
from builder.convert.finite_weights import check_finite_graph
from builder.convert.onnx_graph import DEFAULT_DATA_FILE_CAP
from builder.convert.pipeline_kind import pipeline_defaults
from builder.convert.weight_format import COMPACT, WeightFormat
from builder.errors import ConversionError, KleinWebError
from builder.repo.files import (
    clean_stale_staging,
    disk_problem,
    ensure_folder,
    make_staging,
    probe_writable,
    replace_folder,
)
from builder.repo.manifest import MANIFEST_NAME, LoraEntry, Manifest, write
from builder.repo.manifest import load as load_manifest
from builder.repo.model_card import write_model_card
from builder.repo.verify import describe_files

PRECISIONS = ("q4", "q4f16", "fp32")
# What `convert` builds from one skeleton each (and, with --jobs, in one process each): the VAE's decoder and
# encoder share theirs, so its buffers are read once.
PARTS = {"text_encoder": ("text_encoder",), "transformer": ("transformer",), "vae": ("vae_decoder", "vae_encoder")}


def convert(
    src: Path,
    out: Path,
    *,
    precision: str = "q4",
    log: Callable[[str], None],
    max_data_file_bytes: int | Mapping[str, int] = DEFAULT_DATA_FILE_CAP,
    loras: Sequence[lora.LoraSpec] = (),
    weights: WeightFormat = COMPACT,
    jobs: int | None = None,
) -> Manifest:
    """Convert the diffusers pipeline folder SRC into a web model repo at OUT; returns its manifest.

    `loras` are merged into the transformer in order (builder.convert.lora). `weights`: how the q4 and q4f16 graphs
    store their weights (builder.convert.weight_format; the seed repository's layout, or the compact default).

    `jobs`: how many parts (text encoder, transformer, VAE) are built at once, each in its own process
    (builder.convert.convert_jobs; the same bytes whatever the count); None chooses from the free memory.

    `max_data_file_bytes` caps each external-data file (one number, or per component; components missing
    from the mapping get the default 1.8 GB). Tests use small caps to get several files per graph.
    """
    src, out = Path(src), Path(out)
    start = time.monotonic()

    # 1. Check inputs: nothing is written when the source or the destination is wrong.
    model_index = check_source(src)
    check_precision(precision)
    check_destination(out, inputs=[src, *(item.path for item in loras)])
    if jobs is not None:
        check_jobs(jobs)
    defaults = pipeline_defaults(model_index)  # distilled or base: what manifest.json tells the app and reference
    # Each part's config must build its model: a hand-edited config.json fails now, not once the parts before it
    # are converted.
    for components in PARTS.values():
        check_config(src, components[0])
    # LoRAs are read and matched against the transformer now, so a wrong one fails before any graph is built
    # (the transformer's part merges them again into the skeleton it exports).
    merged = [
        LoraEntry(file=item.file, sha256=item.sha256, scale=item.scale)
        for item in prepare_loras(src, loras, log=log).loras
    ]
    peaks = {part: estimated_peak(src / SOURCE_FOLDER[components[0]], precision) for part, components in PARTS.items()}
    jobs = choose_jobs(peaks, jobs, log=log)

    # 2. Write each part's graphs into a staging folder beside OUT (after removing ones a killed run left).
    clean_stale_staging(out.parent, (out.name,), log=log)
    stage = make_staging(out.parent, out.name)
    try:
        work = functools.partial(
            convert_part,
            src,
            precision=precision,
            stage=stage,
            max_data_file_bytes=max_data_file_bytes,
            weights=weights,
            loras=tuple(loras),
        )
        results = run_parts(list(PARTS), work, jobs=jobs, log=log)
        saved: list[SavedGraph] = [graph for part in PARTS for graph in results[part]]

        # The step previews' colour map, fitted to the VAE graphs written above.
        fitted = preview_map.write_fitted(stage, log=log)
        # 3. Tokenizer and scheduler config, unchanged; 4. manifest.json; 5. swap the finished repo in.
        copied = copy_unchanged(src, stage)
        entries = [graph.entry() for graph in saved]
        manifest = Manifest(
            source=f"{model_index.get('_class_name', 'diffusers pipeline')} ({src.resolve().name})",
            converter=f"klein-web {__version__} convert --precision {precision}"
            + (f" --weights {weights.name}" if weights != COMPACT and precision != "fp32" else "")
            + "".join(f" --lora {entry.file}:{entry.scale!r}" for entry in merged),
            files=describe_files(stage, [name for graph in entries for name in graph.files()] + copied + fitted),
            graphs=entries,
            loras=merged,
            pipeline=defaults,
        )
        write(stage, manifest)
        write_model_card(stage, manifest, src)
        replace_folder(stage, out)
    except OSError as exc:
        # A full disk or the file-size limit (the graphs, the tokenizer's copy): one line, the staging folder gone.
        shutil.rmtree(stage, ignore_errors=True)
        problem = disk_problem(exc)
        fix = "Free some space or raise the limit, then run convert again" if problem else "Fix that and run again"
        where = exc.filename2 or exc.filename or stage
        raise ConversionError(
            f"Cannot convert: {problem or exc.strerror or exc} ({where}). {fix}; OUT {out} was left as it was."
        ) from exc
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    log(f"convert: wrote {out} ({precision}) in {time.monotonic() - start:.1f} s")
    return manifest


def convert_part(
    src: Path,
    part: str,
    *,
    precision: str,
    stage: Path,
    max_data_file_bytes: int | Mapping[str, int],
    weights: WeightFormat,
    loras: Sequence[lora.LoraSpec],
    log: Callable[[str], None],
) -> list[SavedGraph]:
    """Write the graphs of one part (PARTS) into `stage`, from one skeleton; returns what it saved."""
    start = time.monotonic()
    module: Any = prepare_loras(src, loras, log=lambda _line: None).skeleton if part == "transformer" else None
    saved: list[SavedGraph] = []
    for component in PARTS[part]:
        cap = (
            max_data_file_bytes.get(component, DEFAULT_DATA_FILE_CAP)
            if isinstance(max_data_file_bytes, Mapping)
            else max_data_file_bytes
        )
        if module is None:
            module = load_skeleton(src, component, log=log)
        graphs = write_graphs(
            exporter(component, module), component, precision, stage, max_data_file_bytes=cap, log=log, weights=weights
        )
        if component == "transformer" and loras:
            # The merged weights as stored, before anything at OUT is replaced (size classes share them).
            for graph in {graph.variant: graph for graph in graphs}.values():
                check_finite_graph(stage / graph.entry().path, what="--lora")
        saved += graphs
        log(f"  {component} done in {time.monotonic() - start:.1f} s")
    return saved


def check_jobs(jobs: int) -> None:
    if not 1 <= jobs <= len(PARTS):
        raise ConversionError(f"--jobs {jobs}: a conversion has {len(PARTS)} parts; pass 1 to {len(PARTS)}.")


def check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise ConversionError(f"--precision {precision!r} is not one of {', '.join(PRECISIONS)}.")


def check_destination(out: Path, *, inputs: Sequence[Path] = ()) -> None:
    """OUT may be missing, empty, or an earlier model repo (replaced); never an unrelated folder, and never one
    holding an input (SRC, a --lora file), which the swap at the end would delete with the old OUT."""
    if out.is_symlink():
        raise ConversionError(f"OUT {out} is a symlink; pass the real folder so the link is not replaced.")
    if out.exists() and not out.is_dir():
        raise ConversionError(f"OUT {out} is a file; pass a folder path for the model repo.")
    if out.is_dir() and any(out.iterdir()) and not is_model_repo(out):
        raise ConversionError(
            f"OUT {out} is a non-empty folder that is not a model repo (no klein-web {MANIFEST_NAME}); "
            "pass a new or empty folder so nothing unrelated is overwritten."
        )
    real_out = out.resolve()
    for given in inputs:
        real = Path(given).resolve()
        read = [real / name for name in SOURCE_FOLDERS] if real.is_dir() else []
        # Every file the conversion reads, symlinks followed: whatever lies inside OUT goes with the old OUT.
        for path in [Path(given), *(path for folder in read for path in sorted(folder.rglob("*")))]:
            resolved = path.resolve()
            if resolved == real_out or real_out in resolved.parents:
                raise ConversionError(
                    f"{path} is inside OUT {out}, which the conversion replaces (its files would be deleted); "
                    f"pass another OUT, e.g. {out.parent / (out.name + '-new')}, or move it out of OUT first."
                )
        if any(folder == real_out or folder in real_out.parents for folder in read):
            raise ConversionError(
                f"OUT {out} is inside {given}'s folders that the conversion reads; pass an OUT outside them, "
                f"e.g. {Path(given) / 'web'}."
            )
    # The staging folder goes beside OUT: find out now, not after the conversion, that it cannot be written.
    ensure_folder(out.parent, what=f"OUT {out}")
    probe_writable(out.parent, what=f"OUT {out}")


def is_model_repo(folder: Path) -> bool:
    """`folder` holds a klein-web manifest.json (a web app's manifest.json is someone else's project)."""
    try:
        load_manifest(folder)
    except KleinWebError:
        return False
    return True
