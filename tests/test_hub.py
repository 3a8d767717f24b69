"""`klein-web fetch` against a fake Hub on loopback (tests/fakehub.py), run as the real CLI in a subprocess.

huggingface_hub reads HF_ENDPOINT when it is imported, so every fetch runs in a fresh `python -m builder`
process pointed at the fake hub.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fakehub import FakeHub, FakeRepo, serving

from builder import REPO_ROOT
from builder.errors import ModelRepoError
from builder.repo import manifest, seed_layout, verify

COMMIT = "0123456789abcdef0123456789abcdef01234567"
REPO = "test/klein-seed"

# Test-only shim, loaded through PYTHONPATH by the fetch subprocess: reports a fake amount of free disk space.
SITECUSTOMIZE = """
import os, shutil
_free = os.environ.get("KLEIN_TEST_FREE_BYTES")
if _free is not None:
    _real_disk_usage = shutil.disk_usage
    def _fake_disk_usage(path):
        usage = _real_disk_usage(path)
        return type(usage)(usage.total, usage.used, int(_free))
    shutil.disk_usage = _fake_disk_usage
"""


def write_seed_like_repo(root: Path) -> Path:
    """A repo in the seed layout (no manifest.json) with random graph bytes and a few files the app never needs."""
    rng = np.random.default_rng(0)
    sizes = {
        "text_encoder/text_encoder_q4.onnx": 20_000,
        "text_encoder/text_encoder_q4.onnx_data": 700_000,
        "text_encoder/text_encoder_q4.onnx_data_1": 300_000,
        "transformer/transformer_q4.onnx": 30_000,
        "transformer/transformer_q4.onnx_data": 900_000,
        "transformer/transformer_q4.onnx_data_1": 123_457,
        "vae_decoder/vae_decoder_fp16.onnx": 10_000,
        "vae_decoder/vae_decoder_fp16.onnx_data": 200_001,
        "samples/onnx_q4_512.png": 50_000,
    }
    for rel, size in sizes.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
    texts = {
        "tokenizer/tokenizer.json": json.dumps({"model": {"type": "BPE"}, "added_tokens": []}),
        "tokenizer/tokenizer_config.json": json.dumps({"pad_token": "<|endoftext|>", "chat_template": "{{ x }}"}),
        "scheduler/scheduler_config.json": json.dumps({"use_dynamic_shifting": True}),
        "README.md": "# model card\n",
        "LICENSE": "Apache-2.0\n",
        "validation.md": "numbers\n",
    }
    for rel, text in texts.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


WANTED_SEED_FILES = sorted(
    [
        "text_encoder/text_encoder_q4.onnx",
        "text_encoder/text_encoder_q4.onnx_data",
        "text_encoder/text_encoder_q4.onnx_data_1",
        "transformer/transformer_q4.onnx",
        "transformer/transformer_q4.onnx_data",
        "transformer/transformer_q4.onnx_data_1",
        "vae_decoder/vae_decoder_fp16.onnx",
        "vae_decoder/vae_decoder_fp16.onnx_data",
        "tokenizer/tokenizer.json",
        "tokenizer/tokenizer_config.json",
        "scheduler/scheduler_config.json",
        "LICENSE",
    ]
)


@pytest.fixture(scope="module")
def seed_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_seed_like_repo(tmp_path_factory.mktemp("seed-repo"))


@pytest.fixture
def shim_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "shim"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return folder


def fetch_command(
    endpoint: str,
    dest: Path,
    *,
    repo: str = REPO,
    revision: str = "main",
    shim: Path | None = None,
    extra_env: dict[str, str] | None = None,
) -> tuple[list[str], dict[str, str]]:
    """`klein-web fetch` of `repo` into `dest` from the hub at `endpoint`, and its environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(
        {
            "HF_ENDPOINT": endpoint,
            "HF_HOME": str(dest.parent / "hf-home"),
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "PYTHONUNBUFFERED": "1",
            **(extra_env or {}),
        }
    )
    if shim is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(shim), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "builder", "fetch", "--repo", repo, "--revision", revision, "--dir", str(dest)]
    return cmd, env


def run_fetch(endpoint: str, dest: Path, **options: Any) -> subprocess.CompletedProcess[str]:
    cmd, env = fetch_command(endpoint, dest, **options)
    return subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)


