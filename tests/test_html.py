"""The HTML report: self-contained, escaped, and checked in a real headless Chromium.

The browser test drives Debian's `chromium` over the DevTools protocol on a pipe (`--remote-debugging-pipe`:
NUL-terminated JSON on file descriptors 3 and 4 of the browser), so it needs no port, no websocket library
and no network. It records console errors, uncaught exceptions, every network request and every JavaScript
dialog while the page loads, measures each chart's box with getBoundingClientRect(), sorts a table through
the page's own script, and saves a full-page screenshot whose path is printed for the test log.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import re
import select
import shutil
import subprocess
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

from dflash_eval.commands.diff import diff
from dflash_eval.core.documents.results import read_run_document, read_samples
from dflash_eval.formats.references import published_tau
from dflash_eval.render.html import render_diff_html, render_run_html, write_html

STORED = Path(__file__).parent / "data" / "report_run"
EVIL = "<script>alert(1)</script>"
URL_ATTRIBUTES = {"src", "href", "xlink:href", "action", "formaction", "poster", "data", "background", "srcset",
                  "cite", "longdesc", "manifest", "ping", "codebase", "archive", "icon", "lowsrc", "dynsrc"}


class Page(HTMLParser):
    """Every start tag with its attributes, the text of each <script> and <style>, and all other text."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self.styles: list[str] = []
        self.text: list[str] = []
        self._in: str | None = None
        self.feed(html)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag in ("script", "style"):
            self._in = tag
            (self.scripts if tag == "script" else self.styles).append("")

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if tag == self._in:
            self._in = None

    def handle_data(self, data):
        if self._in == "script":
            self.scripts[-1] += data
        elif self._in == "style":
            self.styles[-1] += data
        else:
            self.text.append(data)


def external_references(html: str) -> list[str]:
    """Everything in the page that a browser could fetch: [] for a self-contained page."""
    page = Page(html)
    found = []
    for tag, attrs in page.tags:
        for name, value in attrs.items():
            value = (value or "").strip()
            if name in URL_ATTRIBUTES and not value.startswith(("#", "data:")):
                found.append(f"<{tag} {name}={value!r}>")
            if "://" in value:
                found.append(f"<{tag} {name}={value!r}> (a URL)")
        if tag in ("link", "iframe", "object", "embed", "base", "frame") or (tag == "script" and "src" in attrs):
            found.append(f"<{tag}> element")
        if tag == "meta" and (attrs.get("http-equiv") or "").lower() == "refresh":
            found.append("<meta http-equiv=refresh>")
    css = page.styles + [attrs["style"] for _, attrs in page.tags if attrs.get("style")]
    for text in css:
        for target in re.findall(r"url\(\s*['\"]?([^'\")]*)", text):
            if not target.startswith(("#", "data:")):
                found.append(f"url({target})")
        if "@import" in text:
            found.append("@import")
    return found


@pytest.fixture(scope="module")
def stored():
    return read_run_document(STORED), read_samples(STORED / "samples.jsonl")


@pytest.fixture(scope="module")
def html(stored):
    return render_run_html(*stored)


