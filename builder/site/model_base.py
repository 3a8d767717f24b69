"""`--model-base`: where a build's app downloads the model from, checked at build time, and the CSP that allows it.

The base is baked into the page and its Content-Security-Policy, so a base the app could never download from is
refused when the site is built, not found out by a visitor: a scheme-relative `//host/` (the CSP would name no
host), credentials (`https://user:pw@host/`: browsers refuse to fetch such URLs), a port that does not exist, a host
a CSP source cannot name (a comma, an underscore, non-ASCII), a query or a fragment (file paths are appended to
the base).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from builder import DEFAULT_MODEL_BASE, urls
from builder.errors import BuildError

# The Hub answers /resolve/ URLs of large files with a redirect to a storage subdomain (cas-bridge.xethub.hf.co,
# cdn-lfs.hf.co, ...), so a model base on the Hub needs all of these in connect-src.
HUB_HOSTS = ("huggingface.co", "hf.co")
HUB_CONNECT_SOURCES = ("https://huggingface.co", "https://*.huggingface.co", "https://hf.co", "https://*.hf.co")


def check_model_base(model_base: str) -> str:
    """An absolute http(s) URL or a site-relative folder, ending in `/` (the app appends file paths to it), that
    the app can download from."""
    if any(ch in model_base for ch in "\"'<> ;"):
        raise BuildError(
            f"--model-base {model_base!r} contains a quote, space, `;` or angle bracket; percent-encode it."
        )
    parts, problem = urls.split(model_base)
    if parts is None:
        raise BuildError(f"--model-base {model_base!r} {problem}; give e.g. {DEFAULT_MODEL_BASE}.")
    if parts.scheme not in ("", "http", "https") or (parts.scheme and not parts.netloc):
        raise BuildError(
            f"--model-base {model_base!r}: expected an http(s) URL such as {DEFAULT_MODEL_BASE} "
            "or a folder relative to the site such as models/."
        )
    if not parts.scheme and model_base.startswith("//"):
        raise BuildError(
            f"--model-base {model_base!r} is a scheme-relative URL, which the page's CSP cannot allow; write its "
            f"scheme: https:{model_base}"
        )
    problem = urls.host_problem(parts) if parts.scheme else None
    if problem is not None:
        raise BuildError(f"--model-base {model_base!r} {problem}; the app could never download from it.")
    if "?" in model_base or "#" in model_base:
        raise BuildError(
            f"--model-base {model_base!r} has a query or a fragment (`?`, `#`): the app appends file paths to the "
            "base. Leave them out."
        )
    if not model_base.endswith("/"):
        raise BuildError(f"--model-base {model_base!r} must end with `/` (it is a folder); use {model_base + '/'!r}.")
    return model_base


def content_security_policy(model_base: str) -> str:
    """Exactly what onnxruntime-web and the app need: wasm compilation, same-origin workers, model downloads."""
    connect = ["'self'"]
    parts = urlsplit(model_base)
    if parts.scheme:
        connect.append(f"{parts.scheme}://{parts.netloc}")
        host = (parts.hostname or "").lower()
        if any(host == hub or host.endswith("." + hub) for hub in HUB_HOSTS):
            connect.extend(HUB_CONNECT_SOURCES)
    connect = list(dict.fromkeys(connect))  # drop duplicates, keep order
    directives = [
        "default-src 'self'",
        # 'wasm-unsafe-eval' lets onnxruntime-web compile its .wasm; no 'unsafe-eval', no inline script.
        "script-src 'self' 'wasm-unsafe-eval'",
        # The module worker, onnxruntime's pthread workers (its own .mjs) and coi-sw.js are all same-origin files
        # (default-src 'self' covers the web app manifest and the icons).
        "worker-src 'self'",
        f"connect-src {' '.join(connect)}",
        "img-src 'self' data: blob:",
        "style-src 'self'",
        "object-src 'none'",
        "base-uri 'self'",
    ]
    return "; ".join(directives)