def start_fetch(endpoint: str, dest: Path, **options: Any) -> subprocess.Popen[str]:
    """The fetch in the background, interruptible: a shell's background job (a CI runner started with `&`) ignores
    SIGINT, and children inherit that, so the fetch gets Python's Ctrl-C handling back before it starts."""
    cmd, env = fetch_command(endpoint, dest, **options)
    restore_ctrl_c = (
        "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "sys.argv[0] = 'builder'; runpy.run_module('builder', run_name='__main__', alter_sys=True)"
    )
    return subprocess.Popen(
        [sys.executable, "-c", restore_ctrl_c, *cmd[3:]],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def assert_same_files(source: Path, dest: Path, paths: list[str]) -> None:
    for rel in paths:
        assert (dest / rel).read_bytes() == (source / rel).read_bytes(), rel


def fetched_files(dest: Path) -> list[str]:
    return sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())


def test_fetch_seed_layout_repo(seed_repo: Path, tmp_path: Path) -> None:
    hub = FakeHub({REPO: FakeRepo(seed_repo, COMMIT)})
    dest = tmp_path / "models"
    with serving(hub) as endpoint:
        result = run_fetch(endpoint, dest)
    assert result.returncode == 0, result.stderr
    assert f"klein-web serve --models {dest}" in result.stdout
    assert "ETA" in result.stderr and "MB/s" in result.stderr  # progress with rate and ETA
    # Exactly what the app needs (no README, samples or validation notes), byte for byte, plus the manifest
    # and fetch's marker.
    assert fetched_files(dest) == sorted([*WANTED_SEED_FILES, "manifest.json", ".klein-web-fetch"])
    assert_same_files(seed_repo, dest, WANTED_SEED_FILES)
    fetched = manifest.load(dest)
    verify.check_files(dest, fetched, log=print)
    assert sorted(fetched.files) == WANTED_SEED_FILES
    # Each file's block hashes (the app checks downloads by them) are those of the bytes fetched.
    for rel, entry in fetched.files.items():
        assert entry.blocks == verify.file_digests(dest / rel).blocks, rel
    assert fetched.source == f"{REPO}@{COMMIT}"
    # The seed layout: graphs and I/O as builder.repo.manifest describes the seed repo.
    assert fetched.graphs == seed_layout.seed_graphs()

    # A second run finds everything in place and downloads nothing.
    hub.requests.clear()
    with serving(hub) as endpoint:
        again = run_fetch(endpoint, dest)
    assert again.returncode == 0, again.stderr
    assert [r for r in hub.requests if r[0] == "GET"] == []


def test_unknown_repo_is_named(seed_repo: Path, tmp_path: Path) -> None:
    with serving(FakeHub({REPO: FakeRepo(seed_repo, COMMIT)})) as endpoint:
        result = run_fetch(endpoint, tmp_path / "models", repo="nobody/no-such-model")
    assert result.returncode == 1
    assert "nobody/no-such-model" in result.stderr and "not found" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "models" / "manifest.json").exists()


def test_unknown_revision_is_named(seed_repo: Path, tmp_path: Path) -> None:
    with serving(FakeHub({REPO: FakeRepo(seed_repo, COMMIT)})) as endpoint:
        result = run_fetch(endpoint, tmp_path / "models", revision="v9.9")
    assert result.returncode == 1
    assert "'v9.9'" in result.stderr and "does not exist" in result.stderr
    assert "Traceback" not in result.stderr


