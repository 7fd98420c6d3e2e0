"""The image's install steps, done for real in a fresh virtualenv (no Docker engine here).

The Dockerfile copies pyproject.toml, README.md, constraints.txt and the package folders, runs
``pip install -c constraints.txt .`` and starts ``kgroupd`` as its own user with its ENV and
data volume. The test reads those lines from the Dockerfile and does the same: a fresh venv,
the RUN's pip command, the ENTRYPOINT run as an unprivileged user (``nobody`` when the tests
run as root) owning only the data directory, and checks the installed broker serves.
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import tomllib
import urllib.request
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from tests.conftest import require
from tests.support.dockerignore import DockerIgnore

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


def package_folders() -> list[str]:
    """The folders pyproject.toml installs (as ``kgroupd.broker``, ...)."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        return sorted(tomllib.load(f)["tool"]["setuptools"]["package-dir"].values())


def test_image_copies_every_package_the_project_installs() -> None:
    copies, env, entrypoint = dockerfile()
    for needed in ("pyproject.toml", "README.md", "constraints.txt", *package_folders()):
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
    assert health.endswith('CMD ["python", "-m", "kgroupd.broker.cli.healthcheck"]')
    assert "8080" in dockerfile_lines("EXPOSE")[0].split()  # /readyz, /metrics


UNPRIVILEGED = "nobody"  # stands in for the image's user: it owns nothing but the data dir


def _run_as_user() -> tuple[list[str], int | None, str]:
    """(a command prefix that runs a command as the unprivileged user, its uid, a base
    Python it can execute). As root: ``setpriv`` to ``nobody``, with a Python outside /root
    (0700 here); otherwise the current user is already unprivileged: no prefix."""
    if os.geteuid() != 0:
        return [], None, sys.executable
    record = pwd.getpwnam(UNPRIVILEGED)
    setpriv = shutil.which("setpriv")
    require(setpriv is not None, "setpriv (util-linux) to run the image command as a user")
    assert setpriv is not None
    prefix = [setpriv, f"--reuid={record.pw_uid}", f"--regid={record.pw_gid}", "--clear-groups"]
    for candidate in (sys._base_executable, shutil.which("python3.11"), "/usr/bin/python3"):
        if candidate and os.path.exists(candidate):
            probe = subprocess.run(
                [*prefix, candidate, "-c", "import sys, venv; assert sys.version_info >= (3, 11)"],
                capture_output=True,
            )
            if probe.returncode == 0:
                return prefix, record.pw_uid, candidate
    require(False, f"a Python 3.11 that {UNPRIVILEGED} can run (the one here is under /root)")
    raise AssertionError  # unreachable: require() skipped or failed


async def _pip_install_like_the_image(src: Path, venv_python: Path) -> None:
    """The RUN line's ``pip install ...`` (up to its first ``&&``), into ``venv_python``'s venv
    with this environment's pip (``pip --python``), in the copied sources."""
    (run,) = dockerfile_lines("RUN")
    words = shlex.split(run.split("&&")[0])
    assert words[:2] == ["pip", "install"] and "-c" in words, run  # pinned by constraints
    pip = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "pip",
        "--python",
        str(venv_python),
        "install",
        "--quiet",
        *words[2:],
        cwd=src,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(pip.communicate(), 300)
    assert pip.returncode == 0, out.decode()


