"""manifest.json against its schema (builder/repo/manifest_schema.json), here and in the app.

Every case of tests/manifest_corpus.json is judged by the loader (one ModelRepoError naming the field), by `serve
--models` start-up (a clean message, no traceback) and by `regress` (exit 2, could not run); tests/js/
test_store_manifest.mjs runs the same corpus through the app's loader. Then both loaders judge the corpus and random
mutations of it side by side (tests/js/manifest_corpus.mjs): the same verdict, the same sentence, the same
manifest read.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import random
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from builder import REPO_ROOT
from builder.cli import main
from builder.errors import ModelRepoError
from builder.node import find_node
from builder.repo import manifest

CORPUS: dict[str, Any] = json.loads((REPO_ROOT / "tests" / "manifest_corpus.json").read_text(encoding="utf-8"))
VERDICTS_SCRIPT = REPO_ROOT / "tests" / "js" / "manifest_corpus.mjs"
SHA = "ab" * 32


def changed(change: list[dict[str, Any]]) -> Any:
    """The corpus's valid manifest with `change` applied: set (a value, or one given as JSON text), delete, rename."""
    data: Any = copy.deepcopy(CORPUS["valid"])
    for op in change:
        kind = next(k for k in ("set", "delete", "rename") if k in op)
        path = op[kind]
        value = json.loads(op["json"]) if "json" in op else copy.deepcopy(op.get("to"))
        if kind == "set" and not path:
            data = value
            continue
        target = data
        for key in path[:-1]:
            target = target[key]
        last = path[-1]
        if kind == "set" and isinstance(target, list) and last == len(target):
            target.append(value)
        elif kind == "set":
            target[last] = value
        elif kind == "delete":
            del target[last]
        else:
            target[value] = target.pop(last)
    return data


def case_bytes(case: dict[str, Any]) -> bytes:
    if "text" in case:
        return str(case["text"]).encode("utf-8")
    return json.dumps(changed(case["change"]), ensure_ascii=False).encode("utf-8")


# name -> the bytes of manifest.json and text its error must contain. Reading bytes is Python's own part: the app
# reads the manifest through fetch's response.json().
BAD: dict[str, tuple[bytes, str]] = {
    **{case["name"]: (case_bytes(case), case["error"]) for case in CORPUS["bad"]},
    "non-utf8": (b'{"format": "\xff\xfe"}', "JSON"),
    "deep-nesting": (b"[" * 100000 + b"]" * 100000, "JSON"),
    "oversized": (b" " * (manifest.MAX_MANIFEST_BYTES + 1), "more than a manifest ever needs"),
}
GOOD = {case["name"]: changed(case["change"]) for case in CORPUS["good"]}


def write_folder(root: Path, name: str) -> Path:
    folder = root / name
    folder.mkdir()
    (folder / manifest.MANIFEST_NAME).write_bytes(BAD[name][0])
    return folder


def load(tmp_path: Path, data: Any) -> manifest.Manifest:
    (tmp_path / manifest.MANIFEST_NAME).write_bytes(json.dumps(data).encode())
    return manifest.load(tmp_path)


def test_the_corpus_is_the_schema_as_written() -> None:
    """The corpus's valid manifest is what `to_bytes` writes for a seed-layout repository, field for field."""
    valid = CORPUS["valid"]
    assert json.loads(manifest.to_bytes(manifest.parse(json.dumps(valid).encode(), "corpus"))) == valid
    assert len(CORPUS["bad"]) >= 100 and len(GOOD) >= 13


def test_every_good_case_loads(tmp_path: Path) -> None:
    for name, data in GOOD.items():
        folder = tmp_path / name
        folder.mkdir()
        load(folder, data)
    loaded = load(tmp_path, GOOD["as-written"])
    assert loaded.graph("transformer", "q4").external_data == ["transformer_q4.onnx_data", "transformer_q4.onnx_data_1"]


def test_loras_round_trip_and_are_left_out_when_there_are_none(tmp_path: Path) -> None:
    assert "loras" not in CORPUS["valid"]  # a repo without LoRAs has the manifest it had before the field existed
    loaded = load(tmp_path, GOOD["with-loras"])
    assert loaded.loras == [
        manifest.LoraEntry("style.safetensors", SHA, 0.8),
        manifest.LoraEntry("b:c.safetensors", SHA, -2.0),
    ]
    assert json.loads(manifest.to_bytes(loaded))["loras"] == GOOD["with-loras"]["loras"]


def test_pipeline_round_trips_and_is_left_out_for_distilled_klein(tmp_path: Path) -> None:
    assert "pipeline" not in CORPUS["valid"]  # distilled klein's manifest keeps the layout older readers know
    assert manifest.PipelineDefaults(True, 4, None, None) == manifest.DISTILLED
    assert load(tmp_path, CORPUS["valid"]).pipeline == manifest.DISTILLED
    loaded = load(tmp_path, GOOD["base-model"])
    assert loaded.pipeline == manifest.PipelineDefaults(False, 50, 4.0, 8.0)
    assert json.loads(manifest.to_bytes(loaded)) == GOOD["base-model"]
    written_out = load(tmp_path, GOOD["distilled-pipeline-written-out"])
    assert written_out.pipeline == manifest.DISTILLED and "pipeline" not in json.loads(manifest.to_bytes(written_out))
    whole = load(tmp_path, GOOD["pipeline-whole-floats"]).pipeline
    assert type(whole.steps) is int and type(whole.guidance_scale) is float


