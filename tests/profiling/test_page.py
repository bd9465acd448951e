"""The profile page as a reader gets it: real runs profiled, the page rendered by a real browser
(headless Chromium), the DOM it built read back and its pixels looked at. What a reader needs:
the verdict and the next thing to try first, axes with titles and units, one bar per measured
step numbered as in the text report, figures that are the text report's, legends only for what
is drawn, and no duration written as "0.00 s"."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest
from PIL import Image

import datapipe as dp
from datapipe.profiling.plot import COMPUTE, WAIT
from datapipe.wording import format_duration
from tests.conftest import convert, run_cli_process
from tests.imagegen import make_image_folder

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
WINDOW = (1000, 2400)
VOID = {"meta", "br", "img", "input", "link", "hr", "col", "area", "base", "wbr", "source"}


@pytest.fixture(scope="module")
def browser() -> str:
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("no Chromium on this machine to render the page (.ci/run installs Debian's "
                "chromium; `apt-get install chromium`)")


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("page")
    src = make_image_folder(root / "src", classes=2, per_class=24, size=(64, 48))
    convert("images", src, root / "out", "--short-side", "48")
    return root / "out"


class Element:
    def __init__(self, tag: str, attrs: dict[str, str], chart: int | None) -> None:
        self.tag, self.attrs, self.text = tag, attrs, ""
        self.chart = chart  # which <svg> of the page it is in (0: the first), if any

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())


class Dom(HTMLParser):
    """Every element of the rendered DOM, in document order, each with all the text inside
    it and the chart it belongs to."""

    def __init__(self, markup: str) -> None:
        super().__init__()
        self.elements: list[Element] = []
        self._open: list[Element] = []
        self._charts = 0
        self.feed(markup)

    def _chart(self) -> int | None:
        return self._charts - 1 if any(e.tag == "svg" for e in self._open) else None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "svg":
            self._charts += 1
        element = Element(tag, {k: v or "" for k, v in attrs}, self._chart())
        self.elements.append(element)
        if tag not in VOID:
            self._open.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append(Element(tag, {k: v or "" for k, v in attrs}, self._chart()))

    def handle_endtag(self, tag: str) -> None:
        while self._open and self._open.pop().tag != tag:
            pass

    def handle_data(self, data: str) -> None:
        for element in self._open:
            element.text += data

    def find(self, tag: str | None = None, cls: str | None = None, id_: str | None = None,
             chart: int | None = None) -> list[Element]:
        return [e for e in self.elements if (tag is None or e.tag == tag)
                and (cls is None or cls in e.classes)
                and (id_ is None or e.attrs.get("id") == id_)
                and (chart is None or e.chart == chart)]

    def texts(self, cls: str, chart: int | None = None) -> list[str]:
        return [e.text for e in self.find(cls=cls, chart=chart)]


def render(browser: str, page: Path, tmp: Path) -> tuple[Dom, Path]:
    """The page as Chromium builds it (its DOM) and paints it (a PNG)."""
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--user-data-dir={tmp / 'chromium-profile'}"]
    url = page.resolve().as_uri()
    dumped = subprocess.run([browser, *flags, "--dump-dom", url], capture_output=True,
                            text=True, timeout=120)
    assert dumped.returncode == 0 and "<svg" in dumped.stdout, dumped.stderr[-2000:]
    png = tmp / f"{page.stem}.png"
    shot = subprocess.run([browser, *flags, f"--screenshot={png}",
                           f"--window-size={WINDOW[0]},{WINDOW[1]}", url], capture_output=True,
                          text=True, timeout=120)
    assert shot.returncode == 0 and png.is_file(), shot.stderr[-2000:]
    return Dom(dumped.stdout), png


def plain(words: str) -> str:
    return words.replace("`", "")


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def assert_painted(png: Path) -> None:
    """Not blank: the page's text and both bar colours are on the screen."""
    image = Image.open(png).convert("RGB")
    assert image.size == WINDOW
    colours = image.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50  # text, bars, axes: not a blank page
    present = {rgb for _, rgb in colours}
    for hex_colour in (WAIT, COMPUTE):
        rgb = tuple(int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
        assert rgb in present, f"no {hex_colour} bar painted"


def assert_reads_like_the_report(dom: Dom, result: dict, report: str) -> None:
    """Verdict and next action first; the figures table is the text report's rows."""
    head, _, rest = result["verdict"]["text"].partition(": ")
    verdict = dom.find(id_="verdict")[0]
    assert dom.find("h1")[0].text == head[:1].upper() + head[1:]
    assert plain(rest) in verdict.text
    assert dom.find(id_="next")[0].text == f"Next: {plain(result['verdict']['next'])}"
    rows = [row.text for row in dom.find("tr")]
    assert len(rows) > 5
    for line in report.splitlines()[3:]:
        name, _, value = line.strip().partition("  ")
        if name and not name.startswith("note:"):
            assert f"{name}{value.strip()}" in rows, line
    body = dom.find("body")[0].text
    assert "0.00 s" not in body and "0.00 s" not in report


def assert_step_chart(dom: Dom, result: dict, report: str) -> None:
    """One bar per measured step, numbered as in the JSON timeline; labelled axes; the median
    line at the text report's median."""
    measured = [s["step"] for s in result["timeline"] if s["kind"] == "normal" and
                not s["first"]]
    bars = dom.find("g", cls="measured")
    assert [int(b.attrs["data-step"]) for b in bars] == measured
    assert len(bars) == result["measured_steps"]
    titles = dom.texts("axis-title", chart=0)
    assert "step (in the order the loop ran them)" in titles
    assert any(re.fullmatch(r"step time \((s|ms|µs)\)", t) for t in titles), titles
    drawn = [s["step"] for s in result["timeline"] if not s["first"]]
    x_ticks = [int(t) for t in dom.texts("x-tick", chart=0)]
    assert len(x_ticks) >= 3 and set(x_ticks) <= set(range(min(drawn), max(drawn) + 1))
    tallest = max(s["seconds"] for s in result["timeline"] if not s["first"])
    unit = {"s": 1.0, "ms": 1e-3, "µs": 1e-6}[titles[-1].split("(")[1].rstrip(")")]
    y_ticks = [float(t.replace(",", "")) for t in dom.texts("y-tick", chart=0)]
    assert y_ticks[0] == 0 and tallest <= y_ticks[-1] * unit < 2 * tallest
    p50 = format_duration(result["step_seconds"]["p50"])
    assert dom.texts("median-label") == [f"median {p50}"]
    assert re.search(rf"step time p50 / p95 / max +{re.escape(p50)} / ", report), report


def test_a_real_loader_run_reads_in_a_browser(browser: str, shards: Path,
                                              tmp_path: Path) -> None:
    page = tmp_path / "profile.html"
    with dp.Loader(shards, batch_size=4, num_workers=1,
                   transform=dp.image.RandomResizedCrop(32)) as loader, \
            dp.profile(html=page, scaling_test=True) as prof:
        for _ in prof.wrap(loader):
            busy(0.004)
            prof.step()
    result, report = prof.results(), prof.report()
    dom, png = render(browser, page, tmp_path)
    assert_reads_like_the_report(dom, result, report)
    assert_step_chart(dom, result, report)
    probes = [s["step"] for s in result["timeline"] if s["kind"] != "normal"]
    assert len(probes) == 10  # the oracle's 5 and the scaling test's 5, drawn grey
    assert [int(g.attrs["data-step"]) for g in dom.find("g", cls="probe")] == probes
    assert any("probe step" in t for t in dom.texts("legend"))
    # The queue chart: a bar per measured step on an axis of whole batches up to capacity.
    assert "batches ready" in dom.texts("axis-title", chart=1)
    capacity = result["queue"]["capacity"]
    assert dom.texts("y-tick", chart=1) == [str(n) for n in range(capacity + 1)]
    assert len(dom.find("rect", cls="queue", chart=1)) == result["measured_steps"]
    # Stage bars in plain words and sensible units.
    labels = dom.texts("bar-label")
    assert "decoding images (workers)" in labels and "hand-off (main)" not in labels
    for value in dom.texts("bar-value"):
        assert re.fullmatch(r"[0-9.]+ (s|ms|µs|ns)( \(\d+%\))?", value), value
    assert_painted(png)


def test_a_compute_bound_run_names_the_scaling_test_to_run(browser: str,
                                                           tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("".join(f"document {i} " * (i % 7 + 1) + "\n"
                                            for i in range(200)))
    convert("text", tmp_path / "a.txt", tmp_path / "t", "--tokenizer", "bytes")
    script = tmp_path / "train.py"
    script.write_text(
        "import sys, time\nimport datapipe as dp\n"
        "loader = dp.TokenLoader(sys.argv[1], max_tokens=256, num_workers=1)\n"
        "for step, batch in zip(range(10), loader):\n"
        "    end = time.perf_counter() + 0.08\n"
        "    while time.perf_counter() < end: pass\n")
    command = [sys.executable, str(script), str(tmp_path / "t")]
    prefix = tmp_path / "prof"
    ran = run_cli_process("profile", "--out", prefix, "--", *command)
    assert ran.returncode == 0, ran.stderr
    result = json.loads(Path(f"{prefix}.json").read_text())
    assert result["verdict"]["regime"] == "compute-bound", result["verdict"]["text"]
    how = f"`datapipe profile --scaling-test -- {shlex.join(command)}`"
    assert how in result["verdict"]["text"] and result["verdict"]["next"] == how
    dom, png = render(browser, Path(f"{prefix}.html"), tmp_path)
    report = Path(f"{prefix}.txt").read_text()
    assert_reads_like_the_report(dom, result, report)
    assert_step_chart(dom, result, report)
    assert not dom.find("g", cls="probe")  # no probes run, none drawn, none in the legend
    assert not any("probe" in t for t in dom.texts("legend"))
    assert_painted(png)
