"""sha256 of every model file a command uses, checked against the manifest through a stamp-keyed cache."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from builder.errors import ModelRepoError
from builder.pipeline import capacity, reference
from builder.repo import manifest, verify


@pytest.fixture
def repo(tiny_models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KLEIN_WEB_CACHE_DIR", str(tmp_path / "cache"))
    dest = tmp_path / "q4"
    shutil.copytree(tiny_models["q4"], dest)
    return dest


def zero_bytes(path: Path, offset: int = 100, count: int = 10) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        handle.write(b"\xff" * count if handle.read(1) == b"\0" else b"\0" * count)


def test_ten_changed_bytes_are_refused_naming_both_hashes(repo: Path) -> None:
    data = repo / "transformer" / "transformer_q4.onnx_data"
    verify.check_files(repo, manifest.load(repo), log=lambda _m: None)  # fills the cache first
    expected = manifest.load(repo).files["transformer/transformer_q4.onnx_data"].sha256
    assert expected is not None
    zero_bytes(data)
    actual = hashlib.sha256(data.read_bytes()).hexdigest()
    with pytest.raises(ModelRepoError) as caught:
        reference.generate(repo, prompt="a fox", seed=1, width=64, height=64, steps=1, log=lambda _m: None)
    message = str(caught.value)
    assert str(data) in message and expected in message and actual in message
    assert "klein-web fetch" in message and "convert" in message


def test_a_manifest_with_zero_hashes_is_refused(repo: Path) -> None:
    data = json.loads((repo / manifest.MANIFEST_NAME).read_text())
    for entry in data["files"].values():
        entry["sha256"] = "0" * 64
    (repo / manifest.MANIFEST_NAME).write_text(json.dumps(data))
    with pytest.raises(ModelRepoError, match="fails its sha256 check"):
        reference.generate(repo, prompt="a fox", seed=1, width=64, height=64, steps=1, log=lambda _m: None)


def test_repeat_checks_hash_nothing_and_a_corrupt_cache_is_ignored(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hashed: list[Path] = []
    real = verify.file_digests

    def counted(path: Path, progress: Any = None) -> verify.Digests:
        hashed.append(path)
        return real(path, progress)

    monkeypatch.setattr(verify, "file_digests", counted)
    repo_manifest = manifest.load(repo)
    verify.check_files(repo, repo_manifest, log=lambda _m: None)
    assert len(hashed) == len(repo_manifest.files)
    hashed.clear()
    verify.check_files(repo, repo_manifest, log=lambda _m: None)
    assert hashed == []
    for garbage in (b"\xff\xfe not json", b"[]", b'{"version": 1, "files": {"x": {"sha256": 5}}}'):
        verify.cache_path().write_bytes(garbage)
        verify.check_files(repo, repo_manifest, log=lambda _m: None)
        assert len(hashed) == len(repo_manifest.files)
        hashed.clear()
    assert json.loads(verify.cache_path().read_text())["version"] == verify.CACHE_VERSION


def test_hashing_reports_bytes_and_eta(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verify, "PROGRESS_MIN_BYTES", 0)
    monkeypatch.setattr(verify, "PROGRESS_EVERY_S", 0.0)
    lines: list[str] = []
    verify.check_files(repo, manifest.load(repo), log=lines.append)
    assert any(line.startswith("sha256: checking") for line in lines)
    assert any("GB" in line and "ETA" in line for line in lines)


def test_sizes_beyond_the_graph_or_the_memory_are_refused_before_any_work(repo: Path) -> None:
    graph = manifest.load(repo).graph("transformer", "q4")
    limited = type(graph)(**{**graph.__dict__, "attention_max_tokens": 1024 + 512})
    capacity.check_size(limited, 512, 512, available=1 << 40)
    with pytest.raises(Exception, match=r"built for at most 1536; try 512x512"):
        capacity.check_size(limited, 768, 768, available=1 << 40)
    with pytest.raises(Exception, match=r"GiB of memory is available; try \d+x\d+"):
        capacity.check_size(graph, 2048, 2048, available=2 << 30)
    assert capacity.estimate_bytes(graph, 2048, 2048) > 16 * 2**30  # the VAE's attention over 256x256 pixels


def test_file_digests_hash_the_whole_file_and_each_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KLEIN_WEB_CACHE_DIR", str(tmp_path / "cache"))
    block = manifest.BLOCK_SIZE
    data = bytes(range(256)) * ((2 * block + 5) // 256) + b"tail!"[: (2 * block + 5) % 256]
    assert len(data) == 2 * block + 5
    path = tmp_path / "weights.onnx_data"
    path.write_bytes(data)
    digests = verify.file_digests(path)
    assert digests.sha256 == hashlib.sha256(data).hexdigest()
    assert digests.blocks == manifest.Blocks(
        size=block, sha256=tuple(hashlib.sha256(data[at : at + block]).hexdigest() for at in range(0, len(data), block))
    )
    assert len(digests.blocks.sha256) == 3
    # Fed in pieces that straddle the blocks' edges (as a download arrives), the stream gives the same digests.
    stream = verify.DigestStream()
    for at in range(0, len(data), 1_000_003):
        stream.update(data[at : at + 1_000_003])
    assert stream.digests() == digests
    (tmp_path / "empty").write_bytes(b"")
    assert verify.file_digests(tmp_path / "empty").blocks.sha256 == ()
    # What a manifest gets, computed once and then from the cache.
    written = manifest.FileEntry(size=len(data), sha256=digests.sha256, blocks=digests.blocks)
    assert verify.describe_files(tmp_path, ["weights.onnx_data"])["weights.onnx_data"] == written
    assert verify.HashCache().get(path) == digests
