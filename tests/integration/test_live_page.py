"""The live page (/) in a real browser: Debian's chromium driven by Playwright (never
``playwright install``). Three consumers, then a fourth: the page shows the new generation,
the partitions that moved and the lag falling as the group commits. Screenshots are saved
under .cache/artifacts/ (their paths printed)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import shutil
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError

from kgroupd.broker.config.settings import TopicSpec
from kgroupd.broker.testing import running_server
from tests.conftest import require

TOPIC = "orders"
PARTITIONS = 6
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / ".cache" / "artifacts"


class Member:
    """An aiokafka consumer that polls all along and commits only while ``committing``."""

    def __init__(self, boot: str, client_id: str) -> None:
        self.consumer = AIOKafkaConsumer(
            TOPIC,
            bootstrap_servers=boot,
            group_id="shop",
            client_id=client_id,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            heartbeat_interval_ms=100,
            session_timeout_ms=6000,
        )
        self.committing = True
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.consumer.start()
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            await self.consumer.getmany(timeout_ms=100)
            if self.committing:
                with contextlib.suppress(KafkaError):
                    await self.consumer.commit()

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        await self.consumer.stop()


async def produce(boot: str, per_partition: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=boot)
    await producer.start()
    try:
        for p in range(PARTITIONS):
            for _ in range(per_partition):
                await producer.send(TOPIC, b"order", partition=p)
        await producer.flush()
    finally:
        await producer.stop()


async def test_the_page_shows_a_fourth_member_s_rebalance_and_the_lag_falling() -> None:
    require(Path(CHROMIUM).exists(), "Debian's chromium (apt-get install chromium)")
    require(importlib.util.find_spec("playwright") is not None, "playwright (the test extra)")
    from playwright.async_api import async_playwright, expect

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    async with running_server(
        initial_rebalance_delay_ms=0, create_topics=(TopicSpec(TOPIC, PARTITIONS),)
    ) as server:
        assert server.http is not None
        boot, url = f"127.0.0.1:{server.port}", f"http://127.0.0.1:{server.http.port}/"
        await produce(boot, 10)
        members = [Member(boot, f"c{i}") for i in (1, 2, 3)]
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(
                executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
            )
            try:
                page = await browser.new_page(viewport={"width": 1400, "height": 900})
                await page.goto(url)
                await expect(page.locator("#status")).to_have_text("live")
                for m in members:
                    await m.start()
                group = page.locator('article[data-group="shop"]')
                await expect(group.locator("tbody tr[data-member]")).to_have_count(3, timeout=20000)
                await expect(group).to_have_attribute("data-state", "Stable", timeout=20000)
                await expect(group.locator(".total-lag")).to_have_text("0", timeout=20000)
                before = int(await group.get_attribute("data-generation") or 0)
                assert before >= 1
                rows = group.locator("tr[data-partition]")
                await expect(rows).to_have_count(PARTITIONS)

                # the group stops committing; producers go on: the lag shows
                for m in members:
                    m.committing = False
                await produce(boot, 20)
                await expect(group.locator(".total-lag")).to_have_text(
                    str(20 * PARTITIONS), timeout=10000
                )

                # a fourth member: a new generation, partitions moved to it
                fourth = Member(boot, "c4")
                fourth.committing = False
                members.append(fourth)
                await fourth.start()
                await expect(group.locator("tbody tr[data-member]")).to_have_count(4, timeout=20000)
                await expect(group).to_have_attribute("data-state", "Stable", timeout=20000)
                after = int(await group.get_attribute("data-generation") or 0)
                assert after > before
                await expect(group.locator("dd.generation")).to_have_text(str(after))
                c4 = group.locator('tr[data-member="c4"] .chip')
                await expect(c4.first).to_be_visible()
                assert await c4.count() >= 1
                moved_to_c4 = await c4.all_inner_texts()
                # the partitions moved are highlighted, in the members' table and the offsets'
                await expect(group.locator('tr[data-member="c4"] .chip.moved')).to_have_count(
                    len(moved_to_c4)
                )
                for key in moved_to_c4:
                    await expect(group.locator(f'tr[data-partition="{key}"]')).to_have_class(
                        "moved"
                    )
                # the timeline: this generation's rebalance, why, how long, what moved to c4
                line = page.locator(f'#timeline tr[data-group="shop"][data-generation="{after}"]')
                await expect(line).to_have_count(1, timeout=10000)
                await expect(line).to_contain_text("member_joined (c4)")
                await expect(line).to_contain_text(" ms")
                for key in moved_to_c4:
                    await expect(line).to_contain_text(f"{key} ")
                await expect(line.locator(".chip", has_text="→c4")).to_have_count(len(moved_to_c4))
                shot_lag = ARTIFACTS / "live-page-lagging.png"
                await page.screenshot(path=str(shot_lag), full_page=True)

                # the group commits again: the lag falls to nothing, partition by partition
                lags = [int(await r.get_attribute("data-lag") or 0) for r in await rows.all()]
                assert sum(lags) == 20 * PARTITIONS
                for m in members:
                    m.committing = True
                await expect(group.locator(".total-lag")).to_have_text("0", timeout=15000)
                for r in await rows.all():
                    await expect(r).to_have_attribute("data-lag", "0")
                shot = ARTIFACTS / "live-page.png"
                await page.screenshot(path=str(shot), full_page=True)
                print(f"\nscreenshots: {shot_lag} {shot}")
            finally:
                await browser.close()
                for m in members:
                    await m.stop()
