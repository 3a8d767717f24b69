"""No command deletes or replaces files it did not make.

convert refuses an OUT holding one of its inputs (SRC, a file SRC links to, a --lora file), an OUT inside the folders
it reads, and a folder whose manifest.json is not klein-web's; build (and serve, which builds) refuses an --out /
--dist holding someone's own site, with the marker rule fetch and regress use; regress-merge checks every folder a
report names like a case name, inside its shard, and refuses shards and OUT that hold each other. Every refusal
comes before anything is written: the folders stay byte for byte as they were.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from refusals import snapshot
from stub_repo import write_stub_repo
from test_regress_shards import write_shard

from builder import REPO_ROOT
from builder.check.regress import merge
from builder.errors import BuildError, ConversionError, InputError
from builder.site import bundle


def run_cli(*args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "builder", *map(str, args)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def one_error(result: subprocess.CompletedProcess[str]) -> str:
    errors = [line for line in result.stderr.splitlines() if line.startswith(("Error:", "could not"))]
    assert result.returncode != 0 and len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    return errors[0]


# ------------------------------------------------------------------------------------------------ convert


def stub_source(folder: Path) -> Path:
    """What convert's first check takes for a diffusers FLUX.2 [klein] folder (a refusal must come before more)."""
    (folder).mkdir(parents=True)
    (folder / "model_index.json").write_text(json.dumps({"_class_name": "Flux2KleinPipeline"}))
    for name in ("text_encoder", "transformer", "vae", "tokenizer", "scheduler"):
        (folder / name).mkdir()
        (folder / name / "config.json").write_text("{}")
    (folder / "transformer" / "diffusion_pytorch_model.safetensors").write_bytes(b"the user's only copy")
    return folder


def convert_quietly(src: Path, out: Path, **options: object) -> None:
    from builder.convert.convert import convert

    convert(src, out, log=lambda _line: None, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["inside", "symlink-into-out", "a-weight-linked-into-out", "lora-inside"])
def test_convert_refuses_an_out_holding_its_input(tmp_path: Path, kind: str) -> None:
    from builder.convert.lora import LoraSpec

    holder = write_stub_repo(tmp_path / "holder")  # an earlier model repository
    loras: list[LoraSpec] = []
    if kind == "inside":
        src = stub_source(holder / "checkpoint")
    elif kind == "symlink-into-out":
        stub_source(holder / "checkpoint")
        src = tmp_path / "checkpoint"
        src.symlink_to(holder / "checkpoint", target_is_directory=True)
    elif kind == "a-weight-linked-into-out":
        src = stub_source(tmp_path / "checkpoint")
        weight = src / "transformer" / "diffusion_pytorch_model.safetensors"
        shutil.move(weight, holder / "weights.safetensors")
        weight.symlink_to(holder / "weights.safetensors")
    else:
        src = stub_source(tmp_path / "checkpoint")
        (holder / "style.safetensors").write_bytes(b"the user's LoRA")
        loras = [LoraSpec(holder / "style.safetensors")]
    before, around = snapshot(holder), sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(ConversionError, match=r"is inside OUT .*holder, which the conversion replaces") as raised:
        convert_quietly(src, holder, loras=loras)
    print(raised.value)
    assert snapshot(holder) == before and sorted(p.name for p in tmp_path.iterdir()) == around


def test_convert_refuses_an_out_inside_the_folders_it_reads(tmp_path: Path) -> None:
    src = stub_source(tmp_path / "checkpoint")
    before = snapshot(src)
    with pytest.raises(ConversionError, match="folders that the conversion reads"):
        convert_quietly(src, src / "tokenizer" / "web")
    assert snapshot(src) == before


def test_convert_refuses_a_folder_whose_manifest_is_not_kleins(tmp_path: Path) -> None:
    """A web project's own manifest.json does not make its folder a model repository (fetch's rule too)."""
    src = stub_source(tmp_path / "checkpoint")
    project = tmp_path / "project"
    project.mkdir()
    (project / "manifest.json").write_text('{"name": "my app", "start_url": "/"}')
    (project / "index.html").write_text("<p>mine</p>")
    before = snapshot(project)
    with pytest.raises(ConversionError, match="not a model repo"):
        convert_quietly(src, project)
    assert snapshot(project) == before


