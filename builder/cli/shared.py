"""What several `klein-web` commands share: the progress log, the group that turns KleinWebError into `Error: ...`,
exit code 2 for a check that could not run, and the click options of the commands that drive Chromium (regress,
browser-bench, load-bench)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import click
from click.decorators import FC

from builder.errors import KleinWebError


def log(message: str) -> None:
    """Progress and status lines go to stderr, so stdout stays clean for results."""
    click.echo(message, err=True)


class KleinGroup(click.Group):
    """Turns KleinWebError into `Error: ...` and exit code 1, without a traceback."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except KleinWebError as exc:
            raise click.ClickException(str(exc)) from exc


@contextmanager
def exit_2_on_error(doing: str) -> Iterator[None]:
    """A KleinWebError becomes one line `could not DOING: ...` and exit code 2, told apart from a check's 1 (fail)."""
    try:
        yield
    except KleinWebError as exc:
        click.echo(f"could not {doing}: {exc}", err=True)
        sys.exit(2)


def browser_option(*, default: Path | None = None) -> Callable[[FC], FC]:
    return click.option("--browser", "browser_path", type=click.Path(path_type=Path), default=default)


def gpu_option(*, default: bool, text: str, show_default: bool = False) -> Callable[[FC], FC]:
    return click.option("--gpu/--software", default=default, show_default=show_default, help=text)


def dist_option(
    *, default: Path | None = None, text: str = "Serve this already-built app as it is; default: build dist/ if stale."
) -> Callable[[FC], FC]:
    return click.option("--dist", "dist_dir", type=click.Path(path_type=Path), default=default, help=text)


def f16_toggle_option(*, default: bool = True, note: str = "") -> Callable[[FC], FC]:
    """NOTE, when given, closes the help text in brackets."""
    return click.option(
        "--f16-toggle/--no-f16-toggle",
        default=default,
        show_default=True,
        help="Linux + NVIDIA: start Chromium with the Dawn toggle that exposes shader-f16"
        + (f" ({note})." if note else "."),
    )
