"""A loopback stand-in for each static host `klein-web build --host` writes for: the built folder served as plain
files, with the response headers that host would add, read from the files that host reads, the way its docs say it
reads them (docs/deploying.md#hosts):

    cloudflare, netlify, generic   `_headers`: every rule whose path pattern matches applies (one `*` splat each);
                                   a header two matching rules set is joined with ", "
    vercel                         `vercel.json` `headers`: every entry whose `source` (path-to-regexp) matches applies;
                                   a later entry's header replaces an earlier one's
    hf-space                       README.md front matter `custom_headers`: on every response, only the
                                   cross-origin-* headers a Space allows
    github-pages                   no headers at all

The host's configuration files themselves are not served. `models` mounts a model folder at /models/ as plain files
too (a model repository put beside the site). Every request is recorded as (method, path).
"""

from __future__ import annotations

import json
import mimetypes
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from huggingface_hub import metadata_load

SPACE_HEADERS = ("cross-origin-embedder-policy", "cross-origin-opener-policy", "cross-origin-resource-policy")
# What each host reads for its headers; github-pages reads nothing.
CONFIG_FILES = {
    "generic": "_headers",
    "cloudflare": "_headers",
    "netlify": "_headers",
    "vercel": "vercel.json",
    "hf-space": "README.md",
    "github-pages": None,
}
TYPES = {".mjs": "text/javascript", ".js": "text/javascript", ".wasm": "application/wasm", ".json": "application/json"}

Rule = tuple[re.Pattern[str], list[tuple[str, str]]]


def splat_pattern(path: str) -> re.Pattern[str]:
    """A `_headers` path: literal, with at most one `*` matching anything (Cloudflare and Netlify alike)."""
    if path.count("*") > 1:
        raise ValueError(f"_headers path {path!r}: one splat at most")
    return re.compile("^" + ".*".join(re.escape(piece) for piece in path.split("*")) + "$")


def headers_rules(path: Path) -> list[Rule]:
    rules: list[Rule] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line[0].isspace():
            rules.append((splat_pattern(line.strip()), []))
        else:
            name, _, value = line.strip().partition(":")
            if not rules or not value:
                raise ValueError(f"_headers line {line!r} is not `  Name: value` under a path")
            rules[-1][1].append((name.strip(), value.strip()))
    return rules


def path_to_regexp(source: str) -> re.Pattern[str]:
    """The part of path-to-regexp a `vercel.json` source of plain segments and `(regex)` groups uses."""
    if ":" in source:
        raise ValueError(f"vercel.json source {source!r}: named parameters are not read here")
    return re.compile("^" + source + "$")


def vercel_rules(path: Path) -> list[Rule]:
    return [
        (path_to_regexp(entry["source"]), [(item["key"], item["value"]) for item in entry["headers"]])
        for entry in json.loads(path.read_text(encoding="utf-8")).get("headers", [])
    ]


def space_rules(readme: Path) -> list[Rule]:
    """The front matter as huggingface_hub reads a card's."""
    meta = metadata_load(readme) or {}
    if meta.get("sdk") != "static":
        raise ValueError(f"README.md front matter: sdk is {meta.get('sdk')!r}, not static")
    custom = meta.get("custom_headers") or {}
    refused = [name for name in custom if name not in SPACE_HEADERS]
    if refused:
        raise ValueError(f"custom_headers {refused}: a Space sets only {SPACE_HEADERS}, lowercase")
    return [(re.compile(".*"), [(str(name), str(value)) for name, value in custom.items()])]


@dataclass
class HostSite:
    host: str
    root: Path
    models: Path | None = None
    requests: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        config = CONFIG_FILES[self.host]
        if config is None:
            self.rules: list[Rule] = []
            return
        read = {"_headers": headers_rules, "vercel.json": vercel_rules, "README.md": space_rules}[config]
        self.rules = read(self.root / config)

    def headers(self, path: str) -> list[tuple[str, str]]:
        """The headers this host adds to a response for `path`, in order."""
        merged: dict[str, tuple[str, str]] = {}
        for pattern, headers in self.rules:
            if not pattern.match(path):
                continue
            for name, value in headers:
                key = name.lower()
                if key in merged and self.host in ("generic", "cloudflare", "netlify"):
                    merged[key] = (merged[key][0], f"{merged[key][1]}, {value}")
                else:
                    merged[key] = (name, value)
        return list(merged.values())

    def file(self, path: str) -> Path | None:
        """The file a request path names: / is index.html; /models/... the model folder; None when there is none."""
        relative = unquote(path).lstrip("/") or "index.html"
        root = self.root
        if self.models is not None and relative.startswith("models/"):
            root, relative = self.models, relative.removeprefix("models/")
        elif relative == CONFIG_FILES[self.host]:
            return None
        target = (root / relative).resolve()
        if root.resolve() not in target.parents or not target.is_file():
            return None
        return target


def handler_for(site: HostSite) -> type[SimpleHTTPRequestHandler]:
    class Handler(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self.answer(body=True)

        def do_HEAD(self) -> None:
            self.answer(body=False)

        def answer(self, *, body: bool) -> None:
            path = urlsplit(self.path).path
            site.requests.append((self.command, path))
            target = site.file(path)
            data = target.read_bytes() if target is not None else b"not found\n"
            self.send_response(200 if target is not None else 404)
            content_type = TYPES.get(target.suffix) if target is not None else "text/plain"
            if target is not None and content_type is None:
                content_type = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
            self.send_header("Content-Type", str(content_type))
            self.send_header("Content-Length", str(len(data)))
            for name, value in site.headers(path):
                self.send_header(name, value)
            self.end_headers()
            if body:
                self.wfile.write(data)

    return Handler


@contextmanager
def serve_host(host: str, root: Path, *, models: Path | None = None) -> Iterator[tuple[str, HostSite]]:
    """Serve `root` as `host` would on a free loopback port; yields the base URL and the site (its requests)."""
    site = HostSite(host, root, models)
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(site))
    thread = threading.Thread(target=server.serve_forever, name=f"host-{host}", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", site
    finally:
        server.shutdown()
        server.server_close()