def evil_run(tmp_path: Path) -> Path:
    """A copy of the stored run whose drafter name, target name and one decoded token are script tags."""
    run, rows = read_run_document(STORED), read_samples(STORED / "samples.jsonl")
    run = copy.deepcopy(run)
    run["provenance"]["target"]["name"] = f"target{EVIL}"
    run["drafters"][1]["name"] = f"loop{EVIL}"
    for row in rows:
        if row["drafter"] == "repeat-anchor":
            row["drafter"] = f"loop{EVIL}"
        row["continuation_pieces"][1] = EVIL  # slot 1 of the first block, drafted by "trained" too
        if row["drafter"] == "trained":
            row["walk_draft_pieces"][0][0] = EVIL
    out = tmp_path / "evil"
    out.mkdir()
    (out / "run.json").write_text(json.dumps(run))
    (out / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


def test_the_report_parses_and_references_nothing_outside_itself(html):
    page = Page(html)
    assert html.startswith("<!DOCTYPE html>") and page.tags[0][0] == "html"
    assert external_references(html) == []
    assert len(page.scripts) == 1 and not any("src" in a for t, a in page.tags if t == "script")
    csp = next(a["content"] for t, a in page.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy")
    assert "default-src 'none'" in csp
    digest = base64.b64encode(hashlib.sha256(page.scripts[0].encode()).digest()).decode()
    assert f"'sha256-{digest}'" in csp  # the page's one script is the one the policy allows


def test_the_report_holds_every_section_and_its_charts_as_inline_svg(html, stored):
    page = Page(html)
    charts = [a for t, a in page.tags if t == "svg" and a.get("class") == "chart"]
    assert [c["aria-label"] for c in charts] == ["tau chart", "slots chart", "hist chart", "prompts chart",
                                                  "repetition chart"]
    assert "<?xml" not in html and "<!DOCTYPE svg" not in html and "<metadata" not in html
    ids = [a["id"] for _, a in page.tags if "id" in a]
    assert len(ids) == len(set(ids))  # the charts' ids do not collide
    text = " ".join(page.text)
    for heading in ("Provenance", "Summary", "Charts", "Per position", "Per prompt", "Repetition",
                    "Decoded samples: worst blocks", "Decoded samples by prompt", "Legend"):
        assert heading in text
    run, _ = stored
    prov = run["provenance"]
    for fact in (prov["target"]["fingerprint"], prov["tokenizer_hash"], prov["chat_template_hash"],
                 prov["git_sha"], prov["torch"], prov["transformers"], "4.00 [4.00, 4.00]", "1.05 [1.00, 1.07]",
                 "33/43 (76.7%)", "reach r_i", "token acceptance rate"):
        assert fact in text, fact
    assert "<tmp>/bed/qwen3" in text and "&lt;tmp&gt;/bed/qwen3" in html  # a path with <> is text
    assert html.count('<details class="prompt"') == 3 and 'class="x"' in html  # rejected tokens marked
    assert "first divergence at slot 1" in text


def test_tokens_and_names_with_script_tags_render_as_text(tmp_path):
    out = evil_run(tmp_path)
    html = render_run_html(read_run_document(out), read_samples(out / "samples.jsonl"))
    page = Page(html)
    assert len(page.scripts) == 1 and all(t not in ("img", "iframe") for t, _ in page.tags)
    assert EVIL not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    text = "".join(page.text)
    assert f"target{EVIL}" in text and f"loop{EVIL}" in text and f"<td class=\"a\">{EVIL}" not in html
    cells = re.findall(r'<td class="a">([^<]*)</td>', html)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in cells  # the accepted token, escaped, in its cell
    assert external_references(html) == []


def test_the_papers_tau_is_drawn_when_known_for_the_target_and_prompt_set(stored):
    run, rows = copy.deepcopy(stored[0]), stored[1]
    assert published_tau("Qwen/Qwen3-8B", "humaneval") is not None
    run["provenance"]["target"]["name"] = "Qwen/Qwen3-8B"
    run["provenance"]["prompts"]["sets"] = {"humaneval": 3}
    for d in run["drafters"]:
        d["by_prompt_set"] = {"humaneval": d["by_prompt_set"]["demo"]}
    html = render_run_html(run, rows)
    tau = published_tau("Qwen/Qwen3-8B", "humaneval")
    assert 'id="t-dfe-paper-tau-0"' in html and f"humaneval {tau:.2f}" in html
    assert 'id="t-dfe-paper-tau' not in render_run_html(*stored)  # none for the tiny target


def test_the_diff_page_shows_the_verdict_deltas_slots_and_changed_prompts(tmp_path):
    result = diff(f"{STORED}:trained", f"{STORED}:repeat-anchor")
    html = render_diff_html(result)
    page = Page(html)
    text = " ".join(page.text)
    assert external_references(html) == [] and len(page.scripts) == 1
    assert result["verdict"] in text and "Per slot, B - A" in text
    assert [a["aria-label"] for t, a in page.tags if t == "svg"] == ["delta chart", "dslots chart", "dhist chart"]
    assert f"{result['delta_tau_macro']['estimate']:+.3f}" in text
    assert "Regressed most (B worse)" in text and "Improved most (B better)" in text
    for example in result["regressed"]:
        assert example["prompt_id"] in text
    assert "A draft" in text and "B draft" in text
    path = write_html(tmp_path / "deep" / "er" / "diff.html", html)
    assert path.read_text() == html and sorted(p.name for p in path.parent.iterdir()) == ["diff.html"]


# ------------------------------------------------------------------------------------------ real browser

def chromium_binary() -> str | None:
    for name in ("chromium", "chromium-browser"):
        if shutil.which(name):
            return shutil.which(name)
    return "/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None


def required_chromium() -> str:
    """The browser for the checks that read a page as a person does: in CI its absence fails the test (.ci/run
    installs Debian's chromium first); on a developer's machine without it, the test is skipped, saying why."""
    binary = chromium_binary()
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing in CI: .ci/run installs Debian's chromium before the tests")
        pytest.skip("chromium is not installed (Debian: apt-get install chromium); CI installs it")
    return binary


class DevTools:
    """A headless Chromium driven over --remote-debugging-pipe (fd 3: commands in, fd 4: replies out)."""

    def __init__(self, binary: str, profile: Path, log: Path, timeout: float = 20.0):
        self.timeout, self.events, self._next, self._buffer = timeout, [], 0, b""
        commands_read, self._commands = os.pipe()
        self._replies, replies_write = os.pipe()

        def fds_3_and_4():  # in the child, before exec: move the pipe ends to 3 and 4 without clobbering
            import fcntl

            high_read = fcntl.fcntl(commands_read, fcntl.F_DUPFD, 10)
            high_write = fcntl.fcntl(replies_write, fcntl.F_DUPFD, 10)
            os.dup2(high_read, 3)
            os.dup2(high_write, 4)

        args = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--remote-debugging-pipe", f"--user-data-dir={profile}", "--no-first-run",
                "--no-default-browser-check", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--disable-default-apps", "--disable-extensions", "--mute-audio",
                "--disable-quic", "--hide-scrollbars", "about:blank"]
        self._log = log.open("wb")
        self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log,
                                        close_fds=False, preexec_fn=fds_3_and_4)
        os.close(commands_read)
        os.close(replies_write)

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._next += 1
        message = {"id": self._next, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        reply = self._wait(lambda m: m.get("id") == self._next)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def page_session(self) -> str:
        """A blank page's session with the Page domain enabled: where a test navigates and measures."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.send("Page.enable", session=session)
        return session

    def wait_event(self, method: str) -> dict:
        for event in self.events:
            if event.get("method") == method:
                return event
        return self._wait(lambda m: m.get("method") == method)

    def _wait(self, done) -> dict:
        deadline = time.monotonic() + self.timeout
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                message = json.loads(raw)
                if "method" in message:
                    self.events.append(message)
                    if message["method"] == "Page.javascriptDialogOpening":  # never leave the page blocked
                        self._dismiss(message.get("sessionId"))
                if done(message):
                    return message
            left = deadline - time.monotonic()
            if left <= 0 or self.process.poll() is not None:
                raise TimeoutError("no answer from chromium (see its log)")
            ready, _, _ = select.select([self._replies], [], [], left)
            if ready:
                chunk = os.read(self._replies, 1 << 20)
                if not chunk:
                    raise EOFError("chromium closed the DevTools pipe")
                self._buffer += chunk

    def _dismiss(self, session):
        self._next += 1
        message = {"id": self._next, "method": "Page.handleJavaScriptDialog", "params": {"accept": True},
                   "sessionId": session}
        os.write(self._commands, json.dumps(message).encode() + b"\0")

    def close(self):
        try:
            if self.process.poll() is None:
                self._next += 1
                os.write(self._commands, json.dumps({"id": self._next, "method": "Browser.close"}).encode() + b"\0")
                self.process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            os.close(self._commands)
            os.close(self._replies)
            self._log.close()


CHECKS = """(() => {
  const charts = [...document.querySelectorAll("svg.chart")].map(svg => {
    const box = svg.getBoundingClientRect();
    return {label: svg.getAttribute("aria-label"), width: box.width, height: box.height};
  });
  const table = document.getElementById("summary-table");
  const first = () => table.tBodies[0].rows[0].cells[0].textContent.trim();
  const before = first();
  table.tHead.rows[0].cells[1].click();  // tau macro, ascending: the weaker drafter first
  const ascending = first();
  table.tHead.rows[0].cells[1].click();
  return {charts, before, ascending, descending: first(), scripts: document.scripts.length,
          escaped: document.body.textContent.includes(%s), images: document.images.length};
})()"""


def test_the_report_in_headless_chromium(tmp_path):
    binary = required_chromium()
    started = time.monotonic()
    out = evil_run(tmp_path)
    report = write_html(tmp_path / "report.html", render_run_html(read_run_document(out), read_samples(out / "samples.jsonl")))
    url = report.resolve().as_uri()
    browser = DevTools(binary, tmp_path / "profile", tmp_path / "chromium.log")
    try:
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            browser.send(f"{domain}.enable", session=session)
        browser.send("Emulation.setDeviceMetricsOverride", {"width": 1400, "height": 1000, "deviceScaleFactor": 1,
                                                            "mobile": False}, session=session)
        browser.send("Page.navigate", {"url": url}, session=session)
        browser.wait_event("Page.loadEventFired")
        checks = browser.send("Runtime.evaluate", {"expression": CHECKS % json.dumps(EVIL), "returnByValue": True},
                              session=session)["result"]["value"]
        height = browser.send("Page.getLayoutMetrics", session=session)["cssContentSize"]["height"]
        shot = browser.send("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": 1400, "height": min(height, 12000), "scale": 1}}, session=session)
        screenshot = tmp_path / "report.png"
        screenshot.write_bytes(base64.b64decode(shot["data"]))
        print(f"\nscreenshot of the HTML report: {screenshot}")
        seen = [e for e in browser.events if e["method"] == "Page.javascriptDialogOpening"]
        # the probe: the harness does see a dialog when one opens (so "none" above means none)
        browser.send("Runtime.evaluate", {"expression": "alert('probe')"}, session=session)
        probe = [e for e in browser.events if e["method"] == "Page.javascriptDialogOpening"]
    finally:
        browser.close()

    errors = [e["params"]["entry"]["text"] for e in browser.events
              if e["method"] == "Log.entryAdded" and e["params"]["entry"]["level"] == "error"]
    errors += [str(e["params"]["args"]) for e in browser.events
               if e["method"] == "Runtime.consoleAPICalled" and e["params"]["type"] in ("error", "assert")]
    errors += [e["params"]["exceptionDetails"].get("text", "") for e in browser.events
               if e["method"] == "Runtime.exceptionThrown"]
    requests = [e["params"]["request"]["url"] for e in browser.events if e["method"] == "Network.requestWillBeSent"]
    assert errors == []
    assert seen == [] and [e["params"]["message"] for e in probe] == ["probe"]
    assert [r for r in requests if r != url and not r.startswith("data:")] == []  # nothing fetched
    assert len(checks["charts"]) == 5
    assert all(c["width"] > 100 and c["height"] > 100 for c in checks["charts"]), checks["charts"]
    assert checks["scripts"] == 1 and checks["images"] == 0 and checks["escaped"]
    assert checks["before"] == "trained" and checks["ascending"] == f"loop{EVIL}" and checks["descending"] == "trained"
    assert screenshot.stat().st_size > 50_000 and screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert time.monotonic() - started < 30


LAYOUT = """(() => {
  const top = id => { const e = document.getElementById(id); return e ? e.getBoundingClientRect().top + scrollY : null; };
  const sections = [...document.querySelectorAll("main > section")].map(s => s.id);
  // anything wider than the window outside a box that scrolls on its own (tables, decoded blocks, charts)
  const over = [...document.querySelectorAll("main *")].filter(e => e.getBoundingClientRect().right > innerWidth + 1
      && !e.closest(".scroll, table.sortable, .blk, figure")).map(e => e.tagName + "." + e.className);
  return {sections, over, page: document.documentElement.scrollWidth, window: innerWidth,
          verdict: top("verdict"), summary: top("summary"), provenance: top("provenance")};
})()"""


def hybrid_run(tmp_path: Path) -> Path:
    """The stored run as a hybrid target's run would read: a long kernels binding and long paths."""
    run, rows = read_run_document(STORED), read_samples(STORED / "samples.jsonl")
    run = copy.deepcopy(run)
    module = "transformers.models.qwen3_5.modeling_qwen3_5"
    run["provenance"]["kernels"] = {op: f"{module}.torch_{op}" for op in
                                    ("chunk_gated_delta_rule", "recurrent_gated_delta_rule", "causal_conv1d_fn",
                                     "causal_conv1d_update")}
    for d in run["drafters"]:
        d["path"] = "/home/someone/checkpoints/an-experiment-with-a-long-name/epoch_3_step_120000/" + d["name"]
    out = tmp_path / "hybrid"
    out.mkdir()
    (out / "run.json").write_text(json.dumps(run))
    (out / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


def test_results_come_first_and_nothing_overflows_at_700_and_1400_px(tmp_path):
    binary = required_chromium()
    out = hybrid_run(tmp_path)
    report = write_html(tmp_path / "report.html", render_run_html(read_run_document(out), read_samples(out / "samples.jsonl")))
    browser = DevTools(binary, tmp_path / "profile", tmp_path / "chromium.log")
    seen = {}
    try:
        session = browser.page_session()
        for width in (700, 1400):
            browser.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": 1000, "deviceScaleFactor": 1,
                                                                "mobile": False}, session=session)
            browser.events.clear()
            browser.send("Page.navigate", {"url": report.resolve().as_uri()}, session=session)
            browser.wait_event("Page.loadEventFired")
            seen[width] = browser.send("Runtime.evaluate", {"expression": LAYOUT, "returnByValue": True},
                                       session=session)["result"]["value"]
            height = browser.send("Page.getLayoutMetrics", session=session)["cssContentSize"]["height"]
            shot = browser.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": {
                "x": 0, "y": 0, "width": width, "height": min(height, 12000), "scale": 1}}, session=session)
            path = tmp_path / f"report-{width}px.png"
            path.write_bytes(base64.b64decode(shot["data"]))
            print(f"\nscreenshot at {width} px: {path}")
    finally:
        browser.close()
    for width, layout in seen.items():
        assert layout["page"] <= layout["window"] and layout["over"] == [], (width, layout)
        assert layout["sections"][:2] == ["verdict", "summary"], layout  # the verdict block first (core/verdict.py)
        assert layout["sections"][-2:] == ["provenance", "legend"], layout
        assert layout["verdict"] < 400 and layout["summary"] < 1000  # results within the first screen, even at 700 px
    assert seen[700]["provenance"] > seen[700]["summary"] + 2000


def test_run_and_estimate_share_one_layout():
    run_page = render_run_html(read_run_document(STORED), read_samples(STORED / "samples.jsonl"))
    sections = re.findall(r'<section id="([^"]+)"', run_page)
    assert sections[:2] == ["verdict", "summary"] and sections[-2:] == ["provenance", "legend"]
    template = Path(__file__).parent.parent / "dflash_eval" / "render" / "templates"
    for name in ("run.html.j2", "estimate.html.j2"):  # one provenance block (with the drafters), last
        text = (template / name).read_text()
        assert '<section id="provenance">' not in text and text.rstrip().endswith(
            "{{ provenance_section(provenance, drafters) }}\n{% endblock %}".strip()), name