def test_block_hashes_round_trip_and_are_left_out_when_there_are_none(tmp_path: Path) -> None:
    data = GOOD["with-blocks"]
    loaded = load(tmp_path, data)
    assert loaded.files["tokenizer/tokenizer.json"].blocks == manifest.Blocks(size=1 << 20, sha256=(SHA,))
    assert loaded.files["scheduler/scheduler_config.json"].blocks == manifest.Blocks(size=1 << 20, sha256=())
    assert loaded.files["tokenizer/tokenizer_config.json"].blocks is None
    assert json.loads(manifest.to_bytes(loaded)) == data


def test_whole_floats_are_read_as_integers(tmp_path: Path) -> None:
    loaded = load(tmp_path, GOOD["whole-floats"])
    assert type(loaded.files["tokenizer/tokenizer.json"].size) is int and loaded.graphs[1].attention_query_blocks == 4


def test_left_out_graph_fields_take_the_schemas_defaults(tmp_path: Path) -> None:
    graph = load(tmp_path, GOOD["optional-graph-fields-left-out"]).graphs[0]
    fields = manifest.SCHEMA["$defs"]["graph"]["properties"]
    assert set(manifest.OPTIONAL_GRAPH_FIELDS) == {
        "requires_f16",
        "cpu_nodes_without_f16",
        "attention_query_blocks",
        "attention_max_tokens",
        "attention_heads",
        "largest_weight_bytes",
    }
    for key in manifest.OPTIONAL_GRAPH_FIELDS:
        assert getattr(graph, key) == fields[key]["default"], key
        # GraphEntry(...) made in Python without the field means the same as a manifest without it.
        declared = next(f for f in dataclasses.fields(manifest.GraphEntry) if f.name == key)
        default = (
            declared.default_factory() if declared.default_factory is not dataclasses.MISSING else declared.default
        )
        assert default == fields[key]["default"], key


def test_the_names_come_from_the_schema() -> None:
    assert manifest.FORMAT == "klein-web-model-repo" and manifest.FORMAT_VERSION == 1
    assert manifest.COMPONENTS == ("text_encoder", "transformer", "vae_decoder")
    assert manifest.OPTIONAL_COMPONENTS == ("vae_encoder",)
    assert manifest.VARIANTS == ("q4", "q4f16", "fp32", "fp16")
    assert manifest.TOKENIZER_FILES == ("tokenizer/tokenizer.json", "tokenizer/tokenizer_config.json")


@pytest.mark.parametrize("name", sorted(BAD))
def test_loader_refuses_with_one_clear_error(tmp_path: Path, name: str) -> None:
    folder = write_folder(tmp_path, name)
    with pytest.raises(ModelRepoError) as caught:
        manifest.load(folder)
    message = str(caught.value)
    assert BAD[name][1] in message, message
    assert str(folder / manifest.MANIFEST_NAME) in message


@pytest.mark.parametrize("name", sorted(BAD))
def test_serve_and_regress_refuse_without_a_traceback(tmp_path: Path, name: str) -> None:
    folder = write_folder(tmp_path, name)
    runner = CliRunner()
    served = runner.invoke(main, ["serve", "--models", str(folder), "--dist", str(tmp_path / "dist"), "--port", "0"])
    assert served.exit_code == 1 and isinstance(served.exception, SystemExit), served.output
    assert "Error:" in served.output and "manifest.json" in served.output and "Traceback" not in served.output
    regressed = runner.invoke(
        main,
        [
            "regress",
            "--models",
            str(folder),
            "--prompt",
            "a fox",
            "--reference-from-cpu",
            "--report",
            str(tmp_path / "report"),
        ],
    )
    assert regressed.exit_code == 2 and isinstance(regressed.exception, SystemExit), regressed.output
    assert "could not run:" in regressed.output and "manifest.json" in regressed.output


# ------------------------------------------------------------------------------------------ the app's twin

# Values the random mutations put anywhere: every JSON type, values at and past the schema's bounds, names the
# schema knows, unsafe paths.
POOL: list[Any] = [
    None,
    True,
    False,
    0,
    1,
    -1,
    1.5,
    1 << 20,
    2**31,
    2**40 + 1,
    1e300,
    "",
    "x",
    "q4",
    "fp16",
    "vae_encoder",
    "transformer",
    "tokenizer/tokenizer.json",
    "text_encoder/a.onnx",
    "../x",
    "/abs",
    "a\\b",
    "a//b",
    SHA,
    "AB" * 32,
    [],
    ["x"],
    [1, "x"],
    [SHA, SHA],
    {},
    {"size": 1},
    {"size": 1, "sha256": SHA},
    {"size": 1 << 20, "sha256": [SHA]},
    1000,
    1001,
    0.999,
    {"is_distilled": False, "steps": 50, "guidance_scale": 4.0, "inpaint_guidance_scale": None},
]


