"""The README and docs/ tell the truth: the README's first steps run as written against a real
broker and print what the README says they print, the script it shows is the one in
``examples/``, the tests its testing section shows are ``examples/test_with_kgroupd.py`` and
pass, and every relative link (and every repository path named in backticks) of
README.md, docs/*.md and assignors/README.md points at something that exists.

The first steps run as the README's commands, one ``bash -c`` each from the repository's root,
with two substitutions only: the broker's address (a broker on a free port, not 9092, which
may be taken) and, when the tests run in another environment than the checkout's ``.venv``,
``.venv/bin/`` for that environment's ``bin/``.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

import pytest

from tests.support.broker_process import BrokerProcess

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = [README, *sorted((REPO / "docs").glob("*.md")), REPO / "assignors" / "README.md"]
README_BOOTSTRAP = "127.0.0.1:9092"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.M | re.S)


def section(text: str, heading: str) -> str:
    """The body of the ``## heading`` section of a Markdown text."""
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def fenced(text: str) -> list[tuple[str, str]]:
    """Every fenced code block: (info string, body)."""
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(text)]


def first_steps() -> tuple[list[str], str, str]:
    """The README's first steps: the commands, the output it shows, the script it shows."""
    blocks = fenced(section(README.read_text(), "First steps"))
    kinds = [info for info, _ in blocks]
    assert kinds == ["sh", "text", "python"], kinds
    (_, commands), (_, output), (_, script) = blocks
    return commands.splitlines(), output, script


def test_the_script_shown_is_the_one_in_examples() -> None:
    _, _, script = first_steps()
    assert script == (REPO / "examples" / "first_steps.py").read_text()


def readme_testing() -> tuple[str, str]:
    """The README's testing section: its command and the test file it shows."""
    blocks = fenced(section(README.read_text(), "Testing with kgroupd"))
    assert [info for info, _ in blocks] == ["sh", "python"]
    (_, command), (_, script) = blocks
    return command.strip(), script


def test_the_tests_shown_are_the_ones_in_examples() -> None:
    assert readme_testing()[1] == (REPO / "examples" / "test_with_kgroupd.py").read_text()


async def test_the_tests_shown_pass() -> None:
    """The clock move and the coordinator failover of the README, run as it says."""
    command, _ = readme_testing()
    bin_dir = Path(sys.executable).parent
    if bin_dir != REPO / ".venv" / "bin":
        command = command.replace(".venv/bin/", f"{bin_dir}/")
    code, out = await run(command + " -p no:cacheprovider")
    assert code == 0 and "2 passed" in out, out


async def run(command: str) -> tuple[int, str]:
    """One README command, as bash runs it from the repository's root: (exit code, its
    stdout and stderr interleaved as a terminal shows them)."""
    proc = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        command,
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={k: v for k, v in os.environ.items() if not k.startswith("KGROUPD_")}
        | {"PYTHONUNBUFFERED": "1"},
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_first_steps_run_as_written() -> None:
    commands, expected, _ = first_steps()
    assert all(README_BOOTSTRAP in c for c in commands), "each command names the broker"
    bin_dir = Path(sys.executable).parent
    broker = BrokerProcess("", port=0)  # in memory, as ./scripts/broker runs it
    try:
        listening = await broker.start()
        bootstrap = f"127.0.0.1:{listening['port']}"
        printed = []
        for command in commands:
            command = command.replace(README_BOOTSTRAP, bootstrap)
            if bin_dir != REPO / ".venv" / "bin":
                command = command.replace(".venv/bin/", f"{bin_dir}/")
            code, out = await run(command)
            assert code == 0, f"{command!r} exited {code}:\n{out}"
            printed.append(out)
        assert "".join(printed) == expected
        await broker.stop()
    finally:
        await broker.close()


# --- links --------------------------------------------------------------------------------

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
INLINE_CODE = re.compile(r"`[^`\n]*`")
REPO_PATH = re.compile(
    r"`((?:broker|protocol|assignors|pipeline|tests|bench|scripts|examples|docs)/[\w./-]*)`"
)


def prose(text: str) -> str:
    """The text outside fenced code blocks."""
    return FENCE.sub("", text)


def slugs(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file."""
    found: set[str] = set()
    for line in prose(path.read_text()).splitlines():
        heading = re.match(r"#{1,6} (.*)", line)
        if not heading:
            continue
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.group(1))  # a link's text
        base = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        slug, n = base, 0
        while slug in found:
            n += 1
            slug = f"{base}-{n}"
        found.add(slug)
    return found


def test_slugs_are_githubs() -> None:
    assert {"the-__consumer_offsets-topic", "the-consumer-group-protocol-kip-848"} <= slugs(
        REPO / "docs" / "protocol.md"
    )


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_point_at_what_exists(doc: Path) -> None:
    broken = []
    for target in LINK.findall(INLINE_CODE.sub("", prose(doc.read_text()))):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        if not file.exists():
            broken.append(f"{target}: no {file}")
        elif anchor and anchor not in slugs(file):
            broken.append(f"{target}: no heading #{anchor} in {file.name}")
    assert broken == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_repository_paths_named_exist(doc: Path) -> None:
    named = [p for p in REPO_PATH.findall(doc.read_text()) if "..." not in p]  # not broker/...
    missing = [p for p in named if not (REPO / p).exists()]
    assert missing == []
