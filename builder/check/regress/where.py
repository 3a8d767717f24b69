"""Where a regress run's browser runs (launched here, or a Playwright browser server: --connect) and where it finds
the app (served here on --host/--port and reached at --advertise, or deployed: --app-url)."""

from __future__ import annotations

import ipaddress
import urllib.parse

from builder import urls
from builder.check.regress.cases import RegressOptions
from builder.errors import InputError

WILDCARDS = ("0.0.0.0", "::", "")


def is_loopback(host: str | None) -> bool:
    if host is None:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _http_url(value: str, flag: str) -> urllib.parse.SplitResult:
    """`value` split into its parts, or InputError saying what to give instead (never urlsplit's traceback)."""
    parts, problem = urls.split(value)
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(
            f"{flag} {value!r}{' ' + problem if problem else ''}: give an http:// or https:// address, e.g. "
            f"{flag} http://build-box:8123/."
        )
    return parts


def check(options: RegressOptions) -> None:
    """InputError, before anything starts, for a combination that cannot work, saying what to pass instead."""
    if options.connect is not None:
        endpoint, problem = urls.split(options.connect)
        if endpoint is None or endpoint.scheme not in ("ws", "wss") or not endpoint.hostname:
            raise InputError(
                f"--connect {options.connect!r}{' ' + problem if problem else ''}: give the ws:// address a "
                "Playwright browser server prints (`playwright launch-server`, docs/regress.md), e.g. --connect "
                "ws://gpu-box:3000/0123abcd."
            )
        launch_flags = [
            flag
            for flag, given in (
                ("--profile", options.profile is not None),
                ("--browser", options.browser_path is not None),
                ("--headed", options.headed),
                ("--no-f16-toggle", not options.f16_toggle),
            )
            if given
        ]
        if launch_flags:
            raise InputError(
                f"{', '.join(launch_flags)} choose how Chromium is launched here; with --connect the "
                "browser server launched it (a browser server opens only new in-memory contexts, so "
                "no profile persists). Set them where the server is started, and leave them out."
            )
    if options.app_url is not None:
        _http_url(options.app_url, "--app-url")
        served = [
            flag
            for flag, given in (
                ("--dist", options.dist_dir is not None),
                ("--host", options.host != "127.0.0.1"),
                ("--port", options.port != 0),
                ("--advertise", options.advertise is not None),
            )
            if given
        ]
        if served:
            raise InputError(
                f"--app-url opens a deployed app, so nothing is served here: leave out {', '.join(served)}."
            )
        return
    if options.advertise is not None:
        _http_url(options.advertise, "--advertise")
    remote = options.connect is not None and not is_loopback(urllib.parse.urlsplit(options.connect).hostname)
    advertised = urllib.parse.urlsplit(options.advertise).hostname if options.advertise else options.host
    if remote and (advertised in WILDCARDS or is_loopback(advertised)):
        raise InputError(
            f"--connect {urllib.parse.urlsplit(options.connect or '').netloc}: that browser runs on another machine, "
            f"where {advertised or 'this address'} is not this one. Serve on an address it can reach (--host 0.0.0.0 "
            "--port 8123 --advertise http://THIS-MACHINE:8123/, or a tunnel and --advertise http://localhost:PORT/), "
            "or open a deployed app with --app-url (docs/regress.md)."
        )


def page_url(app: str, path: str) -> str:
    """The app at `app` (an origin, or a deployed app's address with its own query, e.g. ?model=) opened with the
    query of the case's `path` ("/" or "/?precision=q4"): the case's parameters join the app's own."""
    base = urllib.parse.urlsplit(app)
    own = urllib.parse.parse_qsl(base.query, keep_blank_values=True)
    added = urllib.parse.parse_qsl(urllib.parse.urlsplit(path).query, keep_blank_values=True)
    names = {name for name, _ in added}
    query = urllib.parse.urlencode([(k, v) for k, v in own if k not in names] + added, safe=":/")
    return urllib.parse.urlunsplit((base.scheme, base.netloc, base.path or "/", query, base.fragment))
