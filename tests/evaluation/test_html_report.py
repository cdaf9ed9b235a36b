"""The evaluation's HTML report in a real headless Chromium: the page renders, and each plot drew.

Chromium (Debian's ``chromium`` package, installed by ``.ci/run``) loads the report twice at the same window
size: once with ``--dump-dom`` after a small script, appended to a copy of the page, has written every
figure's layout box into the DOM, and once with ``--screenshot``. The test crops each figure's box out of the
screenshot and checks that something was drawn there: many non-white pixels in several colours (the bars of
the plots), where a missing or broken SVG leaves the box white.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest
import torch
import torch.nn as nn
from PIL import Image

import neuroncc
from neuroncc.evaluation.html import render_html

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--force-device-scale-factor=1"]
WIDTH = 1200
LAYOUT_SCRIPT = """<pre id="layout"></pre><script>
const boxes = {};
for (const figure of document.querySelectorAll("figure")) {
  const r = figure.getBoundingClientRect();
  boxes[figure.id] = [r.left + window.scrollX, r.top + window.scrollY, r.width, r.height];
}
document.getElementById("layout").textContent = "LAYOUT" + JSON.stringify(
  {boxes: boxes, height: document.documentElement.scrollHeight}) + "END";
</script>"""
FIGURES = {"plot-errors", "plot-compile", "plot-steady-state", "plot-kernels"}


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed: .ci/run installs Debian's chromium package")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return found


def _run_chromium(chromium: str, profile, *arguments: str) -> str:
    done = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *arguments],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.norm, self.fc2 = nn.Linear(16, 32), nn.LayerNorm(32), nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.norm(self.fc1(x)))).softmax(-1)


@pytest.fixture(scope="module")
def page():
    torch._dynamo.reset()
    report = neuroncc.evaluate(Block(), torch.randn(8, 16), train=True, shapes=[[(4, 16)]], repeat=3)
    return render_html(report)


def _render(chromium: str, page: str, directory) -> tuple[str, dict[str, tuple[float, int]]]:
    """Load ``page`` in Chromium; returns its DOM and, per figure, (share of non-white pixels, colours)."""
    probe = directory / "probe.html"
    probe.write_text(page.replace("</body>", LAYOUT_SCRIPT + "</body>"))
    dom = _run_chromium(chromium, directory / "profile", f"--window-size={WIDTH},2000", "--dump-dom", probe.as_uri())
    layout = json.loads(dom.split("LAYOUT", 1)[1].split("END", 1)[0].replace("&quot;", '"'))
    height = int(layout["height"]) + 10
    screenshot = directory / "report.png"
    _run_chromium(chromium, directory / "profile", f"--window-size={WIDTH},{height}", f"--screenshot={screenshot}",
                  probe.as_uri())
    image = Image.open(screenshot).convert("RGB")
    assert image.size == (WIDTH, height)
    drawn = {}
    for name, (left, top, width, box_height) in layout["boxes"].items():
        assert width > 200 and box_height > 80, f"{name} has no room: {width}x{box_height}"
        region = image.crop((int(left), int(top), int(left + width), int(top + box_height)))
        pixels = region.width * region.height
        colours = region.getcolors(pixels)
        ink = sum(count for count, colour in colours if colour != (255, 255, 255))
        drawn[name] = (ink / pixels, len(colours))
    return dom, drawn


def test_report_renders_in_chromium_and_every_plot_drew(page, tmp_path):
    chromium = _chromium()
    assert set(re.findall(r'<figure id="([^"]+)"', page)) == FIGURES
    dom, drawn = _render(chromium, page, tmp_path)
    assert set(drawn) == FIGURES
    for name, (ink, colours) in drawn.items():
        assert ink > 0.01, f"{name}: only {ink:.2%} of its pixels drawn"
        assert colours > 10, f"{name}: {colours} colours, a chart has axes, text and coloured bars"
    assert "Verdict:" in dom and "PASS" in dom


def test_a_blank_plot_is_caught(page, tmp_path):
    """The check above can fail: a figure whose SVG draws nothing is seen as blank."""
    chromium = _chromium()
    start = page.index('<figure id="plot-kernels">')
    end = page.index("</figure>", start)
    blank = page[:start] + '<figure id="plot-kernels"><svg width="800" height="300"></svg>' + page[end:]
    _, drawn = _render(chromium, blank, tmp_path)
    ink, colours = drawn["plot-kernels"]
    assert ink < 0.001 and colours <= 2
    assert drawn["plot-errors"][0] > 0.01
