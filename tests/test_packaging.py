"""The package list in pyproject.toml is explicit: a folder left out imports fine from an
editable install but is silently missing from the wheel. These tests catch that."""

from __future__ import annotations

import ast
import importlib
import os
import tomllib
from importlib.metadata import distribution
from pathlib import Path

import lavin
import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
PLUGIN_BASES = {"lavin.exchanges": "ExchangeType", "lavin.queues": "MessageStore",
                "lavin.auth": "AuthBackend"}  # fmt: skip


def pyproject() -> dict:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())


def package_folders(source_root: Path, package: str) -> set[str]:
    """Dotted names of every folder under source_root that holds .py files."""
    names = set()
    for folder in [source_root, *source_root.rglob("*")]:
        if folder.is_dir() and folder.name != "__pycache__" and any(folder.glob("*.py")):
            relative = folder.relative_to(source_root).parts
            names.add(".".join((package, *relative)))
    return names


def test_every_package_folder_is_listed() -> None:
    setuptools_table = pyproject()["tool"]["setuptools"]
    listed = set(setuptools_table["packages"])
    found = set()
    for package, folder in setuptools_table["package-dir"].items():
        found |= package_folders(REPO_ROOT / folder, package)
    assert found - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"


def test_every_web_ui_file_is_package_data() -> None:
    """The UI's pages, scripts and styles are no modules: only package-data ships them."""
    setuptools_table = pyproject()["tool"]["setuptools"]
    patterns = setuptools_table["package-data"]["lavin.management"]
    ui_dir = REPO_ROOT / "core" / "management" / "ui"
    files = [path.relative_to(ui_dir.parent) for path in ui_dir.rglob("*") if path.is_file()]
    assert files, ui_dir
    assert [path for path in files if not any(path.match(pattern) for pattern in patterns)] == []


@pytest.mark.skipif(not os.environ.get("LAVIN_TEST_EXPECT_INSTALLED"), reason="only for `make test-installed`")
def test_the_web_ui_is_installed() -> None:
    import lavin.management

    installed = Path(lavin.management.__file__).resolve().parent / "ui"
    for path in (REPO_ROOT / "core" / "management" / "ui").rglob("*"):
        if path.is_file():
            assert (installed / path.relative_to(REPO_ROOT / "core" / "management" / "ui")).is_file(), path


def test_every_entry_point_loads_and_names_match() -> None:
    from lavin import api

    entry_points = distribution("lavin").entry_points
    assert entry_points, "the lavin distribution declares no entry points"
    for entry_point in entry_points:
        loaded = entry_point.load()
        base_name = PLUGIN_BASES.get(entry_point.group)
        if base_name is not None:
            assert issubclass(loaded, getattr(api, base_name)), entry_point
            assert loaded.name == entry_point.name, entry_point
        elif entry_point.group == "pytest11":
            assert {"lavin_broker", "lavin_url"} <= set(dir(loaded)), entry_point  # the fixtures it provides
        else:
            assert callable(loaded), entry_point


@pytest.mark.skipif(not os.environ.get("LAVIN_TEST_EXPECT_INSTALLED"), reason="only for `make test-installed`")
def test_lavin_is_imported_from_site_packages() -> None:
    package_dir = Path(lavin.__file__).resolve().parent
    assert not package_dir.is_relative_to(REPO_ROOT / "core"), package_dir
    assert "site-packages" in package_dir.parts, package_dir


@pytest.mark.skipif(not os.environ.get("LAVIN_TEST_EXPECT_INSTALLED"), reason="only for `make test-installed`")
def test_hot_modules_are_compiled_in_a_regular_install() -> None:
    """setup.py compiles them with mypyc; a silent fall back to pure Python would make
    the suite of the regular install test the same code as the editable one."""
    setup_tree = ast.parse((REPO_ROOT / "setup.py").read_text())
    hot = next(
        ast.literal_eval(node.value)
        for node in setup_tree.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "HOT_MODULES"
    )
    modules = ["lavin." + path.removesuffix(".py").replace("/", ".") for path in hot]
    assert "lavin.amqp.connection" in modules, modules
    for name in modules:
        origin = importlib.import_module(name).__file__ or ""
        assert origin.endswith(".so"), f"{name} is not compiled: {origin}"
