"""The `context` and `page` fixtures of the worker-level browser tests (tests/browser/test_worker.py,
test_store_trust.py, test_editing.py): one Chromium profile per test module, a fresh page per test.

Registered for the whole suite by tests/conftest.py (`pytest_plugins`); a module that needs another browser setup
(test_ui.py, test_editing_ui.py) defines its own fixtures of these names, which take precedence.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="module")
def context(profile_dir: Path, chromium_path: Path) -> Iterator[Any]:
    from helpers import browser_context  # tests/browser/helpers.py, importable once a browser test is collected

    with browser_context(profile_dir, chromium_path) as ctx:
        yield ctx


@pytest.fixture
def page(context: Any) -> Iterator[Any]:
    from helpers import new_page

    page = new_page(context)
    yield page
    page.close()
