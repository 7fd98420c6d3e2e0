"""The image's install steps, done for real in a fresh virtualenv (no Docker engine here).

The Dockerfile copies pyproject.toml, README.md and the three packages, runs
``pip install .`` and starts ``kgroupd`` with its ENV. This test parses the Dockerfile,
does the same in a new venv, and checks the installed broker starts and serves.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import sys
import venv
from pathlib import Path

from aiokafka import AIOKafkaProducer

ROOT = Path(__file__).resolve().parents[2]


def dockerfile() -> tuple[list[str], dict[str, str], list[str]]:
    """(paths the image copies, its ENV, its ENTRYPOINT)."""
    copies: list[str] = []
    env: dict[str, str] = {}
    entrypoint: list[str] = []
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    for line in text.splitlines():
        word, _, rest = line.strip().partition(" ")
        if word == "COPY":
            copies += shlex.split(rest)[:-1]
        elif word == "ENV":
            env.update(dict(re.findall(r"(\w+)=(\S+)", rest)))
        elif word == "ENTRYPOINT":
            entrypoint = json.loads(rest)
    return copies, env, entrypoint


def test_image_copies_every_package_the_project_installs() -> None:
    copies, env, entrypoint = dockerfile()
    for needed in ("pyproject.toml", "README.md", "broker", "protocol", "assignors"):
        assert needed in copies
    assert entrypoint == ["kgroupd"]
    assert env["KGROUPD_HOST"] == "0.0.0.0"
    assert env["KGROUPD_PORT"] == "9092"


async def test_fresh_install_runs_the_image_command(tmp_path: Path) -> None:
    copies, env, entrypoint = dockerfile()
    src = tmp_path / "app"
    src.mkdir()
    for name in copies:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, src / name)
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    pip = await asyncio.create_subprocess_exec(
        str(env_dir / "bin" / "python"),
        "-m",
        "pip",
        "install",
        "--quiet",
        str(src),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(pip.communicate(), 300)
    assert pip.returncode == 0, out.decode()
    # The image's ENV, but on loopback and a free port: this machine runs no containers.
    run_env = {**os.environ, **env, "KGROUPD_HOST": "127.0.0.1", "KGROUPD_PORT": "0"}
    run_env.pop("PYTHONPATH", None)
    proc = await asyncio.create_subprocess_exec(
        str(env_dir / "bin" / entrypoint[0]),
        *entrypoint[1:],
        "--create-topic",
        "boxed:2",
        env=run_env,
        cwd=tmp_path,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stderr is not None
        port = None
        while port is None:
            line = await asyncio.wait_for(proc.stderr.readline(), 30)
            assert line, "the installed kgroupd exited before listening"
            record = json.loads(line)  # the image logs JSON (KGROUPD_LOG_FORMAT=json)
            if record.get("event") == "listening":
                port = record["port"]
        producer = AIOKafkaProducer(bootstrap_servers=f"127.0.0.1:{port}")
        await producer.start()
        try:
            meta = await producer.send_and_wait("boxed", b"hello", partition=1)
            assert meta.offset == 0
        finally:
            await producer.stop()
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), 20) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def test_top_level_package_names_do_not_clash_with_installed_clients() -> None:
    """Our generic names (broker, protocol, assignors) must be ours alone in the venv."""
    import importlib.metadata as md

    ours = {"broker", "protocol", "assignors"}
    for dist in md.distributions():
        if dist.metadata["Name"] == "kgroupd":
            continue
        tops = {
            f.parts[0]
            for f in dist.files or ()
            if len(f.parts) > 1 and f.parts[0].isidentifier() and f.suffix == ".py"
        }
        assert not (tops & ours), f"{dist.metadata['Name']} also installs {tops & ours}"
    for name in ours:
        module = __import__(name)
        assert Path(module.__file__ or "").resolve().is_relative_to(ROOT), name
    assert sys.modules["broker"].__name__ == "broker"
