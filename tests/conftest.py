"""Shared test helpers."""

from __future__ import annotations

import os

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"


def require(available: bool, reason: str) -> None:
    """Skip when a tool the test needs is missing; under CI=true its absence fails."""
    if available:
        return
    if IN_CI:
        pytest.fail(f"required in CI: {reason}")
    pytest.skip(reason)
