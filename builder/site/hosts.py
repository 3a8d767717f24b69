"""`klein-web build --host NAME`: what each static host reads beside the site, the limits it documents, and the
command that deploys there.

Every host gets the same site; what differs is how the host is told the response headers the app needs (COOP/COEP
for cross-origin isolation, the CSP, a long cache for the hashed assets) and what it refuses:

    generic       `_headers` (Netlify / Cloudflare format), for any static host
    cloudflare    `_headers`                       Cloudflare Pages (and Workers static assets)
    netlify       `_headers`                       read from the deployed folder (netlify.toml is read from the
                                                   repository root, not the deployed folder)
    github-pages  `.nojekyll`, no headers          GitHub Pages sets none: the app's service worker isolates the page
    hf-space      README.md with the Space's front matter (`sdk: static`, `custom_headers`: COOP/COEP/CORP only,
                                                   lowercase; the CSP stays in the page's meta tag)
    vercel        `vercel.json` (`headers`)

The limits, and where they were read, are the table in docs/deploying.md#hosts; `check_limits` refuses a site over
any of them in one line before the build installs anything.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from builder.errors import BuildError

MIB = 2**20
GB = 10**9

# The response headers the site needs, as (path prefix, headers): `/` is every path, `/assets/` the hashed assets
# (bundle.header_rules makes them). Each host writes them in its own syntax.
HeaderRules = Sequence[tuple[str, Mapping[str, str]]]

HEADERS_FILE = "_headers"
NOJEKYLL = ".nojekyll"
SPACE_README = "README.md"
VERCEL_JSON = "vercel.json"
# Every file some host reads: none of them is part of the app's shell, and a build for one host removes the others'.
HOST_FILES = (HEADERS_FILE, NOJEKYLL, SPACE_README, VERCEL_JSON)
# The headers a Space's custom_headers may set (huggingface.co/docs/hub/spaces-config-reference).
SPACE_HEADERS = ("cross-origin-embedder-policy", "cross-origin-opener-policy", "cross-origin-resource-policy")


@dataclass(frozen=True)
class Limits:
    """A host's documented limits; None where it documents none."""

    file_bytes: int | None = None
    files: int | None = None
    site_bytes: int | None = None
    files_per_folder: int | None = None
    header_rules: int | None = None  # rules in `_headers`
    header_line_chars: int | None = None  # characters in one line of `_headers`


@dataclass(frozen=True)
class Host:
    name: str
    title: str
    files: tuple[str, ...]  # what the host reads beside the site (HOST_FILES)
    limits: Limits
    deploy: str  # the command that deploys DIST ({dist}); <...> are the user's names


HOSTS: dict[str, Host] = {
    host.name: host
    for host in (
        Host(
            "generic",
            "any static host",
            (HEADERS_FILE,),
            Limits(),
            "copy {dist}/ to the host, index.html and coi-sw.js last",
        ),
        Host(
            "cloudflare",
            "Cloudflare Pages",
            (HEADERS_FILE,),
            Limits(file_bytes=25 * MIB, files=20_000, header_rules=100, header_line_chars=2_000),
            "npx wrangler pages deploy {dist} --project-name <project>",
        ),
        Host(
            "netlify",
            "Netlify",
            (HEADERS_FILE,),
            Limits(files_per_folder=54_000),
            "npx netlify-cli deploy --dir {dist} --prod",
        ),
        Host(
            "github-pages",
            "GitHub Pages",
            (NOJEKYLL,),
            Limits(file_bytes=100 * MIB, site_bytes=1 * GB),
            "npx gh-pages --dist {dist} --dotfiles",
        ),
        Host(
            "hf-space",
            "a Hugging Face static Space",
            (SPACE_README,),
            Limits(files_per_folder=10_000, files=100_000),
            'hf upload <user>/<space> {dist} . --repo-type space --delete "assets/*"',
        ),
        Host(
            "vercel",
            "Vercel",
            (VERCEL_JSON,),
            Limits(site_bytes=100 * 10**6),
            "npx vercel deploy {dist} --prod",
        ),
    )
}


def host_named(name: str) -> Host:
    if name not in HOSTS:
        raise BuildError(f"--host {name!r}: not a host this build knows; use one of {', '.join(HOSTS)}.")
    return HOSTS[name]


# ---------------------------------------------------------------------------------------------- what hosts read


def headers_text(rules: HeaderRules) -> str:
    """`_headers` (Netlify / Cloudflare Pages): one block per rule, `/prefix/*` matching everything under it."""
    lines: list[str] = []
    for prefix, headers in rules:
        lines.append(prefix + "*")
        lines += [f"  {name}: {value}" for name, value in headers.items()]
        lines.append("")
    return "\n".join(lines)