async def test_fresh_install_runs_the_image_command() -> None:
    """The Dockerfile's own lines: COPY into a fresh directory, its RUN's pip install (with
    the constraints) into a fresh venv, its ENV and ENTRYPOINT run as an unprivileged user
    that owns only the declared data directory; two listeners (127.0.0.1 and 127.0.0.2) each
    advertise themselves to real clients; a commit survives kill -9 and a restart."""
    copies, env, entrypoint = dockerfile()
    as_user, uid, base_python = _run_as_user()
    # world-readable (pytest's tmp_path is 0700): the unprivileged user runs the venv
    root = Path(tempfile.mkdtemp(prefix="kgroupd-image-"))
    root.chmod(0o755)
    try:
        await _image_story(root, copies, env, entrypoint, as_user, uid, base_python)
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def _image_story(
    root: Path,
    copies: list[str],
    env: dict[str, str],
    entrypoint: list[str],
    as_user: list[str],
    uid: int | None,
    base_python: str,
) -> None:
    src = root / "app"
    src.mkdir()
    for name in copies:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, src / name)
    env_dir = root / "venv"
    subprocess.run([base_python, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    await _pip_install_like_the_image(src, python)
    # The RUN line's data directory (VOLUME), owned by the image's user alone.
    data = root / "data"
    data.mkdir(mode=0o700)
    if uid is not None:
        os.chown(data, uid, -1)
    # The image's ENV, with two listeners on loopback (this machine runs no containers).
    ports = [free_port("127.0.0.1"), free_port("127.0.0.2")]
    run_env = {
        "PATH": f"{env_dir / 'bin'}:/usr/bin:/bin",
        "HOME": str(data),
        **env,
        "KGROUPD_LISTENERS": f"INTERNAL://127.0.0.1:{ports[0]},EXTERNAL://127.0.0.2:{ports[1]}",
        "KGROUPD_LISTENER_SECURITY_PROTOCOL_MAP": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
        "KGROUPD_DATA_DIR": str(data),
        # the HEALTHCHECK asks this port's /readyz (8080 in the image; free here)
        "KGROUPD_HTTP_PORT": str(free_port("127.0.0.1")),
    }
    command = [str(env_dir / "bin" / entrypoint[0]), *entrypoint[1:]]

    (health,) = dockerfile_lines("HEALTHCHECK")
    health_command = json.loads(health.split(" CMD ", 1)[1])
    assert health_command[0] == "python", health_command

    async def healthcheck() -> int:
        # the HEALTHCHECK command, from the installed package, with the image's environment:
        # it asks the first listener
        proc = await asyncio.create_subprocess_exec(
            *as_user,
            str(python),
            *health_command[1:],
            env=run_env,
            stderr=asyncio.subprocess.DEVNULL,
        )
        return await asyncio.wait_for(proc.wait(), 30)

    proc = await _start([*command, "--create-topic", "boxed:2"], run_env, data, as_user)
    try:
        assert await healthcheck() == 0
        readyz = f"http://127.0.0.1:{run_env['KGROUPD_HTTP_PORT']}/readyz"
        with urllib.request.urlopen(readyz, timeout=5) as resp:  # what the check asks
            assert resp.status == 200
        # the live page's static files are package data of the installed package
        base = f"http://127.0.0.1:{run_env['KGROUPD_HTTP_PORT']}"
        for path, kind, text in (
            ("/", "text/html", b'src="/static/app.js"'),
            ("/static/app.js", "text/javascript", b'new EventSource("/api/events")'),
            ("/static/style.css", "text/css", b".group"),
        ):
            with urllib.request.urlopen(base + path, timeout=5) as resp:
                assert resp.headers["Content-Type"].startswith(kind), path
                assert text in resp.read(), path
        for host, port in zip(("127.0.0.1", "127.0.0.2"), ports, strict=True):
            producer = AIOKafkaProducer(bootstrap_servers=f"{host}:{port}")
            await producer.start()
            try:
                meta = await producer.send_and_wait("boxed", host.encode(), partition=1)
                # each listener advertises itself: the client was sent back to the same one
                (node,) = producer.client.cluster.brokers()
                assert (node.host, node.port) == (host, port)
            finally:
                await producer.stop()
        assert meta.offset == 1
        consumer = AIOKafkaConsumer(
            bootstrap_servers=f"127.0.0.2:{ports[1]}", group_id="boxed-group"
        )
        await consumer.start()
        try:
            consumer.assign([TopicPartition("boxed", 1)])
            await consumer.commit({TopicPartition("boxed", 1): 2})
        finally:
            await consumer.stop()
    finally:
        proc.kill()  # kill -9: what was acknowledged must survive
        await proc.wait()
    assert await healthcheck() == 1
    if uid is not None:  # everything the broker wrote belongs to the unprivileged user
        owners = {p.stat().st_uid for p in data.rglob("*")} | {data.stat().st_uid}
        assert owners == {uid}, owners
    proc = await _start(command, run_env, data, as_user)
    try:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=f"127.0.0.1:{ports[0]}", group_id="boxed-group"
        )
        await consumer.start()
        try:
            assert await consumer.committed(TopicPartition("boxed", 1)) == 2
        finally:
            await consumer.stop()
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), 20) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


