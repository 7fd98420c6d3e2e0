"""What can be checked of the pipeline image here (no Docker engine): ``Dockerfile.pipeline``
copies every package the project installs, and its ENTRYPOINT/CMD and the compose services'
commands are ones ``python -m kgroupd.pipeline`` and ``python -m kgroupd.pipeline.demo_producer``
accept."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

from kgroupd.pipeline.__main__ import parse
from tests.support.dockerignore import DockerIgnore

ROOT = Path(__file__).resolve().parents[2]


def dockerfile() -> tuple[set[str], list[str], list[str]]:
    """(paths the image copies, ENTRYPOINT, CMD) of Dockerfile.pipeline."""
    copies: set[str] = set()
    entrypoint: list[str] = []
    cmd: list[str] = []
    text = (ROOT / "Dockerfile.pipeline").read_text().replace("\\\n", " ")
    for line in text.splitlines():
        word, _, rest = line.strip().partition(" ")
        if word == "COPY":
            copies.update(shlex.split(rest)[:-1])
        elif word == "ENTRYPOINT":
            entrypoint = json.loads(rest)
        elif word == "CMD":
            cmd = json.loads(rest)
    return copies, entrypoint, cmd


def test_the_image_copies_every_installed_package() -> None:
    copies, _, _ = dockerfile()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = set(pyproject["tool"]["setuptools"]["package-dir"].values())
    assert "pipeline" in packages
    assert packages | {"pyproject.toml", "README.md"} <= copies


def test_the_build_context_lets_in_what_the_image_copies() -> None:
    """.dockerignore (which keeps data, output and certificate folders out of the build
    context: tests/integration/test_packaging.py) leaves out nothing this image COPYs."""
    copies, _, _ = dockerfile()
    ignore = DockerIgnore(ROOT / ".dockerignore")
    assert ignore.kept_out(ROOT, sorted(copies)) == []
    assert ignore.ignored("pipeline-out/window_counts/part-0.parquet")


def test_the_image_command_runs() -> None:
    _, entrypoint, cmd = dockerfile()
    assert entrypoint[:2] == ["python", "-m"]
    done = subprocess.run(
        [sys.executable, *entrypoint[1:], *cmd], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "--bootstrap-server" in done.stdout


def compose_command(service: str) -> list[str]:
    """The ``command:`` list of a compose service (block or flow style), read as text."""
    text = (ROOT / "docker-compose.yml").read_text()
    block = re.search(rf"^  {service}:\n((?:    .*\n|\n)+)", text, re.M)
    assert block is not None, service
    body = block.group(1)
    flow = re.search(r"^    command: (\[.*\])$", body, re.M)
    if flow:
        return list(json.loads(flow.group(1)))
    items = re.search(r"^    command:\n((?:      - .*\n)+)", body, re.M)
    assert items is not None, f"{service} has no command"
    return [line.strip()[2:] for line in items.group(1).splitlines()]


def test_the_compose_services_pass_arguments_the_programs_accept() -> None:
    config, master = parse(compose_command("pipeline"))
    assert config.bootstrap_server == "kgroupd:9092" and master == "local[2]"
    done = subprocess.run(
        [sys.executable, "-m", "kgroupd.pipeline.demo_producer", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    accepted = set(re.findall(r"--[a-z-]+", done.stdout))
    given = {arg.split("=")[0] for arg in compose_command("demo-producer")}
    assert given <= accepted, given - accepted
