"""`klein-web build`: bundle web_src/ into a static site (esbuild + jinja2), skipping the work when nothing changed.

Output layout (every path relative to the site root, so dist/ works under any sub-path):

    index.html                 rendered from web_src/index.html.j2
    manifest.webmanifest       the web app manifest (name, icons, start URL): the app installs
    coi-sw.js                  the service worker from web_src/src/service_worker.js (unhashed: it must sit at the
                               root scope): the app shell offline, cross-origin isolation where headers cannot be set
    _headers                   COOP/COEP/CORP + CSP for Netlify / Cloudflare Pages; `--host` writes what another host
                               reads instead (.nojekyll, a Space's README.md, vercel.json: builder/site/hosts.py)
    assets/page-HASH.js(.map)  page bundle (UI only, never onnxruntime)
    assets/page-HASH.css(.map)
    assets/worker-HASH.js(.map)  module worker bundle (onnxruntime-web/webgpu and the pipeline)
    assets/store-HASH.js(.map)  the store's helper worker (downloading, hashing, reading; web_src/src/store/store_workers.js)
    assets/tokenizer-HASH.js(.map)  the tokenizer's helper worker (web_src/src/pipeline/tokenizer_helper.js)
    assets/coi-HASH.js         registers coi-sw.js (and reloads once when the host sends no COOP/COEP headers)
    assets/icon-SIZE-PURPOSE-HASH.png  the app's icons (builder/site/icons.py), 192 and 512 px, any and maskable
    assets/ort-wasm-simd-threaded.asyncify-HASH.mjs, ….asyncify.1of2-HASH.wasm, ...  the onnxruntime-web runtime
                               the worker loads, its .wasm in parts (builder/site/runtime_files.py)
    .klein-build.json          build record: input stamp, output list, CSP, build id (read by the server and the
                               next build)
    .klein-web-build           the marker that makes the folder the build's (builder.repo.owned_folder): written
                               before the first file, so a folder holding someone's own site is never replaced

The shell (every output the page needs, source maps and the headers file aside) is hashed into the build id, which
index.html and coi-sw.js carry: the service worker keeps each build's shell in a cache of its own, so a deploy
replaces it whole (docs/deploying.md#offline-and-updates).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import jinja2

from builder import DEFAULT_MODEL_BASE, REPO_ROOT, WEB_SRC, __version__, has_web_src
from builder.errors import BuildError, KleinWebError
from builder.node import NodeTools, ensure_node_modules, find_node, lock_hash
from builder.repo import paths
from builder.repo.manifest import SCHEMA_FILE
from builder.repo.owned_folder import Owner
from builder.site import hosts, icons, runtime_files
from builder.site.model_base import check_model_base, content_security_policy
from builder.site.ort_versions import ORT_PACKAGE, onnxruntime_web_version, package_version, runtime_package

BUILD_RECORD = ".klein-build.json"
PAGE_ENTRY = "src/page/main.js"
WORKER_ENTRY = "src/worker/main.js"
STORE_WORKER_ENTRY = "src/store/store_worker.js"
TOKENIZER_WORKER_ENTRY = "src/pipeline/tokenizer_worker.js"
COI_REGISTER = "src/coi_register.js"
SERVICE_WORKER_ENTRY = "src/service_worker.js"
SERVICE_WORKER = "coi-sw.js"  # the name registered browsers know it by
WEB_MANIFEST = "manifest.webmanifest"
HEADERS_FILE = hosts.HEADERS_FILE
PAGE = "index.html"
STYLE = "style.css"
TEMPLATE = "index.html.j2"
# The onnxruntime-web build the worker imports (`onnxruntime-web/webgpu`) loads exactly these two files.
ORT_DIST = f"{ORT_PACKAGE}/dist"
ORT_RUNTIME = (runtime_files.LOADER, runtime_files.WASM)
# What `onnxruntime-web/webgpu` resolves to in the package (its exports' default for an ES module import).
ORT_WEBGPU_ENTRY = "dist/ort.webgpu.bundle.min.mjs"

CROSS_ORIGIN_HEADERS = {
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Embedder-Policy": "require-corp",
    "Cross-Origin-Resource-Policy": "same-origin",
}
IMMUTABLE = "public, max-age=31536000, immutable"


@dataclass(frozen=True)
class BuildResult:
    out_dir: Path
    changed: bool  # False when the build record matched and nothing was written
    seconds: float
    files: dict[
        str, str
    ]  # role (page_js, page_css, worker_js, store_js, coi_js, ort_mjs, ort_wasm_part0.., icons) -> path in the site
    build_id: str  # the hash over the shell's files that index.html and coi-sw.js carry


# ---------------------------------------------------------------------------------------------- inputs


def source_files(web_src: Path) -> Iterator[Path]:
    """Every input file of the site under web_src (not node_modules, not dot-folders), in a stable order."""
    for root, dirs, files in os.walk(web_src):
        dirs[:] = sorted(d for d in dirs if d != "node_modules" and not d.startswith("."))
        for name in sorted(files):
            if not name.startswith("."):
                yield Path(root) / name


def manifest_schema(web_src: Path) -> Path:
    """The manifest's schema as the app imports it (shared/model_repo.js): from the Python package beside web_src,
    where the Python tool reads it too."""
    schema = web_src.parent / SCHEMA_FILE.relative_to(REPO_ROOT)
    if not schema.is_file():
        raise BuildError(
            f"{schema} is missing: the app imports the manifest's schema from beside {web_src}. Build web_src in its "
            "checkout, or put builder/repo/manifest_schema.json beside the copy."
        )
    return schema


def input_stamp(
    web_src: Path, model_base: str, *, cache_shell: bool = True, runtime: str = "", host: str = "generic"
) -> str:
    """A hash of everything that shapes the output; equal stamps mean an identical site. `runtime`: another
    onnxruntime-web version than the pinned one (runtime_package); `host`: the host the site is built for."""
    digest = hashlib.sha256()
    for part in (__version__, model_base, lock_hash(web_src), f"cache_shell={cache_shell}", runtime, f"host={host}"):
        digest.update(part.encode() + b"\0")
    # The build code itself: a changed bundler must not be skipped as "up to date".
    for module in (icons, runtime_files, hosts):
        digest.update(Path(str(module.__file__)).read_bytes())
    for path in (Path(__file__), Path(__file__).parents[1] / "node.py"):
        digest.update(path.read_bytes())
    for path in [*source_files(web_src), manifest_schema(web_src)]:
        digest.update(path.relative_to(web_src.parent).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def built_onnxruntime_web(dist_dir: Path) -> str:
    """The onnxruntime-web version a built site runs (its build record; the pinned one for older records)."""
    record = read_record(Path(dist_dir)) or {}
    return str(record.get("onnxruntime_web") or onnxruntime_web_version())


def read_record(out_dir: Path) -> dict[str, object] | None:
    try:
        record = json.loads((out_dir / BUILD_RECORD).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


# A site built before the marker existed is recognised by its build record.
OWNER = Owner(
    ".klein-web-build",
    "A site built by `klein-web build`; building again replaces its files.\n",
    "a site klein-web built",
    earlier=lambda folder: read_record(folder) is not None,
)


def check_out_folder(out_dir: Path, *, what: str) -> None:
    """BuildError, before anything is bundled, unless `out_dir` is missing, empty or a site of ours: a build replaces
    index.html and the rest, and deletes files under assets/ it did not make."""
    why = OWNER.why_not(out_dir)
    if why is not None:
        raise BuildError(
            f"{what} {out_dir} is {why}; a build would replace its index.html and delete files under assets/. "
            f"Pass a new or empty folder, e.g. {what} {out_dir / 'klein-web'}; nothing was written."
        )


def is_up_to_date(out_dir: Path, stamp: str) -> bool:
    record = read_record(out_dir)
    if record is None or record.get("stamp") != stamp:
        return False
    outputs = record.get("outputs")
    return isinstance(outputs, list) and all((out_dir / str(name)).is_file() for name in outputs)


# ---------------------------------------------------------------------------------------------- bundling


def run_esbuild(
    tools: NodeTools, web_src: Path, entry: str, *, out_assets: Path, name: str, extra: list[str], hashed: bool = True
) -> str:
    """Bundle one entry into out_assets as `{name}-HASH.ext` (`{name}.ext` unhashed) (+ .map); returns the output
    file name."""
    esbuild = web_src / "node_modules" / ".bin" / ("esbuild.cmd" if os.name == "nt" else "esbuild")
    if not (web_src / entry).is_file():
        raise BuildError(f"{web_src / entry} is missing: it is the entry point of the {name} bundle.")
    meta = out_assets / f".meta-{name}.json"
    cmd = [
        str(esbuild),
        entry,
        "--bundle",
        "--minify",
        "--sourcemap",
        "--charset=utf8",
        "--log-level=warning",
        f"--outdir={out_assets}",
        f"--entry-names={name}-[hash]" if hashed else f"--entry-names={name}",
        f"--metafile={meta}",
        *extra,
    ]
    result = subprocess.run(cmd, cwd=web_src, env=tools.env(), capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BuildError(f"esbuild failed on {web_src / entry}:\n{result.stderr.strip()[-4000:]}")
    outputs = json.loads(meta.read_text())["outputs"]
    meta.unlink()
    entries = [Path(path).name for path, info in outputs.items() if info.get("entryPoint")]
    if len(entries) != 1:
        raise BuildError(f"esbuild produced {entries} for {entry}; expected one output file.")
    return entries[0]


def bundle_assets(
    tools: NodeTools, web_src: Path, assets: Path, *, runtime: Path | None = None
) -> tuple[dict[str, str], runtime_files.Runtime]:
    """Run esbuild on the page, the workers, the CSS and the COI script; copy the ORT runtime. Returns roles and the
    runtime's files. `runtime`: another onnxruntime-web package folder than node_modules' (runtime_package)."""
    assets.mkdir(parents=True)
    ort = runtime_files.copy_runtime((runtime or web_src / ORT_PACKAGE) / "dist", assets)
    files: dict[str, str] = ort.roles()
    version = f"--define:KLEIN_VERSION={json.dumps(__version__)}"
    module = ["--format=esm", "--platform=browser", version]
    files["page_js"] = run_esbuild(tools, web_src, PAGE_ENTRY, out_assets=assets, name="page", extra=module)
    files["store_js"] = run_esbuild(tools, web_src, STORE_WORKER_ENTRY, out_assets=assets, name="store", extra=module)
    files["tokenizer_js"] = run_esbuild(
        tools, web_src, TOKENIZER_WORKER_ENTRY, out_assets=assets, name="tokenizer", extra=module
    )
    # An alias replaces the import path as a whole, so it names the file the pinned package's exports pick.
    other = [f"--alias:onnxruntime-web/webgpu={runtime / ORT_WEBGPU_ENTRY}"] if runtime else []
    files["worker_js"] = run_esbuild(
        tools,
        web_src,
        WORKER_ENTRY,
        out_assets=assets,
        name="worker",
        extra=[
            *module,
            *other,
            f"--define:KLEIN_ORT_WASM={ort.worker_define()}",
            f"--define:KLEIN_STORE_WORKER={json.dumps(files['store_js'])}",
            f"--define:KLEIN_TOKENIZER_WORKER={json.dumps(files['tokenizer_js'])}",
        ],
    )
    files["page_css"] = run_esbuild(tools, web_src, STYLE, out_assets=assets, name="page", extra=[])
    # A classic script (not a module): it must run before anything else and may reload the page.
    files["coi_js"] = run_esbuild(
        tools, web_src, COI_REGISTER, out_assets=assets, name="coi", extra=["--format=iife", "--sourcemap=external"]
    )
    for size in icons.SIZES:
        for purpose in icons.PURPOSES:
            data = icons.icon_png(size, purpose)
            name = f"icon-{size}-{purpose}-{hashlib.sha256(data).hexdigest()[:10]}.png"
            (assets / name).write_bytes(data)
            files[f"icon_{size}_{purpose}"] = name
    return {role: f"assets/{name}" for role, name in files.items()}, ort


def web_manifest(files: dict[str, str]) -> str:
    """The web app manifest, naming the icons bundle_assets made."""
    return icons.web_manifest(
        {(size, purpose): files[f"icon_{size}_{purpose}"] for size in icons.SIZES for purpose in icons.PURPOSES}
    )


def shell_files(site: Path) -> list[str]:
    """What the page needs to open and generate offline: every file of the site but the service worker itself,
    source maps, what hosts read (hosts.HOST_FILES) and the build record; the page first."""
    names = {p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file()}
    names -= {SERVICE_WORKER, BUILD_RECORD, *hosts.HOST_FILES}
    return [PAGE, *sorted(name for name in names if name != PAGE and not name.endswith(".map"))]


def build_id(site: Path, shell: list[str], service_worker_source: bytes) -> str:
    """A hash over the shell's files (names and bytes) and the service worker's source: any change is a new id."""
    digest = hashlib.sha256(hashlib.sha256(service_worker_source).digest())
    for name in shell:
        digest.update(name.encode() + b"\0" + hashlib.sha256((site / name).read_bytes()).digest())
    return digest.hexdigest()[:16]


def bundle_service_worker(
    tools: NodeTools, web_src: Path, site: Path, *, build: str, shell: list[str], runtime: runtime_files.Runtime
) -> None:
    """`coi-sw.js` at the site root with the build id, the shell list (empty: cache nothing) and the runtime's parts
    compiled in."""
    defines = [
        f"--define:KLEIN_BUILD={json.dumps(build)}",
        f"--define:KLEIN_SHELL={json.dumps(shell)}",
        f"--define:KLEIN_RUNTIME={runtime.service_worker_define()}",
    ]
    run_esbuild(
        tools,
        web_src,
        SERVICE_WORKER_ENTRY,
        out_assets=site,
        name=Path(SERVICE_WORKER).stem,
        extra=["--format=iife", *defines],
        hashed=False,
    )


def render_index(web_src: Path, *, files: dict[str, str], csp: str, model_base: str, build: str) -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(web_src),
        autoescape=True,
        undefined=jinja2.StrictUndefined,  # a misspelt variable fails the build instead of rendering ""
        keep_trailing_newline=True,
    )
    try:
        template = env.get_template(TEMPLATE)
        return template.render(
            csp=csp,
            version=__version__,
            model_base=model_base,
            worker_js=files["worker_js"],
            page_js=files["page_js"],
            page_css=files["page_css"],
            coi_js=files["coi_js"],
            build=build,
            web_manifest=WEB_MANIFEST,
            icon=files[f"icon_{icons.SIZES[0]}_any"],
            theme_color=icons.THEME_COLOR,
        )
    except jinja2.TemplateError as exc:
        raise BuildError(f"Rendering {web_src / TEMPLATE} failed: {exc}") from exc


def header_rules(csp: str) -> hosts.HeaderRules:
    """The headers the site's responses need, each host writes them its way: isolation and the CSP on every path,
    a year's cache on the hashed assets only (Pages joins a header that two matching rules set)."""
    return (("/", {**CROSS_ORIGIN_HEADERS, "Content-Security-Policy": csp}), ("/assets/", {"Cache-Control": IMMUTABLE}))


