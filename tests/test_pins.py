"""constraints-test.txt pins the whole test environment, and scripts/test.sh installs from it.

A test dependency added to pyproject.toml without its pin would come in at whatever version is newest on the day:
the suite would again depend on the day it is installed."""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from builder import REPO_ROOT

CONSTRAINTS = REPO_ROOT / "constraints-test.txt"


def pins() -> dict[str, Version]:
    found: dict[str, Version] = {}
    for line in (raw.strip() for raw in CONSTRAINTS.read_text().splitlines()):
        if not line or line.startswith("#"):
            continue
        name, _, version = line.partition("==")
        assert version and re.fullmatch(r"[A-Za-z0-9_.-]+", name), f"not a `name==version` pin: {line!r}"
        key = canonicalize_name(name)
        assert key not in found, f"{name} is pinned twice"
        found[key] = Version(version)
    return found


def declared() -> list[Requirement]:
    """klein-web's own dependencies and its `test` extra, which pulls in the `convert` extra."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    names = [*project["dependencies"], *extras["test"], *extras["convert"]]
    return [req for req in map(Requirement, names) if canonicalize_name(req.name) != "klein-web"]


def test_every_declared_dependency_is_pinned_within_its_range() -> None:
    pinned = pins()
    assert len(pinned) > 40, "the whole environment is pinned, the dependencies of the dependencies too"
    for requirement in declared():
        key = canonicalize_name(requirement.name)
        assert key in pinned, f"{requirement.name} is a dependency but has no pin in {CONSTRAINTS.name}"
        assert requirement.specifier.contains(pinned[key], prereleases=True), (
            f"{CONSTRAINTS.name} pins {requirement.name}=={pinned[key]}, outside pyproject.toml's {requirement}"
        )
    # scripts/test.sh installs torch on its own first: the same version.
    script = (REPO_ROOT / "scripts" / "test.sh").read_text()
    torch = re.search(r"torch==([\w.]+)", script)
    assert torch and Version(torch.group(1)) == pinned["torch"], "scripts/test.sh and the pins name different torch"


def test_the_test_script_installs_from_the_pins_into_a_venv_of_its_own() -> None:
    script = (REPO_ROOT / "scripts" / "test.sh").read_text()
    installs = [line for line in script.splitlines() if re.search(r"-m pip install\b", line)]
    assert len(installs) >= 2 and all("-c constraints-test.txt" in line for line in installs), installs
    assert all(line.strip().startswith('"$VPY"') for line in installs), "pip of the test venv, not of the machine"
    assert '-m venv "$VENV"' in script and re.search(r'exec "\$VPY" -m pytest --full\b', script)
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert "bash scripts/test.sh" in ci