def vercel_json(rules: HeaderRules) -> str:
    """`vercel.json`'s `headers`: `source` in path-to-regexp syntax, `/prefix/(.*)` matching everything under it."""
    entries = [
        {"source": prefix + "(.*)", "headers": [{"key": name, "value": value} for name, value in headers.items()]}
        for prefix, headers in rules
    ]
    return json.dumps({"headers": entries}, indent=2) + "\n"


def space_readme(rules: HeaderRules) -> str:
    """A static Space's README.md: front matter the Space reads (`sdk: static`, the page, the isolation headers it
    allows, lowercase), then a line for people. A Space sets no other header: the CSP is the page's meta tag."""
    every_path = next((headers for prefix, headers in rules if prefix == "/"), {})
    allowed = {name.lower(): value.lower() for name, value in every_path.items() if name.lower() in SPACE_HEADERS}
    lines = [
        "---",
        "title: klein-web",
        "emoji: 🎨",
        "colorFrom: indigo",
        "colorTo: pink",
        "sdk: static",
        "app_file: index.html",
        "pinned: false",
        "custom_headers:",
        *(f"  {name}: {value}" for name, value in sorted(allowed.items())),
        "---",
        "",
        "FLUX.2 [klein] text-to-image that runs in your browser, on WebGPU, built by `klein-web build --host hf-space`.",
        "Open the Space at its own address (`https://<user>-<space>.static.hf.space`): there the page is",
        "cross-origin isolated and onnxruntime-web runs its threads.",
        "",
    ]
    return "\n".join(lines)


def write_host_files(site: Path, host: Host, rules: HeaderRules) -> None:
    """The files `host` reads, into the built site."""
    writers: dict[str, Callable[[HeaderRules], str]] = {
        HEADERS_FILE: headers_text,
        NOJEKYLL: lambda _rules: "",  # its presence is the message: serve files starting with `_` as they are
        SPACE_README: space_readme,
        VERCEL_JSON: vercel_json,
    }
    for name in host.files:
        (site / name).write_text(writers[name](rules), encoding="utf-8")


# ---------------------------------------------------------------------------------------------- limits


def size_text(size: int, limit: int) -> str:
    """`size` in the unit `limit` is a round number of (GB, MiB or MB), so the two compare at a glance."""
    unit, name = (GB, "GB") if limit % GB == 0 else (MIB, "MiB") if limit % MIB == 0 else (10**6, "MB")
    return f"{size / unit:.1f} {name}" if size % unit else f"{size // unit} {name}"


def check_limits(site: Path, host: Host) -> None:
    """Refuse, in one line, a site that `host` would not deploy (the first of its limits the site is over)."""
    sizes = {p: p.stat().st_size for p in sorted(site.rglob("*")) if p.is_file()}
    limits = host.limits
    if limits.file_bytes is not None:
        largest, size = max(sizes.items(), key=lambda item: item[1])
        if size > limits.file_bytes:
            what = f"{largest.relative_to(site).as_posix()} is {size:,} bytes ({size_text(size, limits.file_bytes)})"
            raise over(host, what, f"{size_text(limits.file_bytes, limits.file_bytes)} per file")
    if limits.files is not None and len(sizes) > limits.files:
        raise over(host, f"the site has {len(sizes):,} files", f"{limits.files:,} files")
    total = sum(sizes.values())
    if limits.site_bytes is not None and total > limits.site_bytes:
        limit = limits.site_bytes
        raise over(
            host, f"the site is {total:,} bytes ({size_text(total, limit)})", f"{size_text(limit, limit)} per site"
        )
    if limits.files_per_folder is not None:
        per_folder: dict[Path, int] = {}
        for path in sizes:
            per_folder[path.parent] = per_folder.get(path.parent, 0) + 1
        folder, count = max(per_folder.items(), key=lambda item: item[1])
        if count > limits.files_per_folder:
            where = folder.relative_to(site).as_posix()
            raise over(host, f"{where}/ holds {count:,} files", f"{limits.files_per_folder:,} files per folder")
    if HEADERS_FILE in host.files:
        lines = (site / HEADERS_FILE).read_text(encoding="utf-8").splitlines()
        rules = sum(1 for line in lines if line and not line[0].isspace() and not line.startswith("#"))
        if limits.header_rules is not None and rules > limits.header_rules:
            raise over(host, f"{HEADERS_FILE} has {rules} rules", f"{limits.header_rules} rules")
        longest = max((len(line) for line in lines), default=0)
        if limits.header_line_chars is not None and longest > limits.header_line_chars:
            what = f"a line of {HEADERS_FILE} has {longest:,} characters"
            raise over(host, what, f"{limits.header_line_chars:,} characters per line")


def over(host: Host, what: str, limit: str) -> BuildError:
    return BuildError(
        f"--host {host.name}: {what}, and {host.title} takes at most {limit}; nothing was written "
        "(docs/deploying.md#hosts lists each host's limits)."
    )


def deploy_command(host: Host, dist: Path) -> str:
    return host.deploy.format(dist=dist)
