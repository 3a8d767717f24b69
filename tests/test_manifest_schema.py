"""manifest.json fuzzing: every malformed manifest is one ModelRepoError naming the field, from the loader, from
`serve --models` start-up (a clean message, no traceback) and from `regress` (exit 2, could not run)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from builder.cli import main
from builder.errors import ModelRepoError
from builder.repo import manifest, seed_layout

SHA = "ab" * 32


def valid() -> dict[str, Any]:
    """A well-formed manifest of the seed layout (the files themselves need not exist for the schema check)."""
    graphs = seed_layout.seed_graphs()
    rels = sorted({rel for g in graphs for rel in g.files()} | {*manifest.TOKENIZER_FILES, manifest.SCHEDULER_CONFIG})
    repo = manifest.Manifest(
        source="test",
        converter="test",
        graphs=graphs,
        files={rel: manifest.FileEntry(size=10, sha256=SHA) for rel in rels},
    )
    data: dict[str, Any] = json.loads(manifest.to_bytes(repo))
    return data


def mutate(change: Callable[[dict[str, Any]], object]) -> bytes:
    data = copy.deepcopy(valid())
    change(data)
    return json.dumps(data).encode("utf-8")


def graph0(key: str, value: object) -> Callable[[dict[str, Any]], None]:
    return lambda d: d["graphs"][0].__setitem__(key, value)


def file_entry(key: str, value: object) -> Callable[[dict[str, Any]], None]:
    return lambda d: d["files"]["tokenizer/tokenizer.json"].__setitem__(key, value)


def rename_file(new: str) -> Callable[[dict[str, Any]], None]:
    def change(d: dict[str, Any]) -> None:
        d["files"][new] = d["files"].pop("scheduler/scheduler_config.json")

    return change


def drop(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda d: d.pop(key)


LORA = {"file": "style.safetensors", "sha256": SHA, "scale": 0.8}
# One block of 1 MiB: every file of valid() has 10 bytes.
BLOCKS = {"size": 1 << 20, "sha256": [SHA]}


def lora(key: str, value: object) -> Callable[[dict[str, Any]], None]:
    return lambda d: d.__setitem__("loras", [{**LORA, key: value}])


def tensor(key: str, value: object) -> Callable[[dict[str, Any]], None]:
    return lambda d: d["graphs"][1]["inputs"][0].__setitem__(key, value)


# name -> the bytes of manifest.json and a word the error must contain (the field, or what is wrong).
BAD: dict[str, tuple[bytes, str]] = {
    "invalid-json": (b'{"format": ', "JSON"),
    "non-utf8": (b'{"format": "\xff\xfe"}', "JSON"),
    "empty-file": (b"", "JSON"),
    "json-list": (b"[]", "top level"),
    "json-string": (b'"manifest"', "top level"),
    "json-null": (b"null", "top level"),
    "json-number": (b"42", "top level"),
    "deep-nesting": (b"[" * 100000 + b"]" * 100000, "JSON"),
    "wrong-format": (mutate(lambda d: d.__setitem__("format", "other")), "format"),
    "format-missing": (mutate(drop("format")), "format"),
    "version-string": (mutate(lambda d: d.__setitem__("format_version", "1")), "format_version"),
    "version-bool": (mutate(lambda d: d.__setitem__("format_version", True)), "format_version"),
    "version-zero": (mutate(lambda d: d.__setitem__("format_version", 0)), "format_version"),
    "version-future": (mutate(lambda d: d.__setitem__("format_version", 99)), "version 99"),
    "version-float": (mutate(lambda d: d.__setitem__("format_version", 1.5)), "format_version"),
    "unknown-top-key": (mutate(lambda d: d.__setitem__("evil", 1)), "evil"),
    "source-missing": (mutate(drop("source")), "source"),
    "source-number": (mutate(lambda d: d.__setitem__("source", 3)), "source"),
    "converter-list": (mutate(lambda d: d.__setitem__("converter", [])), "converter"),
    "files-missing": (mutate(drop("files")), "files"),
    "files-list": (mutate(lambda d: d.__setitem__("files", [])), "files"),
    "files-empty": (mutate(lambda d: d.__setitem__("files", {})), "files"),
    "graphs-missing": (mutate(drop("graphs")), "graphs"),
    "graphs-dict": (mutate(lambda d: d.__setitem__("graphs", {})), "graphs"),
    "graphs-empty": (mutate(lambda d: d.__setitem__("graphs", [])), "graphs"),
    "graph-not-object": (mutate(lambda d: d["graphs"].__setitem__(0, "text_encoder")), "graphs[0]"),
    "graph-missing-path": (mutate(lambda d: d["graphs"][0].pop("path")), "path"),
    "graph-unknown-key": (mutate(graph0("evil", True)), "evil"),
    "component-evil": (mutate(graph0("component", "evil")), "component"),
    "component-number": (mutate(graph0("component", 1)), "component"),
    "variant-evil": (mutate(graph0("variant", "q8")), "variant"),
    "path-etc-passwd": (mutate(graph0("path", "/etc/passwd")), "path"),
    "path-dotdot": (mutate(graph0("path", "text_encoder/../../x.onnx")), "path"),
    "path-backslash": (mutate(graph0("path", "text_encoder\\x.onnx")), "path"),
    "path-nul": (mutate(graph0("path", "text_encoder/x\x00.onnx")), "path"),
    "path-not-onnx": (mutate(graph0("path", "text_encoder/text_encoder_q4.bin")), "path"),
    "path-other-folder": (mutate(graph0("path", "transformer/transformer_q4.onnx")), "path"),
    "path-number": (mutate(graph0("path", 7)), "path"),
    "external-data-string": (mutate(graph0("external_data", "text_encoder_q4.onnx_data")), "external_data"),
    "external-data-slash": (mutate(graph0("external_data", ["../x"])), "external_data"),
    "external-data-absolute": (mutate(graph0("external_data", ["/etc/shadow"])), "external_data"),
    "external-data-empty-name": (mutate(graph0("external_data", [""])), "external_data"),
    "graph-file-unlisted": (
        mutate(lambda d: d["files"].pop("transformer/transformer_q4.onnx_data_1")),
        "transformer_q4.onnx_data_1",
    ),
    "requires-f16-string": (mutate(graph0("requires_f16", "yes")), "requires_f16"),
    "query-blocks-zero": (mutate(graph0("attention_query_blocks", 0)), "attention_query_blocks"),
    "max-tokens-negative": (mutate(graph0("attention_max_tokens", -5)), "attention_max_tokens"),
    "heads-string": (mutate(graph0("attention_heads", "24")), "attention_heads"),
    "largest-weight-zero": (mutate(graph0("largest_weight_bytes", 0)), "largest_weight_bytes"),
    "largest-weight-huge": (mutate(graph0("largest_weight_bytes", 2**41)), "largest_weight_bytes"),
    "cpu-nodes-string": (mutate(graph0("cpu_nodes_without_f16", "x")), "cpu_nodes_without_f16"),
    "inputs-not-list": (mutate(graph0("inputs", {})), "inputs"),
    "tensor-extra-key": (mutate(tensor("evil", 1)), "inputs[0]"),
    "tensor-shape-string": (mutate(tensor("shape", "1,2")), "shape"),
    "tensor-shape-negative": (mutate(tensor("shape", [-1, 4])), "shape"),
    "no-vae-graph": (mutate(lambda d: d.__setitem__("graphs", d["graphs"][:2])), "vae_decoder"),
    "size-string": (mutate(file_entry("size", "big")), "size"),
    "size-negative": (mutate(file_entry("size", -1)), "size"),
    "size-huge": (mutate(file_entry("size", 10**30)), "size"),
    "size-float": (mutate(file_entry("size", 1.5)), "size"),
    "size-missing": (mutate(lambda d: d["files"]["tokenizer/tokenizer.json"].pop("size")), "tokenizer.json"),
    "sha-short": (mutate(file_entry("sha256", "abc")), "sha256"),
    "sha-upper": (mutate(file_entry("sha256", "AB" * 32)), "sha256"),
    "sha-not-hex": (mutate(file_entry("sha256", "zz" * 32)), "sha256"),
    "sha-number": (mutate(file_entry("sha256", 0)), "sha256"),
    "file-entry-list": (mutate(lambda d: d["files"].__setitem__("tokenizer/tokenizer.json", [1, 2])), "tokenizer.json"),
    "file-unknown-key": (mutate(file_entry("mode", 0o777)), "tokenizer.json"),
    "file-key-absolute": (mutate(rename_file("/etc/passwd")), "/etc/passwd"),
    "file-key-dotdot": (mutate(rename_file("scheduler/../../x")), "files key"),
    "file-key-backslash": (mutate(rename_file("scheduler\\x")), "files key"),
    "file-key-empty-segment": (mutate(rename_file("scheduler//x")), "files key"),
    "file-key-nul": (mutate(rename_file("scheduler/x\x00")), "files key"),
    "tokenizer-unlisted": (mutate(lambda d: d["files"].pop("tokenizer/tokenizer.json")), "tokenizer.json"),
    "blocks-list": (mutate(file_entry("blocks", [SHA])), "blocks"),
    "blocks-size-small": (mutate(file_entry("blocks", {"size": 1024, "sha256": [SHA]})), "blocks.size"),
    "blocks-size-string": (mutate(file_entry("blocks", {"size": "16M", "sha256": [SHA]})), "blocks.size"),
    "blocks-count": (mutate(file_entry("blocks", {"size": 1 << 20, "sha256": [SHA, SHA]})), "blocks.sha256"),
    "blocks-sha-short": (mutate(file_entry("blocks", {"size": 1 << 20, "sha256": ["ab"]})), "blocks.sha256"),
    "blocks-extra-key": (mutate(file_entry("blocks", {"size": 1 << 20, "sha256": [SHA], "x": 1})), "blocks"),
    "blocks-without-sha": (
        mutate(lambda d: d["files"]["tokenizer/tokenizer.json"].update(sha256=None, blocks=BLOCKS)),
        "needs the file's sha256",
    ),
    "loras-object": (mutate(lambda d: d.__setitem__("loras", LORA)), "loras"),
    "loras-null": (mutate(lambda d: d.__setitem__("loras", None)), "loras"),
    "lora-string": (mutate(lambda d: d.__setitem__("loras", ["style.safetensors"])), "loras[0]"),
    "lora-extra-key": (mutate(lora("evil", 1)), "loras[0]"),
    "lora-missing-scale": (mutate(lambda d: d.__setitem__("loras", [{"file": "a", "sha256": SHA}])), "loras[0]"),
    "lora-file-path": (mutate(lora("file", "../a.safetensors")), "loras[0].file"),
    "lora-file-empty": (mutate(lora("file", "")), "loras[0].file"),
    "lora-file-number": (mutate(lora("file", 3)), "loras[0].file"),
    "lora-sha-short": (mutate(lora("sha256", "ab")), "loras[0].sha256"),
    "lora-scale-string": (mutate(lora("scale", "1")), "loras[0].scale"),
    "lora-scale-bool": (mutate(lora("scale", True)), "loras[0].scale"),
    "lora-scale-huge": (
        b'{"loras": [{"file": "a", "sha256": "' + SHA.encode() + b'", "scale": 1e999}], ' + mutate(lambda _d: None)[1:],
        "loras[0].scale",
    ),
}


def write_folder(root: Path, name: str) -> Path:
    folder = root / name
    folder.mkdir()
    (folder / manifest.MANIFEST_NAME).write_bytes(BAD[name][0])
    return folder


def test_the_valid_manifest_loads(tmp_path: Path) -> None:
    (tmp_path / manifest.MANIFEST_NAME).write_bytes(json.dumps(valid()).encode())
    assert manifest.load(tmp_path).graph("transformer", "q4").external_data == [
        "transformer_q4.onnx_data",
        "transformer_q4.onnx_data_1",
    ]
    assert len(BAD) >= 58


def test_loras_round_trip_and_are_left_out_when_there_are_none(tmp_path: Path) -> None:
    data = valid()
    assert "loras" not in data  # a repo without LoRAs has the manifest it had before the field existed
    data["loras"] = [LORA, {**LORA, "file": "b:c.safetensors", "scale": -2}]
    (tmp_path / manifest.MANIFEST_NAME).write_bytes(json.dumps(data).encode())
    loaded = manifest.load(tmp_path)
    assert loaded.loras == [
        manifest.LoraEntry("style.safetensors", SHA, 0.8),
        manifest.LoraEntry("b:c.safetensors", SHA, -2.0),
    ]
    assert json.loads(manifest.to_bytes(loaded))["loras"] == [LORA, {**LORA, "file": "b:c.safetensors", "scale": -2.0}]


def test_block_hashes_round_trip_and_are_left_out_when_there_are_none(tmp_path: Path) -> None:
    data = valid()
    assert all("blocks" not in entry for entry in data["files"].values())
    data["files"]["tokenizer/tokenizer.json"]["blocks"] = BLOCKS
    data["files"]["scheduler/scheduler_config.json"].update(size=0, blocks={"size": 1 << 20, "sha256": []})
    (tmp_path / manifest.MANIFEST_NAME).write_bytes(json.dumps(data).encode())
    loaded = manifest.load(tmp_path)
    assert loaded.files["tokenizer/tokenizer.json"].blocks == manifest.Blocks(size=1 << 20, sha256=(SHA,))
    assert loaded.files["scheduler/scheduler_config.json"].blocks == manifest.Blocks(size=1 << 20, sha256=())
    assert loaded.files["tokenizer/tokenizer_config.json"].blocks is None
    assert json.loads(manifest.to_bytes(loaded)) == data


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
