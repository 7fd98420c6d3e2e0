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

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

ROOT = Path(__file__).resolve().parents[2]


def dockerfile_lines(word: str) -> list[str]:
    """The arguments of every ``word`` instruction of the Dockerfile (continuations joined)."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        first, _, rest = line.strip().partition(" ")
        if first == word:
            out.append(rest.strip())
    return out


def dockerfile() -> tuple[list[str], dict[str, str], list[str]]:
    """(paths the image copies, its ENV, its ENTRYPOINT)."""
    copies: list[str] = []
    env: dict[str, str] = {}
    for rest in dockerfile_lines("COPY"):
        copies += shlex.split(rest)[:-1]
    for rest in dockerfile_lines("ENV"):
        env.update(dict(re.findall(r"(\w+)=(\S*)", rest)))
    (entrypoint,) = [json.loads(rest) for rest in dockerfile_lines("ENTRYPOINT")]
    return copies, env, entrypoint


def test_image_copies_every_package_the_project_installs() -> None:
    copies, env, entrypoint = dockerfile()
    for needed in ("pyproject.toml", "README.md", "broker", "protocol", "assignors"):
        assert needed in copies
    assert entrypoint == ["kgroupd"]
    assert env["KGROUPD_LISTENERS"] == "PLAINTEXT://0.0.0.0:9092"
    # a data directory the image's user owns, declared as a volume and used by default
    (volume,) = [json.loads(v) for v in dockerfile_lines("VOLUME")]
    assert volume == [env["KGROUPD_DATA_DIR"]]
    (user,) = dockerfile_lines("USER")
    (run,) = dockerfile_lines("RUN")
    assert f"chown {user} {env['KGROUPD_DATA_DIR']}" in run
    (health,) = dockerfile_lines("HEALTHCHECK")
    assert health.endswith('CMD ["python", "-m", "broker.healthcheck"]')


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
    # The image's ENV, but on loopback and a free port (this machine runs no containers) and
    # the declared data directory in the test's own directory.
    data = tmp_path / "data"
    run_env = {
        **os.environ,
        **env,
        "KGROUPD_LISTENERS": "PLAINTEXT://127.0.0.1:0",
        "KGROUPD_DATA_DIR": str(data),
    }
    run_env.pop("PYTHONPATH", None)
    python = str(env_dir / "bin" / "python")
    command = [str(env_dir / "bin" / entrypoint[0]), *entrypoint[1:]]

    async def healthcheck(port: int) -> int:
        # the HEALTHCHECK command, from the installed package
        proc = await asyncio.create_subprocess_exec(
            python,
            "-m",
            "broker.healthcheck",
            "--listeners",
            f"PLAINTEXT://127.0.0.1:{port}",
            env=run_env,
            stderr=asyncio.subprocess.DEVNULL,
        )
        return await asyncio.wait_for(proc.wait(), 30)

    proc, port = await _start([*command, "--create-topic", "boxed:2"], run_env, tmp_path)
    try:
        assert await healthcheck(port) == 0
        bootstrap = f"127.0.0.1:{port}"
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            meta = await producer.send_and_wait("boxed", b"hello", partition=1)
            assert meta.offset == 0
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id="boxed-group")
        await consumer.start()
        try:
            consumer.assign([TopicPartition("boxed", 1)])
            await consumer.commit({TopicPartition("boxed", 1): 1})
        finally:
            await consumer.stop()
    finally:
        proc.kill()  # kill -9: what was acknowledged must survive
        await proc.wait()
    assert await healthcheck(port) == 1
    proc, port = await _start(command, run_env, tmp_path)
    try:
        consumer = AIOKafkaConsumer(bootstrap_servers=f"127.0.0.1:{port}", group_id="boxed-group")
        await consumer.start()
        try:
            assert await consumer.committed(TopicPartition("boxed", 1)) == 1
        finally:
            await consumer.stop()
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), 20) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def _start(
    command: list[str], run_env: dict[str, str], cwd: Path
) -> tuple[asyncio.subprocess.Process, int]:
    proc = await asyncio.create_subprocess_exec(
        *command, env=run_env, cwd=cwd, stderr=asyncio.subprocess.PIPE
    )
    assert proc.stderr is not None
    while True:
        line = await asyncio.wait_for(proc.stderr.readline(), 30)
        assert line, "the installed kgroupd exited before listening"
        record = json.loads(line)  # the image logs JSON (KGROUPD_LOG_FORMAT=json)
        if record.get("event") == "listening":
            return proc, int(record["port"])


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


def test_the_compose_broker_settings_are_accepted_and_advertise_each_side() -> None:
    """docker-compose.yml's broker environment, read as text, through the broker's own
    config parser: containers are told kgroupd:9092, the host localhost:19092."""
    from broker.config import load_config

    text = (ROOT / "docker-compose.yml").read_text()
    service = text.split("\n  kgroupd:\n", 1)[1].split("\n\n", 1)[0]
    env = dict(re.findall(r"^\s+(KGROUPD_\w+): (\S+)$", service, re.MULTILINE))
    assert "KGROUPD_LISTENERS" in env
    listeners = load_config([], env).listener_list()
    got = {(x.name, x.port, x.advertised_host, x.advertised_port) for x in listeners}
    assert got == {("INTERNAL", 9092, "kgroupd", 9092), ("EXTERNAL", 19092, "localhost", 19092)}
    assert "kgroupd-data:/var/lib/kgroupd" in service
    assert "network_mode" not in text  # services reach the broker by name
