"""LoRA weights merged into the transformer before export: `klein-web convert --lora PATH[:SCALE]`.

A LoRA file is read the way diffusers' `Flux2LoraLoaderMixin.load_lora_weights` reads it for a
Flux2KleinPipeline, with diffusers' own key conversions (kohya `lora_unet_*`, BFL / ai-toolkit
`diffusion_model.*`, PEFT `base_model.model.*`, older diffusers `*.lora.down`), into the diffusers/PEFT layout
`transformer.<module>.lora_A.weight` / `lora_B.weight`. Each target Linear then gets

    W += scale * (alpha / rank) * B @ A            (in float32; rsLoRA: alpha / sqrt(rank))

which is what `pipe.load_lora_weights(path); pipe.fuse_lora(lora_scale=scale)` computes. alpha comes from the
file's `lora_adapter_metadata` (a PEFT LoraConfig, as diffusers saves it) or from `transformer.<module>.alpha`
tensors; without either alpha = rank, as diffusers assumes. Kohya files carry alpha per module, and diffusers'
conversion folds it into A and B.

The merge keeps the converter's streaming: a skeleton's placeholder (builder.convert.checkpoint) reads its base
weight from the checkpoint when the graph needs it and adds the LoRA delta right then, so the checkpoint is still
never held in memory; only the LoRA factors are (a few hundred MB at most).

Anything diffusers would load differently or not at all is refused with one line: a file that is not safetensors,
text-encoder weights, LoKr / DoRA / LoRA biases, keys naming no Linear of the transformer, factors whose shapes do
not fit the layer. So is anything that would make a broken model: a NaN or infinite factor, alpha or scale, and an
update or merged weight that is not finite or beyond MAX_WEIGHT (the q4f16 graphs compute in float16).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from builder.errors import ConversionError

# How many offending keys an error message lists.
SHOWN_KEYS = 4
# Key fragments of text-encoder LoRA weights in the formats diffusers knows (kohya `lora_te*`, diffusers
# `text_encoder.`, PEFT `text_encoders.`); klein's text encoder is exported as it is.
TEXT_ENCODER_PREFIXES = ("lora_te", "text_encoder", "te_", "te1_", "te2_")
METADATA_KEY = "lora_adapter_metadata"  # diffusers.loaders.lora_base.LORA_ADAPTER_METADATA_KEY
# The largest magnitude a merged weight may have: float16's largest finite number. The q4f16 graphs multiply in
# float16, so a larger weight overflows there.
MAX_WEIGHT = 65504.0


@dataclass(frozen=True)
class LoraSpec:
    """One `--lora PATH[:SCALE]`."""

    path: Path
    scale: float = 1.0


@dataclass(frozen=True)
class LoraPair:
    """The low-rank update of one Linear: delta = factor * up @ down."""

    module: str  # the Linear's name inside the transformer, e.g. transformer_blocks.0.attn.to_q
    down: np.ndarray  # lora_A [rank, in_features], float32
    up: np.ndarray  # lora_B [out_features, rank], float32
    factor: float  # alpha / rank (or / sqrt(rank)) times the user's scale

    def delta(self) -> np.ndarray:
        product: np.ndarray = self.up @ self.down
        with np.errstate(over="ignore", invalid="ignore"):  # an overflow is found and refused by check_finite
            product *= np.float32(self.factor)
        return product


@dataclass(frozen=True)
class Lora:
    """A LoRA file read and converted: what the manifest records, and its updates."""

    file: str  # bare file name
    sha256: str
    scale: float
    format: str  # for the log: which layout the file had
    pairs: tuple[LoraPair, ...]


def parse_spec(text: str) -> LoraSpec:
    """`PATH[:SCALE]`: only a trailing `:<number>` is a scale, so paths with ':' elsewhere stay whole.

    A file whose whole name ends in `:<number>` wins over the split when the part before the ':' is no file.
    """
    head, sep, tail = text.rpartition(":")
    if sep and head:
        try:
            scale = float(tail)
        except ValueError:
            scale = None
        if scale is not None and not (Path(text).is_file() and not Path(head).is_file()):
            if not math.isfinite(scale):
                raise ConversionError(f"--lora {text}: the scale {tail!r} is not a finite number.")
            return LoraSpec(Path(head), scale)
    return LoraSpec(Path(text), 1.0)


def load(spec: LoraSpec, *, log: Callable[[str], None] = lambda _m: None) -> Lora:
    """Read one LoRA file and convert it to per-Linear updates (ConversionError on anything unsupported)."""
    path = spec.path
    where = f"--lora {path}"
    if not path.is_file():
        raise ConversionError(f"{where}: no such file.")
    state, metadata = _read_safetensors(path, where)
    fmt, state, alphas = to_diffusers_layout(state, where=where, log=log)
    config = _adapter_config(metadata, where)
    if alphas and config.r is not None:
        raise ConversionError(
            f"{where} has both alpha tensors and a LoRA config in its metadata; which alpha applies is ambiguous."
        )
    pairs = _pairs(state, config, alphas, scale=spec.scale, where=where)
    return Lora(file=path.name, sha256=_sha256(path), scale=spec.scale, format=fmt, pairs=tuple(pairs))


def _read_safetensors(path: Path, where: str) -> tuple[dict[str, Any], dict[str, str]]:
    from safetensors import SafetensorError, safe_open

    from builder.convert.checkpoint import read_header

    try:
        read_header(path)  # a clear "not a safetensors file" for pickles, zips and the like
    except ConversionError as exc:
        hint = (
            " Only .safetensors LoRA files are read (no pickles)."
            if "not a safetensors file" in str(exc)
            else " Use an intact copy of the file (download or save it again)."
        )
        raise ConversionError(f"--lora: {exc}{hint}") from None
    try:
        with safe_open(str(path), framework="pt", device="cpu") as handle:
            metadata: dict[str, str] = dict(handle.metadata() or {})
            state = {key: handle.get_tensor(key) for key in handle.keys()}  # noqa: SIM118 - safe_open is no dict
    except (SafetensorError, OSError, ValueError) as exc:
        raise ConversionError(f"{where}: the safetensors file cannot be read ({exc}).") from None
    if not state:
        raise ConversionError(f"{where} holds no tensors.")
    return state, metadata


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def _few(keys: Iterable[str]) -> str:
    keys = sorted(keys)
    shown = ", ".join(keys[:SHOWN_KEYS])
    return shown + (f" and {len(keys) - SHOWN_KEYS} more" if len(keys) > SHOWN_KEYS else "")


def to_diffusers_layout(
    state: dict[str, Any], *, where: str, log: Callable[[str], None] = lambda _m: None
) -> tuple[str, dict[str, Any], dict[str, float]]:
    """The steps of `Flux2LoraLoaderMixin.lora_state_dict` / `load_lora_adapter`, refusing where diffusers would
    drop keys silently or warn: (name of the format found, `<module>.lora_A/B.weight` state dict, alphas).

    One addition: `transformer.<module>.alpha` scalars beside diffusers/PEFT keys (some trainers write them; the
    Flux2 loader refuses such files) are taken as that module's alpha, the meaning diffusers gives `network_alphas`.
    """
    from diffusers.loaders import lora_conversion_utils as conversion
    from diffusers.utils import convert_unet_state_dict_to_peft

    dora = [key for key in state if "dora_scale" in key]
    if dora:
        # diffusers drops DoRA scales with a warning and loads the rest as a plain LoRA; so does the merge.
        log(f"  {where}: ignoring {len(dora)} DoRA scale tensor(s), as diffusers does")
        state = {key: value for key, value in state.items() if "dora_scale" not in key}
    text_encoder = [key for key in state if key.startswith(TEXT_ENCODER_PREFIXES)]
    if text_encoder:
        raise ConversionError(
            f"{where}: text-encoder LoRA weights are not supported (klein-web merges transformer "
            f"LoRAs only): {_few(text_encoder)}."
        )
    if any(".lokr_" in key for key in state):
        raise ConversionError(f"{where} is a LoKr adapter; only LoRA (low-rank A/B factors) is supported.")

    if any(".lora_down.weight" in key for key in state):
        fmt = "kohya"
        remaining = dict(state)  # the conversion pops what it converts and only warns about the rest
        try:
            with _quiet_diffusers():  # its warning about the rest would come before the error below says the same
                state = conversion._convert_kohya_flux2_lora_to_diffusers(remaining)
        except (ValueError, IndexError, RuntimeError, KeyError, TypeError) as exc:
            raise ConversionError(
                f"{where}: kohya factors that do not fit a FLUX.2 layer (a fused qkv's lora_up "
                f"rows must split in three equal parts): {_first_line(exc)}."
            ) from None
        if remaining:
            raise ConversionError(f"{where}: kohya keys that name no FLUX.2 transformer layer: {_few(remaining)}.")
    else:
        fmt = "diffusers/PEFT"
        if any(key.startswith("base_model.model.") for key in state):
            fmt = "PEFT (base_model.model.)"
            state = {key.replace("base_model.model.", "diffusion_model.", 1): v for key, v in state.items()}
        if any(key.startswith("diffusion_model.") for key in state):
            fmt = "BFL / ai-toolkit" if fmt == "diffusers/PEFT" else fmt
            try:
                state = conversion._convert_non_diffusers_flux2_lora_to_diffusers(state)
            except (ValueError, IndexError, RuntimeError, KeyError, TypeError) as exc:
                raise ConversionError(f"{where}: keys of an unknown layout ({_first_line(exc)}).") from None

    alphas: dict[str, float] = {}
    for key in [key for key in state if key.startswith("transformer.") and key.endswith(".alpha")]:
        value = state.pop(key)
        if value.numel() != 1:
            raise ConversionError(f"{where}: {key} has shape {list(value.shape)}; an alpha is one number.")
        alpha = float(value.item())
        if not math.isfinite(alpha):
            raise ConversionError(f"{where}: {key} is {alpha}; an alpha must be a finite number.")
        alphas[key.removeprefix("transformer.").removesuffix(".alpha")] = alpha

    not_lora = [key for key in state if "lora" not in key]
    if not_lora:
        raise ConversionError(
            f"{where}: not a LoRA in a format diffusers loads for FLUX.2 (keys without lora_A/B "
            f"or lora_down/up: {_few(not_lora)})."
        )
    outside = [key for key in state if not key.startswith("transformer.")]
    if outside:
        raise ConversionError(
            f"{where}: keys that belong to no transformer layer (diffusers expects "
            f"'transformer.<module>.lora_A.weight'): {_few(outside)}."
        )
    state = {key.removeprefix("transformer."): value for key, value in state.items()}
    if not any("lora_A" in key or "lora_B" in key for key in state):
        state = convert_unet_state_dict_to_peft(state)  # older diffusers names: `.lora.down.weight`, `to_q_lora.up`
        fmt = "diffusers (older names)"
    return fmt, state, alphas


@contextlib.contextmanager
def _quiet_diffusers() -> Iterator[None]:
    import logging

    logger = logging.getLogger("diffusers")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


@dataclass(frozen=True)
class AdapterConfig:
    """The parts of a PEFT LoraConfig that set a module's scaling (None: diffusers' default, alpha = rank)."""

    r: int | None = None
    lora_alpha: float | None = None
    rank_pattern: dict[str, int] | None = None
    alpha_pattern: dict[str, float] | None = None
    use_rslora: bool = False

    def factor(self, module: str, rank: int, where: str) -> float:
        """alpha / r for `module`, matched like peft (`get_pattern_key`: a pattern matches a whole dotted suffix)."""
        if self.r is None:
            return 1.0
        r = _by_pattern(self.rank_pattern or {}, module, self.r)
        alpha = _by_pattern(self.alpha_pattern or {}, module, self.lora_alpha if self.lora_alpha is not None else r)
        if int(r) != rank:
            raise ConversionError(f"{where}: {module} has rank {rank}, but the file's LoRA config says {r}.")
        return float(alpha) / (math.sqrt(r) if self.use_rslora else r)


def _by_pattern(patterns: dict[str, Any], module: str, default: Any) -> Any:
    for pattern, value in patterns.items():
        if re.match(rf"(.*\.)?({pattern})$", module):
            return value
    return default


def _adapter_config(metadata: dict[str, str], where: str) -> AdapterConfig:
    """diffusers' `lora_adapter_metadata`: a JSON LoraConfig whose keys carry the `transformer.` prefix."""
    raw = metadata.get(METADATA_KEY)
    if not raw:
        return AdapterConfig()
    try:
        packed = json.loads(raw)
        config = {
            key.removeprefix("transformer."): value for key, value in packed.items() if key.startswith("transformer.")
        }
    except (ValueError, AttributeError) as exc:
        raise ConversionError(f"{where}: its {METADATA_KEY} is not a JSON object ({exc}).") from None
    if not config:
        return AdapterConfig()
    if config.get("use_dora"):
        raise ConversionError(f"{where} is a DoRA adapter (use_dora); only plain LoRA is supported.")
    if config.get("lora_bias"):
        raise ConversionError(f"{where} trains LoRA biases (lora_bias); only weight updates are supported.")
    try:
        adapter = AdapterConfig(
            r=int(config["r"]),
            lora_alpha=float(config["lora_alpha"]) if config.get("lora_alpha") is not None else None,
            rank_pattern={str(k): int(v) for k, v in (config.get("rank_pattern") or {}).items()},
            alpha_pattern={str(k): float(v) for k, v in (config.get("alpha_pattern") or {}).items()},
            use_rslora=bool(config.get("use_rslora", False)),
        )
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise ConversionError(
            f"{where}: its {METADATA_KEY} is not a LoRA config ({type(exc).__name__}: {exc})."
        ) from None
    for field_name, patterns in (("rank_pattern", adapter.rank_pattern), ("alpha_pattern", adapter.alpha_pattern)):
        for pattern in patterns or {}:
            try:
                re.compile(rf"(.*\.)?({pattern})$")
            except (re.error, RecursionError, OverflowError) as exc:
                raise ConversionError(
                    f"{where}: its {METADATA_KEY} has the {field_name} key {pattern!r}, which is "
                    f"not a regular expression ({exc}); fix the file's metadata."
                ) from None
    alphas = {"lora_alpha": adapter.lora_alpha} if adapter.lora_alpha is not None else {}
    alphas.update({f"alpha_pattern[{k!r}]": v for k, v in (adapter.alpha_pattern or {}).items()})
    for name, value in alphas.items():
        if not math.isfinite(value):
            raise ConversionError(
                f"{where}: its {METADATA_KEY} gives {name} = {value}; an alpha must be a finite "
                "number. Fix the file's metadata or use another file."
            )
    if (adapter.r is not None and adapter.r <= 0) or any(v <= 0 for v in (adapter.rank_pattern or {}).values()):
        raise ConversionError(
            f"{where}: its {METADATA_KEY} gives a rank (r) that is not positive; "
            "fix the file's metadata or use another file."
        )
    return adapter


