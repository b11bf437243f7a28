"""leaderboard.html, the board as a page to look at: the committed page holds every table of leaderboard.md, and a
real headless Chromium loads it without a script error, with every table and chart in its DOM."""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _counts(markdown: str) -> dict[str, int]:
    separators = [line for line in markdown.splitlines() if re.match(r"^\|(-+:?|-*:-*)\|", line)]
    return {"tables": len(separators), "headings": markdown.count("\n## ")}


def test_the_committed_page_holds_every_table_and_heading_of_the_markdown():
    page = (ROOT / "leaderboard.html").read_text()
    want = _counts((ROOT / "leaderboard.md").read_text())
    assert page.count("<table") == want["tables"] > 0
    assert page.count("<h2") == want["headings"] > 0
    assert page.count('class="chart"') > 0
    # nothing from outside the page: no server, no CDN
    assert "default-src 'none'" in page and not re.search(r"""(src|href)=["']https?://""", page)


def _browser() -> str | None:
    return next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome")
                 if shutil.which(name)), None)


@pytest.mark.slow
def test_the_board_page_loads_in_a_browser_with_every_table_and_chart(tmp_path):
    browser = _browser()
    if browser is None and not os.environ.get("CI"):
        pytest.skip("no chromium here (.ci/run installs it)")
    assert browser, "CI runs the board page in chromium: .ci/run installs it with apt-get"
    page = (ROOT / "leaderboard.html").resolve()
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*flags, "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    body = re.search(r"<body([^>]*)>", dom)
    assert body, dom[-500:]
    attrs = dict(re.findall(r'data-(\w+)="([^"]*)"', body.group(1)))
    markdown = _counts((ROOT / "leaderboard.md").read_text())
    assert attrs.get("ready") == "yes" and attrs.get("errors") == "0", attrs
    assert int(attrs["tables"]) == markdown["tables"] and int(attrs["charts"]) == page.read_text().count(
        'class="chart"') > 0, attrs
    shot = ROOT / "reports" / "leaderboard.png"
    shot.parent.mkdir(exist_ok=True)
    subprocess.run([*flags, f"--screenshot={shot}", "--window-size=1400,2000", page.as_uri()],
                   capture_output=True, timeout=120)
    from PIL import Image

    with Image.open(shot) as image:
        low, high = image.convert("L").getextrema()
    assert high - low > 64, "the screenshot is blank"
