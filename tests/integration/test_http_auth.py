"""Who may use the HTTP listener: loopback by default when a Kafka listener is secured, a
bearer token (--http-auth-token-file, also as a cookie for the browser), HTTPS with client
certificates (--http-ssl); /healthz and /readyz always open, the HEALTHCHECK still passing."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import shutil
import ssl
import sys
from pathlib import Path

import aiohttp
import pytest

from kgroupd.broker.testing import running_server
from tests.conftest import require
from tests.integration.test_cli import run_to_end, start, wait_for_event
from tests.support.certs import Certs, make_certs

TOKEN = "s3cret-Token_0123456789"
PROTECTED = ("/metrics", "/api/groups", "/api/topics", "/", "/static/app.js")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    return path


def users(tmp_path: Path) -> Path:
    path = tmp_path / "users.txt"
    path.write_text("alice:alice-secret\n")
    return path


async def status(
    url: str, headers: dict[str, str] | None = None, context: ssl.SSLContext | None = None
) -> tuple[int, dict[str, str]]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(url, headers=headers, ssl=context or False, allow_redirects=False) as resp,
    ):
        return resp.status, dict(resp.headers)


async def healthcheck(*args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kgroupd.broker.cli.healthcheck",
        *args,
        stderr=asyncio.subprocess.PIPE,
        env={k: v for k, v in os.environ.items() if not k.startswith("KGROUPD_")},
    )
    _out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode is not None
    return proc.returncode, err.decode()


async def test_a_sasl_ssl_listener_keeps_http_on_loopback_and_says_so(
    certs: Certs, tmp_path: Path
) -> None:
    proc = await start(
        "--log-format",
        "json",
        "--listeners",
        "SASL_SSL://localhost:0",  # loopback, but not the address HTTP falls back to
        "--ssl-certfile",
        str(certs.server_cert),
        "--ssl-keyfile",
        str(certs.server_key),
        "--sasl-users",
        str(users(tmp_path)),
    )
    try:
        said = await wait_for_event(proc, "http_host_loopback")
        assert said["level"] == "info" and said["host"] == "127.0.0.1"
        listening = await wait_for_event(proc, "http_listening")
        assert listening["host"] == "127.0.0.1"
        code, _ = await status(f"http://127.0.0.1:{listening['port']}/readyz")
        assert code in (200, 503)
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.communicate(), 30)


@pytest.mark.parametrize("protocol", ["SSL", "SASL_PLAINTEXT", "SASL_SSL", "PLAINTEXT"])
async def test_http_binds_loopback_when_any_listener_is_secured(
    protocol: str, certs: Certs, tmp_path: Path
) -> None:
    async with running_server(
        listeners="PLAINTEXT://localhost:0,OTHER://localhost:0",
        listener_security_protocol_map=f"PLAINTEXT:PLAINTEXT,OTHER:{protocol}",
        ssl_certfile=str(certs.server_cert),
        ssl_keyfile=str(certs.server_key),
        sasl_users=str(users(tmp_path)),
    ) as server:
        assert server.http is not None and server.http._runner is not None
        bound = {address[0] for address in server.http._runner.addresses}
        if protocol == "PLAINTEXT":  # as before: the first Kafka listener's host
            assert server.http.host == "localhost" and bound <= {"127.0.0.1", "::1"}
        else:
            assert server.http.host == "127.0.0.1" and bound == {"127.0.0.1"}
    # --http-host wins over the loopback default
    async with running_server(
        listeners="SASL_PLAINTEXT://127.0.0.1:0",
        sasl_users=str(users(tmp_path)),
        http_host="localhost",
    ) as server:
        assert server.http is not None and server.http.host == "localhost"


async def test_the_token_guards_every_path_but_the_probes(token_file: Path) -> None:
    async with running_server(http_auth_token_file=str(token_file)) as server:
        assert server.http is not None
        base = f"http://127.0.0.1:{server.http.port}"
        for path in ("/healthz", "/readyz"):
            assert (await status(base + path))[0] == 200
        for path in PROTECTED:
            async with aiohttp.ClientSession() as http, http.get(base + path) as resp:
                assert resp.status == 401, path
                assert resp.headers["WWW-Authenticate"].startswith("Bearer")
                assert "/?token=TOKEN" in await resp.text()
            for wrong in ("Bearer nope", f"Bearer {TOKEN}x", f"Basic {TOKEN}", TOKEN):
                assert (await status(base + path, {"Authorization": wrong}))[0] == 401
            code, _ = await status(base + path, {"Authorization": f"Bearer {TOKEN}"})
            assert code == 200, path
        # the cookie holds an HMAC of the token, not the token
        cookie = {"Cookie": f"kgroupd_http_token={TOKEN}"}
        assert (await status(base + "/api/groups", cookie))[0] == 401


async def test_visiting_with_the_token_sets_a_strict_cookie_for_the_page(
    token_file: Path,
) -> None:
    async with running_server(http_auth_token_file=str(token_file)) as server:
        assert server.http is not None
        base = f"http://127.0.0.1:{server.http.port}"
        assert (await status(f"{base}/?token=wrong"))[0] == 401
        jar = aiohttp.CookieJar(unsafe=True)  # cookies for an IP address
        async with aiohttp.ClientSession(cookie_jar=jar) as http:
            async with http.get(f"{base}/?token={TOKEN}", allow_redirects=False) as resp:
                assert resp.status == 303
                assert resp.headers["Location"] == "/"
                cookie = resp.headers["Set-Cookie"]
                assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
                assert "Path=/" in cookie and TOKEN not in cookie
            async with http.get(f"{base}/api/groups") as resp:
                assert resp.status == 200
                assert isinstance(await resp.json(), (list, dict))
            async with http.get(f"{base}/api/events") as resp:
                assert resp.status == 200
                assert await resp.content.readline() == b"retry: 2000\n"
        async with aiohttp.ClientSession() as http, http.get(f"{base}/api/groups") as resp:
            assert resp.status == 401  # another client, no cookie
        code, headers = await status(f"{base}//elsewhere.example/x?token={TOKEN}&a=1")
        assert code == 303 and headers["Location"] == "/elsewhere.example/x?a=1"  # a path


async def test_the_live_page_works_in_a_browser_after_one_visit_with_the_token(
    token_file: Path,
) -> None:
    require(Path(CHROMIUM).exists(), "Debian's chromium (apt-get install chromium)")
    require(importlib.util.find_spec("playwright") is not None, "playwright (the test extra)")
    from playwright.async_api import async_playwright, expect

    async with running_server(http_auth_token_file=str(token_file)) as server:
        assert server.http is not None
        url = f"http://127.0.0.1:{server.http.port}/"
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(
                executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
            )
            try:
                page = await browser.new_page()
                first = await page.goto(url)
                assert first is not None and first.status == 401
                await page.goto(f"{url}?token={TOKEN}")
                assert page.url == url  # the token left the address bar
                await expect(page.locator("#status")).to_have_text("live")
            finally:
                await browser.close()


@pytest.mark.parametrize(
    ("content", "mode", "why"),
    [
        ("", 0o600, "the file is empty"),
        ("  \n", 0o600, "the file is empty"),
        ("two words\n", 0o600, "one word"),
        (None, 0o600, "cannot read it"),
    ],
)
async def test_a_bad_token_file_stops_start_up_with_one_line(
    tmp_path: Path, content: str | None, mode: int, why: str
) -> None:
    path = tmp_path / "token"
    if content is not None:
        path.write_text(content)
        path.chmod(mode)
    code, _out, err = await run_to_end("--port", "0", "--http-auth-token-file", str(path))
    assert code == 2
    line = err.strip()
    assert line.startswith(f"kgroupd: error: --http-auth-token-file {path}: ")
    assert why in line and "\n" not in line


async def test_the_token_file_may_come_from_the_environment(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    env = {"KGROUPD_HTTP_AUTH_TOKEN_FILE": str(missing)}
    code, _out, err = await run_to_end("--port", "0", env=env)
    assert code == 2
    assert err.strip().startswith(f"kgroupd: error: --http-auth-token-file {missing}: cannot read")


async def test_a_token_file_others_may_read_is_warned_about_and_never_logged(
    token_file: Path,
) -> None:
    token_file.chmod(0o644)
    proc = await start(
        "--port", "0", "--log-format", "json", "--http-auth-token-file", str(token_file)
    )
    try:
        # in memory the Kafka listeners are up first, then HTTP
        await wait_for_event(proc, "listening")
        warned = await wait_for_event(proc, "http_token_file_readable")
        assert warned["level"] == "warning" and warned["file"] == str(token_file)
        listening = await wait_for_event(proc, "http_listening")
        assert listening["token"] is True
        base = f"http://127.0.0.1:{listening['port']}"
        assert (await status(base + "/metrics"))[0] == 401
        code, err = await healthcheck(
            "--http-port", str(listening["port"]), "--http-auth-token-file", str(token_file)
        )
        assert code == 0, err
    finally:
        proc.terminate()
        _out, rest = await asyncio.wait_for(proc.communicate(), 30)
    assert TOKEN not in rest.decode()
    for line in rest.decode().splitlines():
        json.loads(line)


async def test_https_with_client_certificates_leaves_the_probes_open(
    certs: Certs, token_file: Path
) -> None:
    async with running_server(
        listeners="SSL://127.0.0.1:0",
        ssl_certfile=str(certs.server_cert),
        ssl_keyfile=str(certs.server_key),
        ssl_cafile=str(certs.ca),
        ssl_client_auth="required",
        http_ssl=True,
    ) as server:
        assert server.http is not None
        base = f"https://127.0.0.1:{server.http.port}"
        anonymous = ssl.create_default_context(cafile=str(certs.ca))
        client = ssl.create_default_context(cafile=str(certs.ca))
        client.load_cert_chain(str(certs.client_cert), str(certs.client_key))
        rogue = ssl.create_default_context(cafile=str(certs.ca))
        rogue.load_cert_chain(str(certs.rogue_cert), str(certs.rogue_key))
        for path in ("/healthz", "/readyz"):
            assert (await status(base + path, context=anonymous))[0] == 200
        assert (await status(base + "/metrics", context=anonymous))[0] == 403
        assert (await status(base + "/metrics", context=client))[0] == 200
        assert (await status(base + "/api/groups", context=client))[0] == 200
        with pytest.raises(aiohttp.ClientError):
            await status(base + "/readyz", context=rogue)  # an untrusted CA: no handshake
        with pytest.raises(aiohttp.ClientError):
            await status(f"http://127.0.0.1:{server.http.port}/readyz")  # plain HTTP
        code, err = await healthcheck(
            "--listeners",
            "SSL://127.0.0.1:0",
            "--ssl-certfile",
            str(certs.server_cert),
            "--ssl-cafile",
            str(certs.ca),
            "--ssl-client-auth",
            "required",
            "--http-ssl",
            "--http-port",
            str(server.http.port),
        )
        assert code == 0, err


async def test_http_ssl_needs_a_certificate() -> None:
    code, _out, err = await run_to_end("--port", "0", "--http-ssl")
    assert code == 2
    assert err.strip() == "kgroupd: error: --http-ssl needs --ssl-certfile (and --ssl-keyfile)"