async def _start(
    command: list[str], run_env: dict[str, str], cwd: Path, as_user: list[str]
) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        *as_user, *command, env=run_env, cwd=cwd, stderr=asyncio.subprocess.PIPE
    )
    assert proc.stderr is not None
    while True:
        line = await asyncio.wait_for(proc.stderr.readline(), 30)
        assert line, "the installed kgroupd exited before listening"
        record = json.loads(line)  # the image logs JSON (KGROUPD_LOG_FORMAT=json)
        if record.get("event") == "listening":
            return proc


def test_the_compose_broker_settings_are_accepted_and_advertise_each_side() -> None:
    """docker-compose.yml's broker environment, read as text, through the broker's own
    config parser: containers are told kgroupd:9092, the host localhost:19092."""
    from kgroupd.broker.config.settings import load_config

    text = (ROOT / "docker-compose.yml").read_text()
    service = text.split("\n  kgroupd:\n", 1)[1].split("\n\n", 1)[0]
    env = dict(re.findall(r"^\s+(KGROUPD_\w+): (\S+)$", service, re.MULTILINE))
    assert "KGROUPD_LISTENERS" in env
    listeners = load_config([], env).listener_list()
    got = {(x.name, x.port, x.advertised_host, x.advertised_port) for x in listeners}
    assert got == {("INTERNAL", 9092, "kgroupd", 9092), ("EXTERNAL", 19092, "localhost", 19092)}
    assert "kgroupd-data:/var/lib/kgroupd" in service
    # the HTTP listener (its default port, on the first listener's host 0.0.0.0) published
    assert "KGROUPD_HTTP_PORT" not in env and "KGROUPD_HTTP_HOST" not in env
    assert "network_mode" not in text  # services reach the broker by name
    # published on the host's loopback only (the HTTP side is unauthenticated), unless
    # KGROUPD_PUBLISH_HOST says otherwise (compose's ${VAR:-default}, resolved as compose does)
    ports = service.split("\n    ports:\n", 1)[1].split("\n    environment:", 1)[0]
    published = [x.strip()[2:].strip('"') for x in ports.splitlines() if x.strip()[:2] == "- "]
    assert published == [
        "${KGROUPD_PUBLISH_HOST:-127.0.0.1}:19092:19092",
        "${KGROUPD_PUBLISH_HOST:-127.0.0.1}:8080:8080",
    ]
    assert [compose_value(p, {}) for p in published] == [
        "127.0.0.1:19092:19092",
        "127.0.0.1:8080:8080",
    ]
    told = {"KGROUPD_PUBLISH_HOST": "0.0.0.0"}
    assert compose_value(published[1], told) == "0.0.0.0:8080:8080"


def compose_value(text: str, env: dict[str, str]) -> str:
    """Compose's interpolation of ``${VAR:-default}`` (and ``${VAR}``) in ``text``."""

    def one(m: re.Match[str]) -> str:
        return env.get(m.group(1)) or (m.group(2) or "")

    return re.sub(r"\$\{(\w+)(?::-([^}]*))?\}", one, text)


def test_the_build_context_leaves_out_data_output_and_certificates() -> None:
    """.dockerignore keeps data directories, pipeline output, certificates, build output,
    the git and venv folders and caches out of the build context (and so out of any layer
    a careless COPY makes), and lets in everything the Dockerfile COPYs (Dockerfile.pipeline:
    tests/pipeline/test_pipeline_image.py)."""
    ignore = DockerIgnore(ROOT / ".dockerignore")
    for left_out in (
        "kgroupd-data",
        "kgroupd-data/meta.json",
        "certs",
        "certs/ca-key.pem",
        "pipeline-out/part-0.parquet",
        "spark-warehouse",
        "metastore_db",
        "derby.log",
        "build",
        "dist/kgroupd-0.1.0.tar.gz",
        "kgroupd.egg-info/PKG-INFO",
        ".git/config",
        ".venv/bin/python",
        ".cache/artifacts/live-page.png",
        "node_modules/x/index.js",
        "tests/conftest.py",
        "broker/__pycache__/state.cpython-311.pyc",
    ):
        assert ignore.ignored(left_out), left_out
    copies, _, _ = dockerfile()
    assert ignore.kept_out(ROOT, copies) == []