def headers_file(csp: str) -> str:
    """Netlify / Cloudflare Pages `_headers`."""
    return hosts.headers_text(header_rules(csp))


# ---------------------------------------------------------------------------------------------- install


def install(staging: Path, out_dir: Path, *, previous: list[str]) -> list[str]:
    """Move the staged site into out_dir file by file (os.replace is atomic), assets before index.html.

    A file whose bytes are already in place is left alone (hashed assets with the same name are the same bytes).
    Then outputs of older builds that this build no longer makes are deleted.
    """
    staged = sorted(p.relative_to(staging).as_posix() for p in staging.rglob("*") if p.is_file())
    # index.html after the assets: a browser loading the page mid-install never sees it point at missing assets;
    # coi-sw.js after index.html: its install fetches the shell, which must be the one it names.
    staged.sort(key=lambda name: {PAGE: 1, SERVICE_WORKER: 2, BUILD_RECORD: 3}.get(name, 0))
    for name in staged:
        source, target = staging / name, out_dir / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_file() and not target.is_symlink():
            same = name.startswith("assets/") or target.read_bytes() == source.read_bytes()
            if same and target.stat().st_size == source.stat().st_size:
                continue
        os.replace(source, target)
    stale = set(previous) | {p.relative_to(out_dir).as_posix() for p in (out_dir / "assets").rglob("*") if p.is_file()}
    for name in sorted(stale - set(staged)):
        try:  # the record is data: each name is checked like a path from elsewhere
            paths.inside(out_dir, name, what="build record output").unlink(missing_ok=True)
        except KleinWebError:
            continue
    return staged


