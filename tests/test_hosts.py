"""`klein-web build --host NAME` (builder/site/hosts.py): what each host reads is written and read back the way that
host reads it (tests/host_server.py), a site over a host's limits is refused in one line with nothing written, and
the command printed deploys with the host's own tool. The site in a real browser on each host: tests/browser/test_each_host.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import html
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from host_server import HostSite  # tests/ is on sys.path

from builder import WEB_SRC
from builder.errors import BuildError
from builder.site import hosts
from builder.site.bundle import BUILD_RECORD, build
from builder.site.model_base import content_security_policy

ISOLATION = {
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-embedder-policy": "require-corp",
    "cross-origin-resource-policy": "same-origin",
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, node_modules: Path) -> dict[str, Path]:
    """One build per host, each into a folder of its own."""
    root = tmp_path_factory.mktemp("hosts")
    return {name: build(root / name, host=name).out_dir for name in hosts.HOSTS}


def header_map(site: HostSite, path: str) -> dict[str, str]:
    return {name.lower(): value for name, value in site.headers(path)}


@pytest.mark.parametrize("name", list(hosts.HOSTS))
def test_each_host_reads_its_own_files_and_gets_the_isolation_headers(built: dict[str, Path], name: str) -> None:
    site_dir = built[name]
    present = {file for file in hosts.HOST_FILES if (site_dir / file).exists()}
    assert present == set(hosts.HOSTS[name].files)
    record = json.loads((site_dir / BUILD_RECORD).read_text())
    assert record["host"] == name
    assert not set(hosts.HOST_FILES) & set(record["shell"]), "a host's file in the app's offline shell"
    site = HostSite(name, site_dir)  # reads the files as the host does (and refuses what the host would)
    page, asset = header_map(site, "/"), header_map(site, "/" + record["files"]["worker_js"])
    if name == "github-pages":
        assert page == asset == {}, "GitHub Pages sets no headers: the service worker isolates the page"
        return
    for headers in (page, asset):
        assert {key: headers.get(key) for key in ISOLATION} == ISOLATION
    if name == "hf-space":
        assert set(page) == set(ISOLATION), "a Space sets the cross-origin headers and nothing else"
        meta = f'<meta http-equiv="Content-Security-Policy" content="{record["csp"]}">'
        assert meta in html.unescape((site_dir / "index.html").read_text()), "the CSP stays in the page's meta tag"
    else:
        assert page["content-security-policy"] == content_security_policy(record["model_base"])
        assert asset["cache-control"] == "public, max-age=31536000, immutable"
        assert "cache-control" not in page, "index.html and coi-sw.js must be revalidated on every visit"


def test_every_host_takes_the_site_as_built(built: dict[str, Path]) -> None:
    """dist/ of every --host is under every host's limits (a build over one would have raised)."""
    for name, site_dir in built.items():
        for host in hosts.HOSTS.values():
            if set(host.files) <= {p.name for p in site_dir.iterdir()}:
                hosts.check_limits(site_dir, host)
        largest = max(p.stat().st_size for p in site_dir.rglob("*") if p.is_file())
        assert largest <= 25 * hosts.MIB, name


