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
from builder.repo.files import disk_problem
from builder.terminal import printable


def log(message: str) -> None:
    """Progress and status lines go to stderr, so stdout stays clean for results. They carry text from elsewhere
    (reports, servers, the browser): its control characters are shown escaped, never obeyed by the terminal."""
    click.echo(printable(message), err=True)


def error_line(exc: BaseException) -> str | None:
    """The message of an error a user can act on: a KleinWebError's, or a full disk's or the file-size limit's
    wherever a write met it; None for any other error (a bug: its traceback is wanted)."""
    if isinstance(exc, KleinWebError):
        return printable(str(exc))
    if isinstance(exc, OSError) and disk_problem(exc) is not None:
        where = exc.filename2 or exc.filename or "a file"
        return printable(
            f"Cannot write {where}: {disk_problem(exc)}. Free some space or raise the limit, then run the command again."
        )
    return None


class KleinGroup(click.Group):
    """Turns KleinWebError (and a full disk) into `Error: ...` and exit code 1, without a traceback."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except (KleinWebError, OSError) as exc:
            line = error_line(exc)
            if line is None:
                raise
            raise click.ClickException(line) from exc


@contextmanager
def exit_2_on_error(doing: str) -> Iterator[None]:
    """A KleinWebError becomes one line `could not DOING: ...` and exit code 2, told apart from a check's 1 (fail)."""
    try:
        yield
    except (KleinWebError, OSError) as exc:
        line = error_line(exc)
        if line is None:
            raise
        click.echo(f"could not {doing}: {line}", err=True)
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
