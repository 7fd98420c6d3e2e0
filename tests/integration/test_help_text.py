"""``kgroupd --help`` prints argparse's help cached in kgroupd.broker.cli.help_text at its width
(issue 24: building the parser of every flag costs more than the rest of ``--help``). The
cache must be exactly what argparse renders; regenerate it with scripts/render-help."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from kgroupd.broker.cli import help_text
from kgroupd.broker.config.settings import build_parser


def _argparse_help(columns: int) -> str:
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(columns)
    try:
        return build_parser().format_help()
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved


def test_the_cached_help_is_argparses_at_its_width() -> None:
    if sys.version_info[:2] != help_text.PYTHON:
        # another Python's argparse may render differently: the cache is not used there
        assert help_text.cached_help() is None
        pytest.skip(f"the cache is Python {help_text.PYTHON}'s (run scripts/render-help there)")
    assert "".join(help_text.TEXT) == _argparse_help(help_text.WIDTH), (
        "a flag changed: run scripts/render-help"
    )


@pytest.mark.parametrize(
    "env",
    [{}, {"COLUMNS": "80"}, {"COLUMNS": "120"}, {"COLUMNS": "x"}, {"COLUMNS": "100", "LINES": "5"}],
)
def test_the_width_is_the_one_argparse_uses(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("COLUMNS", "LINES"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert help_text.terminal_columns() == shutil.get_terminal_size().columns


def _kgroupd_help(*args: str, columns: int) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KGROUPD_")}
    env["COLUMNS"] = str(columns)
    return subprocess.run(
        [sys.executable, "-m", "kgroupd.broker", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("columns", [80, 100])
def test_kgroupd_help_prints_the_tools_then_argparses_help(columns: int) -> None:
    from kgroupd.broker.cli.tools import TOOLS_HELP

    for flag in ("--help", "-h"):
        done = _kgroupd_help(flag, columns=columns)
        assert done.returncode == 0
        assert done.stderr == ""
        assert done.stdout == TOOLS_HELP + "\n" + _argparse_help(columns)
    # with other flags argparse reads them all (a bad one is still an error)
    done = _kgroupd_help("--port", "x", "--help", columns=columns)
    assert done.returncode == 2
    assert done.stderr.startswith("kgroupd: error: argument --port")
