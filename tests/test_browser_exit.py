"""When Chromium goes away mid-run, regress says why (its own log's FATAL line) instead of "target closed"."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from builder.check.driver.chromium import FONT_PACKAGES, exit_cause, font_problem
from builder.check.driver.session import BrowserSession, launched
from builder.check.regress.cases import Case
from builder.check.regress.page import CaseCouldNotRun, run_case
from builder.check.regress.report import AppRun

# The browser process's last lines on a GPU server without fonts (headless Chromium 156 on an H200 machine whose
# image had no /etc/fonts): it aborted when it first needed a fallback font, two minutes into a regress run.
NO_FONTS_LOG = """\
Fontconfig error: Cannot load default config file: No such file: (null)
[713:713:1201/163700.294248:ERROR:ui/gfx/platform_font_skia.cc:258] Could not find any font: , sans. Falling back to the default
[713:726:1201/163907.100810:FATAL:third_party/skia/src/ports/SkFontMgr_FontConfigInterface.cpp:163] Not implemented.
[1201/163907.127732:ERROR:third_party/crashpad/crashpad/util/linux/ptracer.cc:514] ptrace: No such process (3)
"""


def test_a_fatal_line_is_named_with_its_place_and_a_missing_font_with_the_fix() -> None:
    cause = exit_cause(NO_FONTS_LOG)
    assert "FATAL at third_party/skia/src/ports/SkFontMgr_FontConfigInterface.cpp:163: Not implemented." in cause
    assert f"apt-get install -y {FONT_PACKAGES}" in cause


def test_an_unknown_fatal_line_is_named_without_a_guessed_fix() -> None:
    log = "[1:2:1201/1.0:ERROR:a.cc:1] noise\n[1:2:1201/1.0:FATAL:gpu/ipc/service/x.cc:9] Check failed: size.\n"
    assert exit_cause(log) == "FATAL at gpu/ipc/service/x.cc:9: Check failed: size."


def test_a_log_without_fatal_says_the_browser_was_killed_from_outside() -> None:
    assert "killed from outside" in exit_cause("[1:2:1201/1.0:ERROR:a.cc:1] noise\n")


def test_a_linux_machine_without_fontconfig_configuration_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "no-fonts"
    problem = font_problem("linux", {}, system_dir=missing)
    assert problem is not None and "fonts.conf" in problem and FONT_PACKAGES in problem
    configured = tmp_path / "fonts"
    configured.mkdir()
    (configured / "fonts.conf").write_text("<fontconfig/>")
    assert font_problem("linux", {}, system_dir=configured) is None
    assert font_problem("linux", {"FONTCONFIG_PATH": str(configured)}, system_dir=missing) is None
    assert font_problem("linux", {"FONTCONFIG_FILE": str(configured / "fonts.conf")}, system_dir=missing) is None
    assert font_problem("darwin", {}, system_dir=missing) is None  # Chromium uses the system's fonts there


def _browser_pid(profile: Path) -> int:
    """The browser process of the Chromium using `profile` (not its renderers, GPU or utility processes)."""
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"--user-data-dir={profile}".encode() in argv and not any(a.startswith(b"--type=") for a in argv):
            return int(entry.name)
    raise AssertionError(f"no browser process with --user-data-dir={profile}")


@pytest.mark.browser
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the browser process through /proc")
def test_a_browser_killed_mid_run_fails_every_later_case_with_the_reason(chromium_path: Path, tmp_path: Path) -> None:
    session = BrowserSession(executable=chromium_path, gpu=False, headed=False)
    case = Case(name="c", prompt="a fox", seed=1, width=64, height=64, steps=1, psnr_min=40.0)
    profile = tmp_path / "profile"
    with launched(session, log=lambda _line: None, profile=profile):
        assert session.log_file is not None and not session.exited
        os.kill(_browser_pid(profile), signal.SIGKILL)
        deadline = time.monotonic() + 30
        while not session.exited and time.monotonic() < deadline:
            session.context.pages  # noqa: B018 - lets Playwright's connection deliver the close event
            time.sleep(0.1)
        for _ in range(2):  # the case that meets the dead browser, and one after it
            with pytest.raises(CaseCouldNotRun, match="Chromium exited during the run: its log has no FATAL line"):
                run_case(session, case, AppRun(), base_url="http://127.0.0.1:9", timeout_s=10, log=lambda _l: None)
        assert session.exited
    assert "--user-data-dir" not in session.log and session.log  # Chromium's own log was kept


def _renderers(browser_pid: int) -> list[int]:
    """The renderer processes below Chromium's browser process (its zygote's children)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [browser_pid]
    while todo:
        for pid in children.get(todo.pop(), []):
            todo.append(pid)
            try:
                if b"--type=renderer" in (Path("/proc") / str(pid) / "cmdline").read_bytes():
                    found.append(pid)
            except OSError:
                continue
    return found


@pytest.mark.browser
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the renderer processes through /proc")
def test_a_renderer_that_dies_mid_case_is_named_a_page_crash(chromium_path: Path, tmp_path: Path) -> None:
    """The page's renderer is killed while the case waits for the app (a page that never shows it): the case
    says the page crashed and where Chromium's log is, and the browser itself stays usable."""
    import functools
    import http.server
    import threading

    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("<!doctype html><title>never ready</title><p>no app here")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    session = BrowserSession(executable=chromium_path, gpu=False, headed=False)
    case = Case(name="c", prompt="a fox", seed=1, width=64, height=64, steps=1, psnr_min=40.0)
    profile = tmp_path / "profile"
    killed: list[int] = []

    def kill_renderers() -> None:
        time.sleep(2.0)
        for pid in _renderers(_browser_pid(profile)):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    try:
        with launched(session, log=lambda _line: None, profile=profile):
            threading.Thread(target=kill_renderers, daemon=True).start()
            with pytest.raises(CaseCouldNotRun, match=r"the page crashed .*browser\.log in the report folder"):
                run_case(
                    session,
                    case,
                    AppRun(),
                    base_url=f"http://127.0.0.1:{server.server_address[1]}",
                    timeout_s=30,
                    log=lambda _l: None,
                )
            assert killed and not session.exited  # a renderer died, not the browser
            page = session.context.new_page()  # and the browser still opens pages
            page.goto(f"http://127.0.0.1:{server.server_address[1]}/")
            assert page.title() == "never ready"
    finally:
        server.shutdown()
