"""The exception hierarchy: raised at the source, turned into exit codes only by the command line (cli/)."""

from __future__ import annotations


class KleinWebError(Exception):
    """Base class. The message says what went wrong and what to do about it."""


class BuildError(KleinWebError):
    """Bundling the web app failed (npm, esbuild, template)."""


class ServeError(KleinWebError):
    """The dev server cannot start with the given options."""


class ModelRepoError(KleinWebError):
    """A model repository is missing files, has wrong sizes or an unreadable manifest."""


class ConversionError(KleinWebError):
    """Converting a diffusers checkpoint to the ONNX web layout failed."""


class FetchError(KleinWebError):
    """Downloading a model repository from the Hub failed."""


class InputError(KleinWebError):
    """A user-supplied parameter (size, steps, prompt, path) is invalid."""


class BenchError(KleinWebError):
    """The benchmark cannot run with the given options or environment."""


class RegressionError(KleinWebError):
    """A browser regression run could not be carried out (exit code 2)."""


class OutputError(KleinWebError):
    """A result cannot be written where asked (a folder, a device, a symlink, no permission)."""


class KernelLabError(KleinWebError):
    """The kernel lab could not run (no lab build, no browser, the page failed): exit code 2."""
