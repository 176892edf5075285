"""The documentation site builds warning-free and is usable in a browser.

The build is Sphinx's with ``-W -n`` (warnings are errors, broken references included); the API
reference must hold an entry for every public name; the built pages open in headless Chromium
(the landing page, ``kd.kernel``'s reference, a search) without a console error. Needs the
``docs`` extra (``pip install '.[docs]'``); the browser test needs Chromium (Debian:
``apt-get install chromium``) and skips, saying so, where there is none.
"""

from __future__ import annotations

import functools
import http.server
import importlib
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
DOCS = ROOT / "docs"

pytest.importorskip("sphinx", reason="the docs extra is not installed: pip install '.[docs]'")
pytest.importorskip("myst_parser", reason="the docs extra is not installed: pip install '.[docs]'")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The HTML site, built from scratch as CI builds it."""
    out = tmp_path_factory.mktemp("docs") / "html"
    command = [sys.executable, "-m", "sphinx", "-b", "html", "-W", "-n", "--keep-going", "-q", str(DOCS), str(out)]
    build = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stdout + build.stderr
    assert "WARNING" not in build.stderr and "ERROR" not in build.stderr, build.stderr
    return out


def test_the_site_builds_without_a_warning(site: Path) -> None:
    assert (site / "index.html").is_file() and (site / "searchindex.js").is_file()


def test_every_public_name_has_an_entry_in_the_reference(site: Path) -> None:
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        kd_public = importlib.import_module("kd_public")
    finally:
        sys.path.remove(str(DOCS / "_ext"))
    pages = "".join(page.read_text() for page in (site / "api").glob("*.html"))
    missing = [
        f"{module}.{name}"
        for module in kd_public.PUBLIC_MODULES
        for name in kd_public.public_names(kd_public.public_module(module))
        if f'id="{module}.{name}"' not in pages and f'id="module-{module}.{name}"' not in pages
    ]
    assert missing == []


def test_every_guide_is_in_the_site(site: Path) -> None:
    built = {page.stem for page in (site / "guide").glob("*.html")}
    assert built == {guide.stem for guide in (DOCS / "guide").glob("*.md")}


def test_the_benchmarks_page_is_generated_from_the_results_files(site: Path) -> None:
    page = (site / "benchmarks.html").read_text()
    results = sorted((DOCS / "results").glob("*.json"))
    if not results:
        assert "No results files are recorded yet." in page
    for path in results:
        assert f'id="{path.stem}"' in page


# --- in a real browser -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    """The site over HTTP on a free local port, as a reader's browser gets it."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base class's name)
        pass


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    playwright = pytest.importorskip("playwright.sync_api", reason="playwright is not installed: pip install '.[docs]'")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no Chromium on this machine (Debian: apt-get install chromium)")
    with playwright.sync_playwright() as p:
        instance = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            yield instance
        finally:
            instance.close()


def _open(browser: object, url: str) -> tuple[object, list[str]]:
    """A page at ``url`` once loaded, and the console errors and uncaught exceptions it raised."""
    page = browser.new_page()  # type: ignore[attr-defined]
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(url, wait_until="networkidle")
    return page, errors


def test_the_landing_page_opens_without_console_errors(browser: object, served: str) -> None:
    page, errors = _open(browser, f"{served}/index.html")
    assert "kerneldsl" in page.title()  # type: ignore[attr-defined]
    assert page.locator("a[href='guide/getting-started.html']").count() > 0  # type: ignore[attr-defined]
    assert errors == []


def test_the_reference_of_kd_kernel_opens_without_console_errors(browser: object, served: str) -> None:
    page, errors = _open(browser, f"{served}/api/kerneldsl.html#kerneldsl.kernel")
    entry = page.locator("[id='kerneldsl.kernel']")  # type: ignore[attr-defined]
    assert entry.count() == 1
    text = page.locator("dl:has([id='kerneldsl.kernel'])").first.inner_text()  # type: ignore[attr-defined]
    for parameter in ("grid", "block", "shared", "options", "precompile"):
        assert parameter in text
    assert errors == []


def test_search_finds_kd_kernel_without_console_errors(browser: object, served: str) -> None:
    page, errors = _open(browser, f"{served}/search.html?q=precompile")
    results = page.locator("#search-results li, ul.search li")  # type: ignore[attr-defined]
    results.first.wait_for(timeout=20_000)
    assert "kerneldsl.kernel" in page.locator("#search-results, ul.search").first.inner_text()  # type: ignore[attr-defined]
    assert errors == []
