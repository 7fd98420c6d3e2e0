"""The wheel as a user meets it: one import name, beside a project with its own ``broker``,
``protocol``, ``assignors`` and ``pipeline`` packages.

The wheel is built from a copy of the sources (the files git would ship), installed with its
pinned dependencies into a fresh virtual environment, and a small user project is run with
that environment's ``pytest`` and ``python -m pytest``: its own packages import, and a test
using the plugin's ``kgroupd_bootstrap`` fixture produces and consumes with aiokafka.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NAMES = ("broker", "protocol", "assignors", "pipeline")

USER_TEST = """
import asyncio

import assignors
import broker
import protocol
import pipeline
from broker.core import serve


def test_the_projects_own_packages_import() -> None:
    for module in (broker, protocol, assignors, pipeline):
        assert module.OWNER == "user-project", module
    assert serve() == "the user's broker"


def test_kgroupd_bootstrap_produces_and_consumes(kgroupd_bootstrap: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    import kgroupd.broker

    assert "site-packages" in kgroupd.broker.__file__

    async def story() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=kgroupd_bootstrap)
        await producer.start()
        try:
            for i in range(3):
                await producer.send_and_wait("user-topic", f"m{i}".encode(), partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            "user-topic", bootstrap_servers=kgroupd_bootstrap, auto_offset_reset="earliest"
        )
        await consumer.start()
        try:
            got: list[bytes] = []
            while len(got) < 3:
                batch = await consumer.getmany(timeout_ms=5000)
                assert batch, "nothing consumed within 5 s"
                got += [m.value for records in batch.values() for m in records]
            return got
        finally:
            await consumer.stop()

    assert asyncio.run(story()) == [b"m0", b"m1", b"m2"]
"""


def _shipped_sources(dest: Path) -> None:
    """What the repository holds (git's files, or the tree less caches): a build from it sees
    none of this checkout's build/ links or egg-info."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--", "pyproject.toml", "README.md", *NAMES],
        cwd=ROOT,
        capture_output=True,
    )
    files = [f for f in listed.stdout.decode().split("\0") if f] if listed.returncode == 0 else []
    if not files:  # not a git checkout
        files = [str(p.relative_to(ROOT)) for n in NAMES for p in (ROOT / n).rglob("*")]
        files += ["pyproject.toml", "README.md"]
    for name in files:
        source = ROOT / name
        if source.is_file() and "__pycache__" not in source.parts:
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    src = tmp_path_factory.mktemp("src")
    _shipped_sources(src)
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (path,) = out.glob("kgroupd-*.whl")
    yield path


def test_the_wheel_holds_one_import_name(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    tops = {n.split("/", 1)[0] for n in names}
    (dist_info,) = [t for t in tops if t.endswith(".dist-info")]
    assert tops == {"kgroupd", dist_info}
    # every package folder of the tree is in it, with the typing marker and the live page
    for folder in NAMES:
        for init in (ROOT / folder).rglob("__init__.py"):
            assert f"kgroupd/{init.relative_to(ROOT).as_posix()}" in names
        assert f"kgroupd/{folder}/py.typed" in names
    assert "kgroupd/broker/__init__.py" in names
    assert not any(n.startswith("kgroupd/tests") for n in names)
    entry_points = zipfile.ZipFile(wheel).read(f"{dist_info}/entry_points.txt").decode()
    assert "kgroupd = kgroupd.broker" in entry_points  # console script and pytest11 plugin


def test_a_user_project_with_the_same_package_names_runs_its_pytest(
    wheel: Path, tmp_path: Path
) -> None:
    env_dir = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    pip = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--quiet",
            "-c",
            str(ROOT / "constraints.txt"),
            str(wheel),
            "pytest",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert pip.returncode == 0, pip.stdout + pip.stderr

    project = tmp_path / "project"
    for name in NAMES:
        (project / name).mkdir(parents=True)
        (project / name / "__init__.py").write_text('OWNER = "user-project"\n')
    (project / "broker" / "core.py").write_text('def serve():\n    return "the user\'s broker"\n')
    (project / "tests").mkdir()
    (project / "tests" / "__init__.py").write_text("")
    (project / "tests" / "test_user.py").write_text(textwrap.dedent(USER_TEST))
    (project / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')

    env = {"PATH": f"{env_dir / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}
    for command in ([str(env_dir / "bin" / "pytest")], [str(python), "-m", "pytest"]):
        run = subprocess.run(
            [*command, "-q", "-p", "no:cacheprovider"],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, f"{command}:\n{run.stdout}\n{run.stderr}"
        assert "2 passed" in run.stdout, run.stdout
