"""`build` and `serve`: the app."""

from __future__ import annotations

from pathlib import Path

import click

from builder import DEFAULT_DIST, DEFAULT_MODEL_BASE
from builder.cli.shared import log
from builder.site.hosts import HOSTS


@click.command()
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=DEFAULT_DIST, show_default=True)
@click.option(
    "--model-base", default=DEFAULT_MODEL_BASE, show_default=True, help="URL the app downloads the model from."
)
@click.option(
    "--onnxruntime-web",
    "onnxruntime_web",
    default=None,
    metavar="VERSION",
    help="Build with this onnxruntime-web version instead of the pinned one (installed on first use into "
    "web_src/.onnxruntime-web/), to time two versions against each other.",
)
@click.option(
    "--host",
    "host",
    type=click.Choice(list(HOSTS)),
    default="generic",
    show_default=True,
    help="The static host to deploy to: writes what it reads (headers file, vercel.json, a Space's README.md, "
    ".nojekyll), refuses a site over its limits and prints the command that deploys it.",
)
def build(out_dir: Path, model_base: str, onnxruntime_web: str | None, host: str) -> None:
    """Bundle web_src/ into a static site in OUT (a no-op when nothing changed).

    OUT must be new, empty or a site klein-web built (its .klein-web-build marker or build record); any other
    folder is refused before anything is written.
    """
    from builder.site import bundle, hosts

    result = bundle.build(out_dir, model_base=model_base, log=log, onnxruntime_web=onnxruntime_web, host=host)
    state = "built" if result.changed else "up to date"
    log(f"{out_dir}: {state} in {result.seconds:.2f} s")
    site_host = hosts.host_named(host)
    log(f"deploy to {site_host.title}: {hosts.deploy_command(site_host, out_dir)}")


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option(
    "--port", default=8000, show_default=True, type=click.IntRange(0, 65535), help="TCP port (0: any free port)."
)
@click.option(
    "--models",
    "models_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Local model repository to mount at /models/ (the app then loads from it).",
)
@click.option("--dist", "dist_dir", type=click.Path(path_type=Path), default=DEFAULT_DIST, show_default=True)
@click.option(
    "--model-base",
    default=None,
    help=f"Model URL baked into a build [default: the one DIST was built with, else {DEFAULT_MODEL_BASE}]",
)
@click.option("--open", "open_browser", is_flag=True, help="Open the app in the default browser.")
@click.option("--watch", is_flag=True, help="Rebuild when web_src/ changes.")
def serve(
    host: str,
    port: int,
    models_dir: Path | None,
    dist_dir: Path,
    model_base: str | None,
    open_browser: bool,
    watch: bool,
) -> None:
    """Build if stale, then serve the app with the headers WebGPU + threads need.

    A --models folder without manifest.json gets one built from its files, rebuilt whenever a file there changes
    (size, times, inode); a folder no longer complete is answered with 503 and the reason. A connection that sends
    no complete request head within 10 s is closed; connections are capped below the open-file limit (the oldest
    waiting one makes room), each condition logged once.
    """
    from builder.site import server

    server.serve(
        dist_dir,
        host=host,
        port=port,
        models_dir=models_dir,
        model_base=model_base,
        open_browser=open_browser,
        watch=watch,
        log=log,
    )