def test_no_network_is_explained(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a free port: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = run_fetch(f"http://127.0.0.1:{port}", tmp_path / "models")
    assert result.returncode == 1
    assert "Cannot reach the Hub" in result.stderr and "Traceback" not in result.stderr


def test_too_little_disk_fails_before_downloading(seed_repo: Path, tmp_path: Path, shim_dir: Path) -> None:
    hub = FakeHub({REPO: FakeRepo(seed_repo, COMMIT)})
    dest = tmp_path / "models"
    with serving(hub) as endpoint:
        result = run_fetch(endpoint, dest, shim=shim_dir, extra_env={"KLEIN_TEST_FREE_BYTES": "1000000"})
    assert result.returncode == 1
    assert "Not enough disk space" in result.stderr and "0.00 GB is free" in result.stderr
    assert "--dir" in result.stderr
    assert [r for r in hub.requests if r[0] == "GET"] == []  # nothing was downloaded
    assert not (dest / "manifest.json").exists()


def test_dropped_connection_resumes_with_range(seed_repo: Path, tmp_path: Path) -> None:
    """The server cuts a file half-way once: the same run resumes it from the byte where it stopped."""
    name = "transformer/transformer_q4.onnx_data"
    hub = FakeHub({REPO: FakeRepo(seed_repo, COMMIT)}, cut={name: 1})
    dest = tmp_path / "models"
    with serving(hub) as endpoint:
        result = run_fetch(endpoint, dest)
    assert result.returncode == 0, result.stderr
    gets = [r for r in hub.requests if r[0] == "GET" and r[1] == name]
    size = (seed_repo / name).stat().st_size
    assert gets == [("GET", name, None), ("GET", name, f"bytes={size // 2}-")]
    assert_same_files(seed_repo, dest, WANTED_SEED_FILES)
    verify.check_files(dest, manifest.load(dest), log=print)


def test_failed_download_resumes_on_a_second_run(seed_repo: Path, tmp_path: Path) -> None:
    """Cuts beyond the in-run retries fail the run cleanly; the next run continues from the partial file."""
    from builder.repo.download import RETRIES

    name = "text_encoder/text_encoder_q4.onnx_data"
    hub = FakeHub({REPO: FakeRepo(seed_repo, COMMIT)}, cut={name: RETRIES + 1})
    dest = tmp_path / "models"
    with serving(hub) as endpoint:
        first = run_fetch(endpoint, dest)
        assert first.returncode == 1
        assert "Connection lost" in first.stderr and "resume" in first.stderr and "Traceback" not in first.stderr
        assert not (dest / "manifest.json").exists()
        partials = list((dest / ".fetch").rglob("*.incomplete"))
        assert len(partials) == 1 and 0 < partials[0].stat().st_size < (seed_repo / name).stat().st_size
        kept = partials[0].stat().st_size
        hub.requests.clear()
        second = run_fetch(endpoint, dest)
    assert second.returncode == 0, second.stderr
    assert ("GET", name, f"bytes={kept}-") in hub.requests
    assert not (dest / ".fetch").exists()
    assert_same_files(seed_repo, dest, WANTED_SEED_FILES)
    verify.check_files(dest, manifest.load(dest), log=print)


def test_ctrl_c_keeps_partial_files_and_no_manifest(seed_repo: Path, tmp_path: Path) -> None:
    name = "transformer/transformer_q4.onnx_data"
    # 1 s per 64 KiB: the download outlasts a loaded machine's polling, so the interrupt lands mid-file.
    hub = FakeHub({REPO: FakeRepo(seed_repo, COMMIT)}, slow={name: 1.0})
    dest = tmp_path / "models"
    with serving(hub) as endpoint:
        process = start_fetch(endpoint, dest)
        deadline = time.monotonic() + 60
        partial = None
        while time.monotonic() < deadline and partial is None:
            partial = (
                next(
                    (
                        p
                        for p in (dest / ".fetch" / "transformer").glob(Path(name).name + ".*.incomplete")
                        if p.stat().st_size > 0
                    ),
                    None,
                )
                if (dest / ".fetch" / "transformer").is_dir()
                else None
            )
            time.sleep(0.05)
        assert partial is not None, "the download of the large file never started"
        process.send_signal(signal.SIGINT)
        _out, err = process.communicate(timeout=30)
        assert process.returncode == 1, err
        assert "interrupted" in err and "resume" in err and "Traceback" not in err
        assert not (dest / "manifest.json").exists()
        kept = partial.stat().st_size
        assert 0 < kept < (seed_repo / name).stat().st_size

        hub.slow.clear()
        hub.requests.clear()
        second = run_fetch(endpoint, dest)
    assert second.returncode == 0, second.stderr
    assert ("GET", name, f"bytes={kept}-") in hub.requests
    assert_same_files(seed_repo, dest, WANTED_SEED_FILES)
    verify.check_files(dest, manifest.load(dest), log=print)


def test_fetch_tiny_q4_repo_without_manifest(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    """make-tiny's q4 repo served like the real Hub repo (no manifest.json): same files, a manifest that verifies."""
    source = tiny_models["q4"]
    source_manifest = manifest.load(source)
    hub = FakeHub({"test/tiny-q4": FakeRepo(source, COMMIT, exclude=("manifest.json",))})
    dest = tmp_path / "models"
    with serving(hub) as endpoint:
        result = run_fetch(endpoint, dest, repo="test/tiny-q4")
    assert result.returncode == 0, result.stderr
    fetched = manifest.load(dest)
    verify.check_files(dest, fetched, log=print)
    # Without a manifest only the seed layout's graphs are known: the main graph of each variant (the
    # transformer's per-size-class graphs, *.qb<N>.onnx, are an optimisation listed only by a manifest); the step
    # previews' map is fetched because the repository has one.
    main = [source_manifest.graph(c, v) for c, v in sorted({(g.component, g.variant) for g in source_manifest.graphs})]
    assert manifest.PREVIEW_MAP_FILE in source_manifest.files
    needed = sorted(
        {p for g in main for p in g.files()}
        | {p for p in source_manifest.files if p.startswith(("tokenizer/", "scheduler/"))}
        | {manifest.PREVIEW_MAP_FILE}
    )
    assert sorted(fetched.files) == needed
    assert_same_files(source, dest, needed)
    assert {(g.component, g.variant, g.path, tuple(g.external_data)) for g in fetched.graphs} == {
        (g.component, g.variant, g.path, tuple(g.external_data)) for g in main
    }
    # The folder works as a model repo: the CPU reference gives the same image from it as from the source.
    from builder.pipeline import reference

    def image(folder: Path) -> np.ndarray:
        return reference.generate(
            folder, prompt="a lighthouse", seed=3, width=64, height=64, steps=2, log=lambda _m: None
        ).image

    assert np.array_equal(image(dest), image(source))


def test_fetch_repo_with_manifest_uses_it(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    source = tiny_models["q4"]
    hub = FakeHub({"test/tiny-q4": FakeRepo(source, COMMIT)})
    dest = tmp_path / "models"
    with serving(hub) as endpoint:
        result = run_fetch(endpoint, dest, repo="test/tiny-q4")
    assert result.returncode == 0, result.stderr
    source_manifest, fetched = manifest.load(source), manifest.load(dest)
    verify.check_files(dest, fetched, log=print)
    assert fetched.graphs == source_manifest.graphs
    # Sizes, hashes and block hashes: the same bytes, so the same entries as the repository's own manifest.
    assert fetched.files == source_manifest.files
    assert all(entry.blocks is not None for entry in fetched.files.values())
    assert_same_files(source, dest, sorted(source_manifest.files))
    shutil.rmtree(dest / "tokenizer")
    with pytest.raises(ModelRepoError, match="missing"):
        verify.check_files(dest, fetched, check_sha256=False, log=print)


def test_fetch_keeps_the_loras_a_manifest_lists(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    source = tmp_path / "source"
    shutil.copytree(tiny_models["q4"], source)
    original = manifest.load(source)
    original.loras = [manifest.LoraEntry(file="style.safetensors", sha256="ab" * 32, scale=0.8)]
    manifest.write(source, original)
    hub = FakeHub({"test/tiny-lora": FakeRepo(source, COMMIT)})
    with serving(hub) as endpoint:
        result = run_fetch(endpoint, tmp_path / "models", repo="test/tiny-lora")
    assert result.returncode == 0, result.stderr
    assert manifest.load(tmp_path / "models").loras == original.loras


class HostileHub(FakeHub):
    """A mirror whose file list names a path outside the repo (a malicious HF_ENDPOINT)."""

    evil: str = "tokenizer/../../../x"

    async def model_info(self, request):  # type: ignore[no-untyped-def]
        reply = await super().model_info(request)
        data = json.loads(bytes(reply.body))
        data["siblings"].append({"rfilename": self.evil, "size": 4, "blobId": "0" * 40})
        from starlette.responses import JSONResponse

        return JSONResponse(data)


@pytest.mark.parametrize(
    "evil", ["tokenizer/../../../x", "/etc/x", "tokenizer\\..\\x", "tokenizer//x", "scheduler/./x"]
)
def test_a_hostile_file_list_writes_nothing_outside_dir(seed_repo: Path, tmp_path: Path, evil: str) -> None:
    hub = HostileHub({REPO: FakeRepo(seed_repo, COMMIT)})
    hub.evil = evil
    dest = tmp_path / "a" / "b" / "models"
    with serving(hub) as endpoint:
        result = run_fetch(endpoint, dest)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert "refusing" in result.stderr and repr(evil) in result.stderr
    outside = sorted(p for p in tmp_path.rglob("*") if p.is_file() and dest not in p.parents)
    assert outside == [] and not hub.requests  # no byte was downloaded


def test_stale_partials_of_another_revision_are_removed(seed_repo: Path, tmp_path: Path) -> None:
    dest = tmp_path / "models"
    stale = dest / ".fetch" / "transformer" / "transformer_q4.onnx_data.0123456789abcdef.incomplete"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"x" * 5000)
    left = dest / f".manifest.partial-{2**22 + 12345}-abcd"  # a killed run's manifest download (owner gone)
    left.mkdir()
    with serving(FakeHub({REPO: FakeRepo(seed_repo, COMMIT)})) as endpoint:
        result = run_fetch(endpoint, dest)
    assert result.returncode == 0, result.stderr
    assert not stale.exists() and not left.exists() and not (dest / ".fetch").exists()
    assert "removed 1 stale partial download(s)" in result.stderr and str(left) in result.stderr


class HostileDigestHub(FakeHub):
    """A mirror whose listing gives a wanted file a digest or size of its choosing, and drops every download of it."""

    target: str = "tokenizer/tokenizer.json"
    changes: dict[str, Any] = {}  # noqa: RUF012 - set per test

    async def model_info(self, request):  # type: ignore[no-untyped-def]
        reply = await super().model_info(request)
        data = json.loads(bytes(reply.body))
        for sibling in data["siblings"]:
            if sibling["rfilename"] == self.target:
                for key, value in self.changes.items():
                    if key == "lfs.sha256":
                        sibling["lfs"] = {"size": sibling["size"], "sha256": value, "pointerSize": 134}
                    else:
                        sibling[key] = value
        from starlette.responses import JSONResponse

        return JSONResponse(data)


@pytest.mark.parametrize(
    ("target", "changes", "says"),
    [
        ("tokenizer/tokenizer.json", {"blobId": "../../../../../z"}, "blobId '../../../../../z'"),
        ("tokenizer/tokenizer.json", {"blobId": "/tmp/klein-web-z"}, "blobId '/tmp/klein-web-z'"),
        ("tokenizer/tokenizer.json", {"blobId": 12345}, "blobId 12345"),
        ("tokenizer/tokenizer.json", {"blobId": "a" * 39 + "\n"}, "not 40 hexadecimal digits"),
        ("transformer/transformer_q4.onnx", {"lfs.sha256": "../../../../../z" + "0" * 48}, "LFS sha256"),
        ("transformer/transformer_q4.onnx", {"lfs.sha256": "../" * 21 + "z"}, "LFS sha256"),
        ("tokenizer/tokenizer.json", {"size": -5}, "has no size in bytes"),
        ("tokenizer/tokenizer.json", {"size": "12"}, "has no size in bytes"),
    ],
)
def test_no_field_of_a_listing_becomes_a_path_unchecked(
    seed_repo: Path, tmp_path: Path, target: str, changes: dict[str, Any], says: str
) -> None:
    """A digest names the file's partial download: a mirror's `blobId` of `../../../../../z`, with the connection
    dropped, would leave `z.incomplete` with bytes of its choosing outside --dir."""
    hub = HostileDigestHub({REPO: FakeRepo(seed_repo, COMMIT)})
    hub.target, hub.changes = target, changes
    hub.cut[target] = 10  # every download of it drops half-way: the partial file would stay
    dest = tmp_path / "a" / "b" / "models"
    with serving(hub) as endpoint:
        result = run_fetch(endpoint, dest)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert "refusing" in result.stderr and says in result.stderr and repr(target) in result.stderr, result.stderr
    outside = sorted(p for p in tmp_path.rglob("*") if p.is_file() and dest not in p.parents)
    assert outside == [] and not hub.requests  # refused before any byte was downloaded
    assert not Path("/tmp/klein-web-z.incomplete").exists()


def test_a_partial_file_never_lands_outside_dir_through_a_link(tmp_path: Path) -> None:
    from builder.errors import KleinWebError
    from builder.repo.download import RemoteFile, partial_path

    dest, elsewhere = tmp_path / "models", tmp_path / "elsewhere"
    dest.mkdir()
    elsewhere.mkdir()
    (dest / ".fetch").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(KleinWebError, match="outside"):
        partial_path(dest, RemoteFile("tokenizer/tokenizer.json", 5, None, "0" * 40))