def _pairs(
    state: dict[str, Any], config: AdapterConfig, alphas: dict[str, float], *, scale: float, where: str
) -> list[LoraPair]:
    """Group `<module>.lora_A.weight` / `<module>.lora_B.weight` into one update per module."""
    import torch

    halves: dict[str, dict[str, Any]] = {}
    unsupported = []
    for key, value in state.items():
        match = re.fullmatch(r"(.+)\.lora_([AB])\.weight", key)
        if match is None:
            unsupported.append(key)
            continue
        halves.setdefault(match.group(1), {})[match.group(2)] = value
    if unsupported:
        raise ConversionError(
            f"{where}: keys other than lora_A/lora_B weights (LoRA biases, DoRA magnitudes, "
            f"embeddings are not supported): {_few(unsupported)}."
        )
    pairs = []
    for module in sorted(halves):
        half = halves[module]
        if set(half) != {"A", "B"}:
            missing = "lora_B" if "A" in half else "lora_A"
            raise ConversionError(f"{where}: {module} has no {missing}.weight.")
        down, up = (half[k].to(torch.float32).numpy() for k in ("A", "B"))
        if down.ndim != 2 or up.ndim != 2 or up.shape[1] != down.shape[0]:
            raise ConversionError(
                f"{where}: {module}'s lora_A {list(down.shape)} and lora_B {list(up.shape)} are "
                "not the factors of one low-rank update."
            )
        for half_name, array in (("lora_A", down), ("lora_B", up)):
            check_finite(
                array,
                f"{where}: {module}.{half_name}.weight",
                "use a LoRA whose weights are all numbers (its training may have diverged).",
            )
        rank = int(down.shape[0])
        factor = scale * (alphas[module] / rank if module in alphas else config.factor(module, rank, where))
        if not math.isfinite(factor):
            raise ConversionError(
                f"{where}: {module}'s scale (--lora scale {scale:g} times alpha / rank) is {factor:g}"
                ", not a usable number; give a smaller scale or fix the file's alpha."
            )
        pair = LoraPair(module=module, down=np.ascontiguousarray(down), up=np.ascontiguousarray(up), factor=factor)
        check_finite(
            pair.delta(),
            f"{where}: {module}'s update (scale {scale:g})",
            "give a smaller --lora scale or use another file.",
        )
        pairs.append(pair)
    if not pairs:
        raise ConversionError(f"{where} holds no LoRA weights for the transformer.")
    stray = sorted(set(alphas) - set(halves))
    if stray:
        raise ConversionError(f"{where}: alpha for layer(s) without lora_A/lora_B: {_few(stray)}.")
    return pairs