def places(value: Any) -> list[tuple[Any, Any]]:
    """Every (container, key) inside `value`."""
    found: list[tuple[Any, Any]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            found += [(value, key), *places(item)]
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += [(value, index), *places(item)]
    return found


def mutated(rng: random.Random) -> Any:
    """The valid manifest with one to three random changes: a value replaced (by a pool value or a copy of another
    part of the manifest), a field or entry removed or added, a key renamed."""
    data = copy.deepcopy(rng.choice([CORPUS["valid"], GOOD["base-model"]]))
    for _ in range(rng.randint(1, 3)):
        spots = places(data)
        container, key = rng.choice(spots)
        action = rng.choice(("replace", "replace", "replace", "remove", "add", "rename"))
        if action == "replace":
            other = rng.choice(spots)
            container[key] = copy.deepcopy(rng.choice([*POOL, other[0][other[1]]]))
        elif action == "remove":
            del container[key]
        elif action == "add" and isinstance(container, list):
            container.append(copy.deepcopy(rng.choice([*POOL, *container])))
        elif action == "add":
            name = rng.choice(["extra", "blocks", "loras", "pipeline", "attention_heads", "sha256", "steps", "a/b"])
            container[name] = rng.choice(POOL)
        elif isinstance(container, dict):
            container[rng.choice(["x", "size", "../y", "files", "transformer/transformer_q4.onnx"])] = container.pop(
                key
            )
    return data


# A graph's fields in a verdict, in the order tests/js/manifest_corpus.mjs lists their camel-cased names.
GRAPH_FIELDS = (
    "component",
    "variant",
    "path",
    "external_data",
    "precision",
    "requires_f16",
    "cpu_nodes_without_f16",
    "attention_query_blocks",
    "attention_max_tokens",
    "attention_heads",
)


def verdict(read: manifest.Manifest | ModelRepoError) -> Any:
    """A loader's verdict on one manifest: the problem's sentence (the field and what is wrong there, or the newer
    format version), or the manifest as read (the same fields in both languages)."""
    if isinstance(read, ModelRepoError):
        message = str(read)
        if " is malformed: " in message:
            return {"error": message.split(" is malformed: ", 1)[1].rsplit(". Re-create it", 1)[0]}
        if " is not readable JSON " in message:
            return {"error": "not JSON"}
        return {"error": "newer: " + message.split(" is format version ", 1)[1].split(";")[0]}
    return {
        "source": read.source,
        "files": {
            rel: [f.size, f.sha256, f.blocks and [f.blocks.size, list(f.blocks.sha256)]]
            for rel, f in read.files.items()
        },
        "graphs": [[getattr(g, name) for name in GRAPH_FIELDS] for g in read.graphs],
        "loras": [[lora.file, lora.sha256, lora.scale] for lora in read.loras],
        "pipeline": [
            read.pipeline.is_distilled,
            read.pipeline.steps,
            read.pipeline.guidance_scale,
            read.pipeline.inpaint_guidance_scale,
        ],
    }


def python_verdict(text: bytes) -> Any:
    try:
        return verdict(manifest.parse(text, "manifest.json"))
    except ModelRepoError as exc:
        return verdict(exc)


def test_python_and_the_app_judge_every_manifest_alike(tmp_path: Path) -> None:
    """The corpus (each side applies its changes itself) and 400 random mutations of its valid manifest (as text)."""
    rng = random.Random(20261207)
    texts = [json.dumps(mutated(rng), ensure_ascii=False) for _ in range(400)]
    cases = tmp_path / "mutations.json"
    cases.write_text(json.dumps(texts, ensure_ascii=False), encoding="utf-8")
    result = subprocess.run(
        [str(find_node().node), str(VERDICTS_SCRIPT), str(cases)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    app = json.loads(result.stdout)
    names = [case["name"] for case in CORPUS["bad"] + CORPUS["good"]] + [f"mutation {i}" for i in range(len(texts))]
    inputs = [case_bytes(case) for case in CORPUS["bad"] + CORPUS["good"]] + [t.encode("utf-8") for t in texts]
    python = [python_verdict(text) for text in inputs]
    assert [v for v in python[: len(CORPUS["bad"])] if "error" not in v] == []
    refused = sum("error" in v for v in python[-len(texts) :])
    assert 100 < refused < len(texts) - 20, f"{refused} of {len(texts)} mutations refused: they test too little"
    differ = [(name, ours, theirs) for name, ours, theirs in zip(names, python, app, strict=True) if ours != theirs]
    assert not differ, f"{len(differ)} manifests judged differently; the first: {differ[0]}"
