"""CI runs the README's own test command: the last command of `.ci/run` is the second quick-start block."""

from __future__ import annotations

import re

from builder import REPO_ROOT


def quick_start_commands() -> list[str]:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", section, re.DOTALL)]


def test_ci_runs_the_readmes_test_command() -> None:
    commands = quick_start_commands()
    assert len(commands) == 2, commands  # one installs and serves, one installs the test needs and runs the suite
    lines = [line.strip() for line in (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    run = [line for line in lines if line and not line.startswith("#")]
    assert run[-1] == commands[1], (run[-1], commands[1])
