"""Prompt -> (input_ids, attention_mask) exactly as Flux2KleinPipeline tokenizes it, without transformers.

diffusers does (pipeline_flux2_klein.py `_get_qwen3_prompt_embeds`):

    text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                         add_generation_prompt=True, enable_thinking=False)
    inputs = tokenizer(text, padding="max_length", truncation=True, max_length=512)

Here the chat template is rendered with jinja2 in the same sandboxed environment transformers 5.24 builds
(`transformers.utils.chat_template_utils._cached_compile_jinja_template`), and the text is encoded with the
`tokenizers` library from `tokenizer/tokenizer.json`; padding and truncation are done by hand so the
result does not depend on padding/truncation settings stored in tokenizer.json.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import numpy as np
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

from builder.errors import InputError, ModelRepoError
from builder.repo.manifest import MAX_SEQUENCE_LENGTH

TOKENIZER_JSON = "tokenizer/tokenizer.json"
TOKENIZER_CONFIG = "tokenizer/tokenizer_config.json"
CHAT_TEMPLATE_FILE = "tokenizer/chat_template.jinja"

# tokenizer_config keys whose values transformers passes to the template (`special_tokens_map`).
_SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


@dataclass(frozen=True)
class PromptTokens:
    """One tokenized prompt, ready for the text encoder."""

    input_ids: np.ndarray  # int64 [1, max_length]
    attention_mask: np.ndarray  # int64 [1, max_length], 1 = token, 0 = pad
    text: str  # the templated text that was encoded
    token_count: int  # tokens kept (mask ones)
    dropped: int  # tokens cut off by truncation (0 when the prompt fits)


class _GenerationTag(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` renders its body, as transformers' AssistantTracker does."""

    tags = {"generation"}  # noqa: RUF012 - jinja2.ext.Extension declares it as a plain attribute

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller: Any) -> str:
        return str(caller())


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False
) -> str:
    # transformers overrides jinja's tojson, which would HTML-escape characters.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def compile_chat_template(source: str) -> jinja2.Template:
    """The environment of transformers 5.24 `_cached_compile_jinja_template` (minus assistant-mask tracking)."""
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    env.globals["dict"] = dict
    env.globals["namespace"] = jinja2.utils.Namespace
    return env.from_string(source)


def _token_text(value: Any) -> str | None:
    # tokenizer_config stores special tokens as a string or as a serialised AddedToken {"content": ...}.
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


class PromptTokenizer:
    """Chat template + BPE tokenizer of a model repository's `tokenizer/` folder."""

    def __init__(self, tokenizer: Tokenizer, config: dict[str, Any], template_source: str, where: Path) -> None:
        self._tokenizer = tokenizer
        # Encode exactly what we ask for: padding/truncation are applied below, as transformers does.
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()
        self._template = compile_chat_template(template_source)
        self._special_tokens = {k: t for k in _SPECIAL_TOKEN_KEYS if (t := _token_text(config.get(k))) is not None}
        pad_token = self._special_tokens.get("pad_token")
        if pad_token is None:
            raise ModelRepoError(
                f"{where / TOKENIZER_CONFIG} has no `pad_token`; klein pads prompts with <|endoftext|>."
            )
        pad_id = tokenizer.token_to_id(pad_token)
        if pad_id is None:
            raise ModelRepoError(f"The pad token {pad_token!r} of {where / TOKENIZER_CONFIG} is not in tokenizer.json.")
        self.pad_token_id = int(pad_id)
        self.padding_side = config.get("padding_side", "right")
        self.truncation_side = config.get("truncation_side", "right")
        for key, value in (("padding_side", self.padding_side), ("truncation_side", self.truncation_side)):
            if value not in ("left", "right"):
                raise ModelRepoError(f"{where / TOKENIZER_CONFIG}: `{key}` must be 'left' or 'right', got {value!r}.")

    def apply_chat_template(self, prompt: str) -> str:
        """The templated text for one user turn, generation prompt added, thinking disabled."""
        # Like transformers: special tokens first, explicit arguments override them.
        variables = {
            **self._special_tokens,
            "messages": [{"role": "user", "content": prompt}],
            "tools": None,
            "documents": None,
            "add_generation_prompt": True,
            "enable_thinking": False,
        }
        try:
            return self._template.render(**variables)
        except jinja2.exceptions.TemplateError as exc:
            raise ModelRepoError(f"The tokenizer's chat template failed to render the prompt: {exc}") from exc

    def encode(self, prompt: str, *, max_length: int = MAX_SEQUENCE_LENGTH) -> PromptTokens:
        """Template, tokenize, truncate to `max_length` and pad to exactly `max_length` tokens."""
        if not isinstance(prompt, str):
            raise InputError(f"`prompt` must be a string, got {type(prompt).__name__}.")
        if max_length < 1:
            raise InputError(f"`max_length` must be at least 1, got {max_length}.")
        text = self.apply_chat_template(prompt)
        # The Qwen2 post-processor adds no BOS/EOS, so the ids are those the template spells out.
        ids = self._tokenizer.encode(text, add_special_tokens=True).ids
        dropped = max(0, len(ids) - max_length)
        if dropped:
            ids = ids[:max_length] if self.truncation_side == "right" else ids[dropped:]
        pad = [self.pad_token_id] * (max_length - len(ids))
        mask = [1] * len(ids)
        if self.padding_side == "right":
            ids, mask = ids + pad, mask + [0] * len(pad)
        else:
            ids, mask = pad + ids, [0] * len(pad) + mask
        return PromptTokens(
            input_ids=np.array([ids], dtype=np.int64),
            attention_mask=np.array([mask], dtype=np.int64),
            text=text,
            token_count=len(ids) - len(pad),
            dropped=dropped,
        )


def _chat_template_source(model_dir: Path, config: dict[str, Any]) -> str:
    # transformers prefers a standalone chat_template.jinja over the config's `chat_template` entry.
    standalone = model_dir / CHAT_TEMPLATE_FILE
    if standalone.is_file():
        return standalone.read_text(encoding="utf-8")
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: [{"name": "default", "template": ...}, ...]
        named = {entry.get("name"): entry.get("template") for entry in template if isinstance(entry, dict)}
        template = named.get("default")
    if not isinstance(template, str):
        raise ModelRepoError(
            f"No chat template in {model_dir / 'tokenizer'}: add `chat_template` to tokenizer_config.json or a "
            "chat_template.jinja file (copy them from the original FLUX.2-klein-4B repository)."
        )
    return template


def load_tokenizer(model_dir: Path) -> PromptTokenizer:
    """Read `model_dir/tokenizer/` (tokenizer.json, tokenizer_config.json, optional chat_template.jinja)."""
    model_dir = Path(model_dir)
    for rel in (TOKENIZER_JSON, TOKENIZER_CONFIG):
        if not (model_dir / rel).is_file():
            raise ModelRepoError(
                f"Tokenizer file {model_dir / rel} is missing. Run `klein-web fetch` to complete the folder."
            )
    try:
        config = json.loads((model_dir / TOKENIZER_CONFIG).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelRepoError(f"{model_dir / TOKENIZER_CONFIG} is not readable JSON ({exc}).") from exc
    try:
        tokenizer = Tokenizer.from_file(str(model_dir / TOKENIZER_JSON))
    except Exception as exc:  # tokenizers raises a bare Exception on malformed files
        raise ModelRepoError(f"{model_dir / TOKENIZER_JSON} cannot be loaded by `tokenizers` ({exc}).") from exc
    return PromptTokenizer(tokenizer, config, _chat_template_source(model_dir, config), model_dir)