def check_finite(array: np.ndarray, what: str, advice: str) -> None:
    """ConversionError unless every value of `array` is finite and at most MAX_WEIGHT in magnitude."""
    bad = int(np.count_nonzero(~np.isfinite(array)))
    if bad:
        raise ConversionError(f"{what} holds {bad} NaN or infinite value(s); {advice}")
    peak = float(np.max(np.abs(array))) if array.size else 0.0
    if peak > MAX_WEIGHT:
        raise ConversionError(
            f"{what} reaches {peak:.3g}, beyond the {MAX_WEIGHT:g} a weight may have (float16's range); {advice}"
        )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# --------------------------------------------------------------------------------------------------------
# Merging into a transformer: a skeleton (weights read later from the checkpoint) or a module with its weights.


def merge(transformer: Any, loras: Iterable[Lora]) -> int:
    """Add every LoRA's updates, in order, to `transformer`'s Linear weights; returns how many layers changed.

    All targets are checked before any weight changes, so a refused LoRA leaves the module as it was.
    """
    import torch
    from torch import nn

    loras = list(loras)
    modules = dict(transformer.named_modules())
    for lora in loras:
        unknown: list[str] = []
        problems: list[str] = []
        for pair in lora.pairs:
            layer = modules.get(pair.module)
            if layer is None:
                unknown.append(pair.module)
            elif not isinstance(layer, nn.Linear):
                raise ConversionError(
                    f"--lora {lora.file}: {pair.module} is a {type(layer).__name__} of the "
                    "transformer, not a Linear layer; only Linear layers take a LoRA."
                )
            elif tuple(layer.weight.shape) != (pair.up.shape[0], pair.down.shape[1]):
                problems.append(
                    f"{pair.module}: the LoRA gives [{pair.up.shape[0]}, {pair.down.shape[1]}] "
                    f"(lora_B {list(pair.up.shape)} @ lora_A {list(pair.down.shape)}), the layer's weight "
                    f"is {list(layer.weight.shape)}"
                )
        if unknown:
            raise ConversionError(
                f"--lora {lora.file}: {len(unknown)} LoRA target(s) match no layer of this "
                f"transformer: {_few(unknown)}. Is it a LoRA for another model?"
            )
        if problems:
            raise ConversionError(
                f"--lora {lora.file}: shapes do not fit this transformer: {'; '.join(problems[:3])}"
                ". Is it a LoRA for another FLUX.2 size (4B / 9B)?"
            )

    targets: dict[str, list[LoraPair]] = {}
    for lora in loras:
        for pair in lora.pairs:
            targets.setdefault(pair.module, []).append(pair)
    in_memory: dict[str, np.ndarray] = {}
    for name, pairs in targets.items():
        weight = modules[name].weight
        load = getattr(weight, "klein_load", None)
        if load is not None:  # a skeleton's placeholder: add the deltas (checked then) when the base weight is read
            weight.klein_load = _merged_loader(load, tuple(pairs))
            continue
        with torch.no_grad():
            merged = weight.detach().to(torch.float32).numpy().copy()
        for pair in pairs:
            merged += pair.delta()
        check_finite(merged, f"--lora: the merged weight of {name}", MERGED_ADVICE)
        in_memory[name] = merged
    with torch.no_grad():  # every merged weight is checked before the first one is written
        for name, merged in in_memory.items():
            weight = modules[name].weight
            weight.copy_(torch.from_numpy(merged).to(weight.dtype))
    return len(targets)


MERGED_ADVICE = "give the LoRA(s) a smaller scale, or use other files."


def _merged_loader(load: Callable[[], np.ndarray], pairs: tuple[LoraPair, ...]) -> Callable[[], np.ndarray]:
    def merged() -> np.ndarray:
        weight = load().astype(np.float32, copy=False)
        for pair in pairs:
            weight += pair.delta()
        check_finite(weight, f"--lora: the merged weight of {pairs[0].module}", MERGED_ADVICE)
        return weight

    return merged
