"""Shared fixtures of the Terraform tests: the repository's module paths and the provider schema."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.terraform.check import default_schema_path, load_schema

REPO = Path(__file__).resolve().parents[2]
MODULE_DIR = REPO / "terraform"
EXAMPLE_DIR = MODULE_DIR / "examples" / "complete"


@pytest.fixture(scope="session")
def schema() -> dict:
    path = default_schema_path()
    if not path.is_file():
        pytest.skip(f"provider schema not found at {path} (../shared/terraform next to the repository)")
    return load_schema(path)


@pytest.fixture(scope="session")
def module_dir() -> Path:
    return MODULE_DIR


@pytest.fixture(scope="session")
def example_dir() -> Path:
    return EXAMPLE_DIR
