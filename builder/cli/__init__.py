"""The `klein-web` command line: thin click commands that parse flags and call one function each.

One module per group of commands: `app` (build, serve), `model_repo` (convert, make-tiny, fetch), `reference`,
`regress` (regress, regress-merge), `bench` (bench, browser-bench, load-bench) and `kernel_lab`; `shared` holds what several of
them use. Implementations are imported inside each command so `klein-web serve --help` loads no ML library, and
KleinWebError is turned into a clean message and exit code in this package, and only here.
"""

from __future__ import annotations

import click

from builder import __version__
from builder.cli import app, bench, kernel_lab, model_repo, reference, regress
from builder.cli.shared import KleinGroup


@click.group(cls=KleinGroup)
@click.version_option(__version__, prog_name="klein-web")
def main() -> None:
    """Build, serve and test the FLUX.2 [klein] in-browser app (WebGPU + onnxruntime-web)."""


for command in (
    app.build,
    app.serve,
    model_repo.convert,
    model_repo.make_tiny,
    model_repo.fetch,
    reference.reference,
    regress.regress,
    regress.regress_merge,
    bench.browser_bench,
    bench.load_bench,
    bench.bench,
    kernel_lab.kernel_lab,
):
    main.add_command(command)