def build(
    out_dir: Path,
    *,
    model_base: str = DEFAULT_MODEL_BASE,
    web_src: Path = WEB_SRC,
    cache_shell: bool = True,
    log: Callable[[str], None] = lambda _message: None,
    onnxruntime_web: str | None = None,
    host: str = "generic",
    what: str = "--out",
) -> BuildResult:
    """Build the site into out_dir; a no-op (nothing written) when the inputs match the last build.

    `cache_shell` False: the service worker keeps no shell (`serve --watch`: every reload gets the latest build).
    `onnxruntime_web`: build with that onnxruntime-web version instead of the pinned one (runtime_package).
    `host`: write what that host reads and refuse a site over its limits (builder/site/hosts.py).
    `what`: the option that named out_dir, for messages (`--out`, `--dist`).
    """
    started = time.perf_counter()
    out_dir, web_src = Path(out_dir).resolve(), Path(web_src).resolve()
    check_model_base(model_base)
    site_host = hosts.host_named(host)
    if out_dir.exists() and not out_dir.is_dir():
        raise BuildError(f"{what} {out_dir} is a file; pass a folder (it is created if missing).")
    if out_dir == web_src or web_src in out_dir.parents:
        raise BuildError(f"{what} {out_dir} is inside web_src ({web_src}); the build would read its own output.")
    check_out_folder(out_dir, what=what)
    if not has_web_src(web_src):
        raise BuildError(
            f"{web_src} holds no app sources (no package.json): building needs a checkout of the repository. "
            "An installed klein-web wheel carries the app already built: `klein-web serve` serves it."
        )
    ensure_node_modules(web_src=web_src, log=log)
    package = runtime_package(onnxruntime_web, web_src=web_src, log=log)
    runtime = package if package != web_src / ORT_PACKAGE else None
    version = package_version(package) or onnxruntime_web_version(web_src)
    stamp = input_stamp(web_src, model_base, cache_shell=cache_shell, runtime=version if runtime else "", host=host)
    record = read_record(out_dir)
    if is_up_to_date(out_dir, stamp) and record is not None:
        recorded = record.get("files")
        files = {str(k): str(v) for k, v in recorded.items()} if isinstance(recorded, dict) else {}
        return BuildResult(
            out_dir,
            changed=False,
            seconds=time.perf_counter() - started,
            files=files,
            build_id=str(record.get("build_id", "")),
        )

    tools = find_node()
    csp = content_security_policy(model_base)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    # Stage beside out_dir (same file system, so os.replace is a rename, never a copy).
    with tempfile.TemporaryDirectory(prefix=f".{out_dir.name}.staging-", dir=out_dir.parent) as tmp:
        staging = Path(tmp)
        log(f"bundling {web_src} -> {out_dir}")
        files, ort = bundle_assets(tools, web_src, staging / "assets", runtime=runtime)
        (staging / WEB_MANIFEST).write_text(web_manifest(files))
        hosts.write_host_files(staging, site_host, header_rules(csp))

        def index(build: str) -> str:
            return render_index(web_src, files=files, csp=csp, model_base=model_base, build=build)

        # The id is a hash over the shell with index.html as it is without its own id.
        (staging / PAGE).write_text(index(""))
        shell = shell_files(staging)
        build = build_id(staging, shell, (web_src / SERVICE_WORKER_ENTRY).read_bytes())
        (staging / PAGE).write_text(index(build))
        bundle_service_worker(tools, web_src, staging, build=build, shell=shell if cache_shell else [], runtime=ort)
        outputs = sorted(p.relative_to(staging).as_posix() for p in staging.rglob("*") if p.is_file())
        record_data = {
            "stamp": stamp,
            "version": __version__,
            "model_base": model_base,
            "csp": csp,
            "files": files,
            "outputs": outputs,
            "build_id": build,
            "shell": shell,
            "cache_shell": cache_shell,
            "onnxruntime_web": version,
            "runtime": ort.names(runtime_files.ASSETS),
            "host": host,
        }
        (staging / BUILD_RECORD).write_text(json.dumps(record_data, indent=2) + "\n")
        hosts.check_limits(staging, site_host)
        previous_outputs = (record or {}).get("outputs")
        previous = [str(name) for name in previous_outputs] if isinstance(previous_outputs, list) else []
        out_dir.mkdir(exist_ok=True)
        OWNER.mark(out_dir)
        install(staging, out_dir, previous=previous)
    seconds = time.perf_counter() - started
    log(f"built {out_dir} in {seconds:.2f} s ({len(outputs)} files, build {build})")
    return BuildResult(out_dir, changed=True, seconds=seconds, files=files, build_id=build)