def test_a_build_for_another_host_removes_the_first_hosts_files(web_src_copy: Path, tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    build(dist, web_src=web_src_copy, host="vercel")
    assert (dist / "vercel.json").is_file() and not (dist / "_headers").exists()
    again = build(dist, web_src=web_src_copy, host="hf-space")
    assert again.changed, "another host is another site"
    assert (dist / "README.md").is_file() and not (dist / "vercel.json").exists()


def sparse(path: Path, size: int, *, count: int = 1) -> Path:
    """`count` files of `size` bytes that take no disk space (`path` with `{i}` numbered)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        with open(str(path).format(i=i), "wb") as handle:
            handle.truncate(size)
    return path


# Counts are checked against the same host with a smaller limit: the rule is the same, the test is quicker.
SMALL = {"files": 20, "files_per_folder": 20}


@pytest.mark.parametrize(
    ("host", "limits", "make", "message"),
    [
        (
            "cloudflare",
            {},
            lambda site: sparse(site / "assets/big.wasm", 25 * hosts.MIB + 1),
            r"assets/big\.wasm is 26,214,401 bytes \(25\.0 MiB\), and Cloudflare Pages takes at most 25 MiB per file",
        ),
        (
            "github-pages",
            {},
            lambda site: sparse(site / "assets/big.bin", 100 * hosts.MIB + 1),
            r"assets/big\.bin is 104,857,601 bytes .* at most 100 MiB per file",
        ),
        (
            "vercel",
            {},
            lambda site: sparse(site / "assets/{i}.bin", 30 * 10**6, count=4),
            r"the site is 120,000,\d{3} bytes \(120(\.0)? MB\), and Vercel takes at most 100 MB per site",
        ),
        (
            "cloudflare",
            {"files": SMALL["files"]},
            lambda site: [(site / f"f{i}").touch() for i in range(20)],
            r"the site has 21 files, and Cloudflare Pages takes at most 20 files",
        ),
        (
            "hf-space",
            {"files_per_folder": SMALL["files_per_folder"]},
            lambda site: [(site / "assets" / f"f{i}").touch() for i in range(21)],
            r"assets/ holds 21 files, and a Hugging Face static Space takes at most 20 files per folder",
        ),
        (
            "cloudflare",
            {},
            lambda site: (site / "_headers").write_text("".join(f"/p{i}\n  X: y\n" for i in range(101))),
            r"_headers has 101 rules, and Cloudflare Pages takes at most 100 rules",
        ),
        (
            "cloudflare",
            {},
            lambda site: (site / "_headers").write_text("/*\n  X: " + "y" * 2000 + "\n"),
            r"a line of _headers has 2,005 characters, and Cloudflare Pages takes at most 2,000 characters per line",
        ),
    ],
)
def test_a_site_over_a_hosts_limit_is_refused_in_one_line(
    tmp_path: Path, host: str, limits: dict[str, int], make: Callable[[Path], object], message: str
) -> None:
    site = tmp_path / "site"
    (site / "assets").mkdir(parents=True)
    for name in hosts.HOSTS[host].files:
        (site / name).write_text("/*\n  X: y\n" if name == "_headers" else "")
    make(site)
    checked = dataclasses.replace(hosts.HOSTS[host], limits=dataclasses.replace(hosts.HOSTS[host].limits, **limits))
    with pytest.raises(BuildError, match=message) as caught:
        hosts.check_limits(site, checked)
    assert "\n" not in str(caught.value) and str(caught.value).startswith(f"--host {host}: ")
    assert str(caught.value).endswith("nothing was written (docs/deploying.md#hosts lists each host's limits).")


def test_a_refused_build_writes_nothing(web_src_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dist = tmp_path / "dist"
    build(dist, web_src=web_src_copy)
    before = {
        p.relative_to(dist).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in dist.rglob("*")
        if p.is_file()
    }
    strict = hosts.Host("cloudflare", "Cloudflare Pages", ("_headers",), hosts.Limits(file_bytes=10 * hosts.MIB), "")
    monkeypatch.setitem(hosts.HOSTS, "cloudflare", strict)
    with pytest.raises(
        BuildError, match=r"--host cloudflare: assets/ort-wasm-simd-threaded\.asyncify\.1of2-\w+\.wasm is"
    ):
        build(dist, web_src=web_src_copy, host="cloudflare")
    after = {
        p.relative_to(dist).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in dist.rglob("*")
        if p.is_file()
    }
    assert after == before
    assert not [p for p in tmp_path.iterdir() if ".staging-" in p.name]


def test_build_prints_the_command_that_deploys_to_the_host(tmp_path: Path, node_modules: Path) -> None:
    out = tmp_path / "space"
    command = [sys.executable, "-m", "builder", "build", "--host", "hf-space", "--out", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, cwd=WEB_SRC.parent, check=True)
    printed = f'hf upload <user>/<space> {out} . --repo-type space --delete "assets/*"'
    assert f"deploy to a Hugging Face static Space: {printed}" in result.stderr
    bad = subprocess.run(
        [*command[:4], "--host", "surge", "--out", str(tmp_path / "x")], capture_output=True, text=True, check=False
    )
    assert bad.returncode != 0 and "'surge' is not one of" in bad.stderr and not (tmp_path / "x").exists()


def test_the_space_command_is_huggingface_hubs_own_upload() -> None:
    """Every option the printed `hf upload` uses is one huggingface_hub's CLI has: the library uploads, not we."""
    hf = Path(sys.executable).with_name("hf")
    help_text = subprocess.run([str(hf), "upload", "--help"], capture_output=True, text=True, check=True).stdout
    options = [word for word in hosts.HOSTS["hf-space"].deploy.split() if word.startswith("--")]
    assert options == ["--repo-type", "--delete"]
    for option in options:
        assert option in help_text, option