def test_convert_still_takes_an_out_beside_or_under_its_source(tmp_path: Path) -> None:
    """An OUT directly inside SRC (`convert ckpt ckpt/web`) or an earlier repository is still fine to write."""
    from builder.convert.convert import check_destination

    src = stub_source(tmp_path / "checkpoint")
    check_destination(src / "web", inputs=[src])
    check_destination(write_stub_repo(tmp_path / "earlier"), inputs=[src])


def test_convert_into_the_repository_holding_its_checkpoint_is_refused(
    tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    """`convert holder/checkpoint holder`: the old OUT, with SRC inside it, would be moved aside and deleted."""
    holder = tmp_path / "holder"
    shutil.copytree(tiny_models["fp32"], holder)
    shutil.copytree(tiny_models["diffusers"], holder / "checkpoint")
    before = snapshot(holder)
    result = run_cli("convert", holder / "checkpoint", holder, "--precision", "fp32", timeout=600)
    assert "inside OUT" in one_error(result) and result.returncode == 1
    assert snapshot(holder) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["holder"]


# ------------------------------------------------------------------------------------------ build and serve


def someones_site(folder: Path) -> Path:
    """A user's own static site: the very names a build writes and the assets/ it cleans."""
    files = {
        "index.html": "<h1>my site</h1>",
        "manifest.webmanifest": '{"name": "mine"}',
        "assets/app.js": "console.log('mine')",
        "assets/photos/cat.jpg": "meow",
        "_headers": "/*\n  X-Mine: 1\n",
    }
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    return folder


@pytest.mark.parametrize("kind", ["site", "only-assets", "a-file"])
def test_build_refuses_a_folder_that_is_not_its_own(tmp_path: Path, kind: str) -> None:
    site = someones_site(tmp_path / "site")
    if kind == "only-assets":
        for path in (site / "index.html", site / "manifest.webmanifest", site / "_headers"):
            path.unlink()
    if kind == "a-file":
        shutil.rmtree(site / "assets")
        for path in (site / "manifest.webmanifest", site / "_headers"):
            path.unlink()
    before = snapshot(site)
    with pytest.raises(BuildError, match=r"--out .*site is a non-empty folder that is not a site klein-web built"):
        bundle.build(site)
    assert snapshot(site) == before


@pytest.mark.parametrize("command", ["build", "serve"])
def test_the_command_line_refuses_someones_site_in_one_line(tmp_path: Path, command: str) -> None:
    """serve builds a stale --dist, so it follows build's rule, before it listens."""
    site = someones_site(tmp_path / "site")
    before = snapshot(site)
    flag = "--out" if command == "build" else "--dist"
    result = run_cli(command, flag, site, *(["--port", "0"] if command == "serve" else []), timeout=60)
    assert f"{flag} {site} is a non-empty folder" in one_error(result) and "nothing was written" in result.stderr
    assert snapshot(site) == before


def test_build_still_replaces_its_own_sites(node_modules: Path, tmp_path: Path) -> None:
    """A site built before the marker existed (its build record says whose it is), and a build interrupted before
    its record landed (the marker does), are built over as before."""
    dist = tmp_path / "dist"
    bundle.build(dist)
    (dist / bundle.OWNER.marker).unlink()  # as a build without the marker left it
    again = bundle.build(dist, model_base="https://models.example.org/k/")
    assert again.changed and (dist / bundle.OWNER.marker).is_file()
    (dist / bundle.BUILD_RECORD).unlink()  # as an interrupted build leaves it: the marker, no record
    assert bundle.build(dist).changed


# --------------------------------------------------------------------------------------------- regress-merge


@pytest.fixture
def shards(tmp_path: Path) -> dict[str, Path]:
    """Two shards of a three-case run in tmp/a/, and a folder a report must never reach, tmp/victim."""
    repo = write_stub_repo(tmp_path / "models")
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps({"cases": [{"name": n, "prompt": "a fox"} for n in ("a", "b", "c")]}))
    one = write_shard(tmp_path / "a" / "s1", repo, cases, "1/2", {"a": True, "c": True})
    two = write_shard(tmp_path / "a" / "s2", repo, cases, "2/2", {"b": True})
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "report.json").write_text("{}")  # so it passes for a finished case folder
    (victim / "thesis.tex").write_text("years of work")
    return {"root": tmp_path, "one": one, "two": two, "victim": victim}


