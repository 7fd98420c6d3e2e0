"""The live page (/) in a real browser: Debian's chromium driven by Playwright (never
``playwright install``). Three consumers, then a fourth: the page shows the new generation,
the partitions that moved and the lag falling as the group commits; then, at 420 px as on a
phone, the lag scaled across groups and a member without a client id. Screenshots are saved
under .cache/artifacts/ (their paths printed)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from kgroupd.broker.config.settings import TopicSpec
from kgroupd.broker.testing import running_server
from tests.conftest import require

if TYPE_CHECKING:
    from playwright.async_api import Page

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


async def commit(boot: str, group: str, partition: int, offset: int) -> None:
    """``group`` commits ``offset`` on one partition and leaves (an Empty group with lag)."""
    c = AIOKafkaConsumer(bootstrap_servers=boot, group_id=group, enable_auto_commit=False)
    await c.start()
    try:
        c.assign([TopicPartition(TOPIC, partition)])
        await c.commit({TopicPartition(TOPIC, partition): offset})
    finally:
        await c.stop()


async def boxes(page: Page, selector: str) -> list[dict[str, float]]:
    """The boxes (left, right, width) of what ``selector`` finds, measured in one go: the
    page re-renders the groups every 2 s, and an element measured one at a time may have
    been replaced in between."""
    found: list[dict[str, float]] = await page.eval_on_selector_all(
        selector,
        "els => els.map((e) => { const r = e.getBoundingClientRect();"
        " return {left: r.left, right: r.right, width: r.width}; })",
    )
    assert found, f"nothing is {selector}"
    return found


async def test_loading_one_lag_scale_a_member_without_client_id_and_a_phone_screen() -> None:
    """The page says "Loading…" until /api/groups first answers (then "No groups yet."); lag
    bars share one scale across groups (a lag of 4 is drawn shorter than one of 1,437); a
    member without a client id is named by a short form of its member id; at 420 px nothing
    scrolls sideways and the lag, the partitions and the timeline are on screen. Screenshots
    at 420 px and at desktop width: .cache/artifacts/live-page-420.png and
    live-page-desktop.png."""
    require(Path(CHROMIUM).exists(), "Debian's chromium (apt-get install chromium)")
    require(importlib.util.find_spec("playwright") is not None, "playwright (the test extra)")
    from playwright.async_api import Route, async_playwright, expect

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    async with running_server(
        initial_rebalance_delay_ms=0, create_topics=(TopicSpec(TOPIC, PARTITIONS),)
    ) as server:
        assert server.http is not None
        boot, url = f"127.0.0.1:{server.port}", f"http://127.0.0.1:{server.http.port}/"
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(
                executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
            )
            anon: AIOKafkaConsumer | None = None
            try:
                page = await browser.new_page(viewport={"width": 420, "height": 900})
                # the first answer is held back: until it comes the page says it is loading
                answer = asyncio.Event()

                async def hold(route: Route) -> None:
                    await answer.wait()
                    await route.continue_()

                await page.route("**/api/groups", hold)
                await page.goto(url)
                groups = page.locator("#groups")
                await expect(groups).to_have_text("Loading…")
                answer.set()
                await expect(groups).to_have_text("No groups yet.")
                await page.unroute("**/api/groups")

                # two groups without members: lag 1,437 on orders-0, lag 4 on orders-1
                producer = AIOKafkaProducer(bootstrap_servers=boot)
                await producer.start()
                try:
                    for partition, count in ((0, 1437), (1, 10)):
                        for _ in range(count):
                            await producer.send(TOPIC, b"order", partition=partition)
                    await producer.flush()
                finally:
                    await producer.stop()
                await commit(boot, "big", 0, 0)
                await commit(boot, "small", 1, 6)
                # a member whose client id is empty
                anon = AIOKafkaConsumer(
                    TOPIC,
                    bootstrap_servers=boot,
                    group_id="anon",
                    client_id="",
                    enable_auto_commit=False,
                )
                await anon.start()

                big_rows = 'article[data-group="big"] tr[data-partition="orders-0"]'
                small_rows = 'article[data-group="small"] tr[data-partition="orders-1"]'
                big, small = page.locator(big_rows), page.locator(small_rows)
                await expect(big).to_have_attribute("data-lag", "1437", timeout=10000)
                await expect(small).to_have_attribute("data-lag", "4", timeout=10000)
                (big_bar,) = await boxes(page, f"{big_rows} td.bar span")
                (small_bar,) = await boxes(page, f"{small_rows} td.bar span")
                assert 0 < small_bar["width"] < big_bar["width"] / 2, (small_bar, big_bar)

                group = page.locator('article[data-group="anon"]')
                await expect(group).to_have_attribute("data-state", "Stable", timeout=20000)
                member = group.locator("tbody tr[data-member-id]")
                await expect(member).to_have_count(1)
                member_id = await member.get_attribute("data-member-id") or ""
                short = member_id.lstrip("-")[:8] + "…"
                assert len(member_id) > 20, member_id
                await expect(member.locator(".who")).to_have_text(short)
                await expect(member.locator(".who")).to_have_attribute("title", member_id)
                # the rebalance it joined by (a later one, should one come, is listed above it)
                line = page.locator(
                    '#timeline tr[data-group="anon"]', has_text=f"member_joined ({short})"
                )
                await expect(line).to_have_count(1, timeout=10000)
                await expect(page.locator("#timeline")).not_to_contain_text(member_id)

                # 420 px: no sideways scrolling; lag, partitions and the timeline on screen
                width = await page.evaluate("document.documentElement.scrollWidth")
                assert width <= 420, f"the page is {width} px wide at 420 px"
                await expect(member.locator(".chip")).to_have_count(PARTITIONS)
                timeline = '#timeline tr[data-group="anon"]'
                for selector in (
                    f"{big_rows} td.lag",
                    f"{big_rows} td.bar span",
                    f"{small_rows} td.lag",
                    'article[data-group="anon"] tr[data-member-id] .chip',
                    timeline,
                    f"{timeline} .chip",
                ):
                    for box in await boxes(page, selector):
                        assert box["left"] >= 0 and box["right"] <= 420, (selector, box)
                shot_narrow = ARTIFACTS / "live-page-420.png"
                await page.screenshot(path=str(shot_narrow), full_page=True)

                await page.set_viewport_size({"width": 1400, "height": 900})
                await expect(group.locator("table.members thead")).to_be_visible()
                assert await page.evaluate("document.documentElement.scrollWidth") <= 1400
                shot_wide = ARTIFACTS / "live-page-desktop.png"
                await page.screenshot(path=str(shot_wide), full_page=True)
                print(f"\nscreenshots: {shot_narrow} {shot_wide}")
            finally:
                await browser.close()
                if anon is not None:
                    await anon.stop()