def rewrite_case(shard: Path, index: int, **fields: object) -> None:
    path = shard / "report.json"
    data = json.loads(path.read_text())
    data["cases"][index].update(fields)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(
    "folder",
    ["../../victim", "ABSOLUTE", "b/../../../victim", ".", "", "sub/b", "report.json", "b\n", 7, None],
)
def test_merge_checks_every_case_folder_a_report_names(shards: dict[str, Path], folder: object) -> None:
    root, victim = shards["root"], shards["victim"]
    rewrite_case(shards["two"], 0, folder=str(victim) if folder == "ABSOLUTE" else folder)
    out = root / "b" / "merged"  # as deep as the shards: "../../victim" from either is tmp/victim
    before = snapshot(root)
    with pytest.raises(InputError, match="not a report regress wrote") as raised:
        merge.merge(out, [shards["one"], shards["two"]], log=lambda _m: None)
    print(raised.value)
    assert snapshot(root) == before and not out.exists()


def test_merge_refuses_a_case_folder_that_links_out_of_its_shard(shards: dict[str, Path]) -> None:
    root, two = shards["root"], shards["two"]
    shutil.rmtree(two / "b")
    (two / "b").symlink_to(shards["victim"], target_is_directory=True)
    before = snapshot(root)
    with pytest.raises(InputError, match=r"outside .*s2"):
        merge.merge(root / "b" / "merged", [shards["one"], two], log=lambda _m: None)
    assert snapshot(root) == before


def test_merge_refuses_an_earlier_merge_whose_case_folder_links_elsewhere(shards: dict[str, Path]) -> None:
    root = shards["root"]
    out = root / "b" / "merged"
    merge.merge(out, [shards["one"], shards["two"]], log=lambda _m: None)
    shutil.rmtree(out / "b")
    (out / "b").symlink_to(shards["victim"], target_is_directory=True)
    before = snapshot(shards["victim"])
    with pytest.raises(InputError, match="outside"):
        merge.merge(out, [shards["one"], shards["two"]], log=lambda _m: None)
    assert snapshot(shards["victim"]) == before


def test_merge_refuses_two_cases_with_one_folder(shards: dict[str, Path]) -> None:
    """Two entries naming one folder (in any letter case) would overwrite each other's copy in OUT."""
    root, two = shards["root"], shards["two"]
    shutil.copytree(two / "b", two / "A")
    rewrite_case(two, 0, folder="A", case="A")
    before = snapshot(root)
    with pytest.raises(InputError, match="is listed twice"):
        merge.merge(root / "b" / "merged", [shards["one"], two], log=lambda _m: None)
    assert snapshot(root) == before


@pytest.mark.parametrize("where", ["shard-inside-out", "out-inside-shard"])
def test_merge_refuses_shards_and_out_that_hold_each_other(tmp_path: Path, where: str) -> None:
    repo = write_stub_repo(tmp_path / "models")
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps({"cases": [{"name": n, "prompt": "a fox"} for n in ("a", "b")]}))
    if where == "shard-inside-out":
        out = tmp_path / "merged"
        # An earlier merge into OUT, with the shards kept inside it under case-like names.
        one = write_shard(out / "a", repo, cases, "1/2", {"a": True})
        two = write_shard(tmp_path / "s2", repo, cases, "2/2", {"b": True})
        (out / ".klein-web-regress").write_text("")
    else:
        one = write_shard(tmp_path / "s1", repo, cases, "1/2", {"a": True})
        two = write_shard(tmp_path / "s2", repo, cases, "2/2", {"b": True})
        out = one / "a"  # a case folder: its report.json makes it pass for an earlier report
    before = snapshot(tmp_path)
    with pytest.raises(InputError, match="inside"):
        merge.merge(out, [one, two], log=lambda _m: None)
    assert snapshot(tmp_path) == before


def test_merge_still_merges_into_a_new_folder_beside_the_shards(shards: dict[str, Path]) -> None:
    out = shards["root"] / "b" / "merged"
    assert merge.merge(out, [shards["one"], shards["two"]], log=lambda _m: None) == 0
    assert sorted(p.name for p in out.iterdir()) == [".klein-web-regress", "a", "b", "browser.log", "c", "report.json"]
