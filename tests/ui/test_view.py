#!/usr/bin/env python3
"""Browser test of whyslow's web UI: `whyslow view` of a cpu_split recording, driven by Playwright in the
system's Chromium (apt's /usr/bin/chromium; Playwright's own browser download is never used).

Usage: test_view.py WHYSLOW_BINARY WORKLOADS_BIN_DIR OUT_DIR   (run by crates/cli/tests/ui.rs)
Screenshots of each view are saved in OUT_DIR."""

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request

from playwright.sync_api import sync_playwright

CHROMIUM = os.environ.get("WHYSLOW_CHROMIUM", "/usr/bin/chromium")


def log(msg):
    print(f"ui test: {msg}", flush=True)


def start_view(whyslow, files):
    p = subprocess.Popen([whyslow, "view", *files], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    m = re.search(r"(http://127\.0\.0\.1:\d+/)", line)
    if not m:
        p.kill()
        raise SystemExit(f"whyslow view printed no URL: {line!r} {p.stderr.read()}")
    return p, m.group(1)


def stop(p):
    p.terminate()
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def serve(whyslow, out, name):
    """A `whyslow serve` on a free port with its data in OUT/NAME: (the process, its URL, api(path, body=None),
    which GETs, or POSTs body as JSON, and returns the JSON answer)."""
    data = os.path.join(out, name)
    shutil.rmtree(data, ignore_errors=True)
    agent = subprocess.Popen([whyslow, "serve", "--listen", "127.0.0.1:0", "--data-dir", data],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    line = agent.stderr.readline()
    m = re.search(r"http://(\S+?)/?(\s|$)", line)
    if not m:
        stop(agent)
        raise AssertionError(f"whyslow serve did not start: {line}")
    url = f"http://{m.group(1)}/"

    def api(path, body=None):
        req = urllib.request.Request(url + path, method="POST" if body else "GET",
                                     data=json.dumps(body).encode() if body else None,
                                     headers={"Content-Type": "application/json"})
        return json.loads(urllib.request.urlopen(req).read())

    return agent, url, api


# The agent's manager scans /proc every 250 ms (SCAN_INTERVAL in crates/serve/src/recorder.rs). A wait on the agent
# is bounded by its own scans (read from /healthz), not by seconds: a starved agent scans less often and the bound
# stretches with it.
SCANS_PER_S = 4


def scan_beat(api):
    """When the agent's manager last scanned /proc: a new value per scan."""
    return api("healthz")["recorder"]["last_scan_unix_ns"]


def until(api, what, cond, scans):
    """Polls cond() until it gives a true value, which it returns; fails once the agent has scanned /proc `scans`
    times without it."""
    seen, last = 0, scan_beat(api)
    while True:
        got = cond()
        if got:
            return got
        beat = scan_beat(api)
        if beat != last:
            seen, last = seen + 1, beat
        assert seen < scans, f"{what}: not after {scans} scans of the agent"
        time.sleep(0.05)


def windows(api, tid):
    return next(t for t in api("api/v1/targets?windows=true") if t["id"] == tid)["windows"]["count"]


def await_windows(api, tid, n, window_s=1):
    """Until target `tid` has `n` stored windows: the session cuts one every window_s, and the first waits for the
    session to open and the symbolizer to read the workload (five windows' time)."""
    until(api, f"{n} windows of target {tid}", lambda: windows(api, tid) >= n, (n + 5) * 2 * window_s * SCANS_PER_S)


def followed(api, tid, pids):
    """The agent's /processes entries of `pids` under target `tid` once it lists them all. A process running when
    a scan begins is followed by that scan, listed at its end: a few scans bound it."""
    def listed():
        ps = {p["pid"]: p for p in api(f"api/v1/processes?target={tid}")}
        return all(pid in ps for pid in pids) and [ps[pid] for pid in pids]
    return until(api, f"pids {pids} followed", listed, 4)


def metric(url, name):
    text = urllib.request.urlopen(url + "metrics").read().decode()
    return next((float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name)), None)


def frames(page):
    return page.evaluate("window.whyslow.frames()")


def widest(fs, name):
    got = [f for f in fs if f["name"] == name]
    assert got, f"no frame {name} drawn: {[f['name'] for f in fs][:40]}"
    return max(got, key=lambda f: f["width"])


def main():
    whyslow, bindir, out = sys.argv[1:4]
    os.makedirs(out, exist_ok=True)
    t0 = time.time()
    data = os.path.join(out, "cpu_split.data")
    subprocess.run([whyslow, "record", "-F", "999", "-o", data, "--", os.path.join(bindir, "cpu_split"), "6"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log(f"recorded in {time.time() - t0:.1f} s")
    view, url = start_view(whyslow, [data])
    try:
        # The static page is embedded and served at / with the API beside it.
        with urllib.request.urlopen(url) as r:
            assert b"/ui/app.js" in r.read()
        with sync_playwright() as pw:
            t1 = time.time()
            browser = pw.chromium.launch(executable_path=CHROMIUM)
            page = new_page(browser)
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url)
            page.wait_for_function("window.whyslow && window.whyslow.ready", timeout=10000)
            log(f"browser up and first render in {time.time() - t1:.2f} s")

            # Flame graph: burn_a/b/c at 60/30/10 of main's width (+-3 points).
            fs = frames(page)
            main_w = widest(fs, "main")["width"]
            shares = {n: 100 * widest(fs, n)["width"] / main_w for n in ("burn_a", "burn_b", "burn_c")}
            log(f"widths as % of main: { {k: round(v, 1) for k, v in shares.items()} }")
            for name, want in (("burn_a", 60), ("burn_b", 30), ("burn_c", 10)):
                assert abs(shares[name] - want) <= 3, f"{name}: {shares[name]:.1f}% of main, want {want} +-3"
            page.screenshot(path=os.path.join(out, "flame.png"), full_page=True)

            # Search: `/` focuses the box; burn_b is highlighted and its share (~30%) is shown.
            page.keyboard.press("/")
            assert page.evaluate("document.activeElement.id") == "search"
            page.keyboard.type("burn_b")
            page.wait_for_function("window.whyslow.frames().some(f => f.matched)")
            fs = frames(page)
            matched = {f["name"] for f in fs if f["matched"]}
            assert matched == {"burn_b"}, matched
            text = page.inner_text("#match")
            got = float(page.get_attribute("#match", "data-pct"))
            log(f"search burn_b: {text!r}")
            assert abs(got - shares["burn_b"] * main_w / widest(fs, "all")["width"]) <= 1.0, (got, shares)
            assert 26 <= got <= 34, text
            page.screenshot(path=os.path.join(out, "search.png"), full_page=True)

            # Clicking burn_a zooms to it: it spans the whole width, the breadcrumb ends in it.
            page.keyboard.press("Escape")
            a = widest(frames(page), "burn_a")
            box = page.locator("#flame").bounding_box()
            page.mouse.click(box["x"] + a["x"] + a["width"] / 2, box["y"] + a["y"] + 9)
            page.wait_for_function("window.whyslow.zoomed() === 'burn_a'")
            fs = frames(page)
            assert abs(widest(fs, "burn_a")["width"] - box["width"]) < 2, widest(fs, "burn_a")
            assert "burn_b" not in {f["name"] for f in fs}
            assert page.inner_text("#breadcrumb").strip().endswith("burn_a")
            page.screenshot(path=os.path.join(out, "zoom.png"), full_page=True)
            # Escape resets the zoom.
            page.keyboard.press("Escape")
            page.wait_for_function("window.whyslow.zoomed() === 'all'")

            # The view state is in the URL: a link opens the same zoom in another page; Back and Forward
            # move between the zooms shown.
            page.mouse.click(box["x"] + a["x"] + a["width"] / 2, box["y"] + a["y"] + 9)
            page.wait_for_function("window.whyslow.zoomed() === 'burn_a'")
            link = page.url
            assert "burn_a" in urllib.parse.unquote(link.split("zoom=")[-1]), link
            other = new_page(browser)
            other.goto(link)
            other.wait_for_function("window.whyslow && window.whyslow.ready && window.whyslow.zoomed() === 'burn_a'",
                                    timeout=10000)
            assert abs(widest(frames(other), "burn_a")["width"] - box["width"]) < 2
            other.close()
            page.go_back()
            page.wait_for_function("window.whyslow.zoomed() === 'all'")
            page.go_forward()
            page.wait_for_function("window.whyslow.zoomed() === 'burn_a'")
            log(f"a link to the zoom: {link}")
            page.keyboard.press("Escape")
            page.wait_for_function("window.whyslow.zoomed() === 'all'")

            # Keyboard: the first arrow focuses the zoomed frame; up goes to the heaviest child, right and left
            # to siblings (by name), down to the parent; Enter zooms, Escape unzooms.
            page.keyboard.press("ArrowUp")
            assert page.evaluate("window.whyslow.focused()") == "all"
            path = []
            while len(path) < 12 and path[-1:] != ["run_round"]:
                page.keyboard.press("ArrowUp")
                path.append(page.evaluate("window.whyslow.focused()"))
            assert path[-3:] == ["__libc_start_call_main", "main", "run_round"], path
            walk = []
            for key in ("ArrowUp", "ArrowRight", "ArrowRight", "ArrowRight", "ArrowLeft"):
                page.keyboard.press(key)
                walk.append(page.evaluate("window.whyslow.focused()"))
            assert walk == ["burn_a", "burn_b", "burn_c", "burn_c", "burn_b"], walk
            assert page.inner_text("#focus-info").startswith("burn_b: total")
            page.keyboard.press("Enter")
            assert page.evaluate("window.whyslow.zoomed()") == "burn_b"
            page.keyboard.press("ArrowDown")
            assert page.evaluate("window.whyslow.focused()") == "run_round"
            page.screenshot(path=os.path.join(out, "keyboard.png"), full_page=True)
            page.keyboard.press("Escape")
            assert page.evaluate("window.whyslow.zoomed()") == "all"

            # Timeline: 100 ms slices over the ~6 s run. Dragging over its first half halves the samples every
            # view shows, and exactly the selected slices' sum.
            tl = page.evaluate("window.whyslow.timeline()")
            everything = page.evaluate("window.whyslow.total")
            assert len(tl["values"]) >= 55 and sum(tl["values"]) == everything, (tl["values"], everything)
            selected = select_timeline(page, 0, 0.5)
            half = page.evaluate("window.whyslow.total")
            # A link to the selection shows the same samples; Back returns to the whole range.
            link = page.url
            assert f"sel={selected[0]}-{selected[1]}" in link, (link, selected)
            other = new_page(browser)
            other.goto(link)
            other.wait_for_function(f"window.whyslow && window.whyslow.ready && window.whyslow.total === {half}",
                                    timeout=10000)
            other.close()
            page.go_back()
            page.wait_for_function(f"window.whyslow.total === {everything}")
            page.go_forward()
            page.wait_for_function(f"window.whyslow.total === {half}")
            log(f"timeline: {len(tl['values'])} slices, {everything} samples; first half {selected} -> {half}")
            # Half the width is half the slices, give or take the one the drag rounds to, and the views show
            # exactly those slices' samples. (How many that is depends on the machine: beside other work the
            # first half of a run held 44.6% of its samples.)
            frac = (selected[1] - selected[0]) / len(tl["values"])
            assert abs(frac - 0.5) <= 1 / len(tl["values"]) and 0 < half < everything, (half, everything, selected)
            assert half == sum(tl["values"][selected[0]:selected[1]]), (half, selected)
            assert int(page.get_attribute("#shown", "data-total")) == half
            fs = frames(page)
            shares = {n: 100 * widest(fs, n)["width"] / widest(fs, "main")["width"] for n in ("burn_a", "burn_b")}
            assert abs(shares["burn_a"] - 60) <= 3 and abs(shares["burn_b"] - 30) <= 3, shares
            page.screenshot(path=os.path.join(out, "timeline.png"), full_page=True)

            # Table: sorted by self (descending) burn_a, burn_b, burn_c lead; a click on Self sorts ascending.
            page.click("#tabs button[data-view=table]")
            names = page.eval_on_selector_all("#fn-table tbody tr", "rs => rs.map(r => r.dataset.name)")
            assert names[:3] == ["burn_a", "burn_b", "burn_c"], names[:5]
            # The table is of the selected half: its self column adds up to the samples shown.
            selfs = page.eval_on_selector_all("#fn-table tbody tr td:nth-child(2)",
                                              "ts => ts.map(t => parseFloat(t.textContent.replace(/,/g, '')))")
            assert sum(selfs) == half, (sum(selfs), half)
            page.click("#fn-table th[data-sort=self]")
            assert page.get_attribute("#fn-table th[data-sort=self]", "aria-sort") == "ascending"
            selfs = page.eval_on_selector_all("#fn-table tbody tr td:nth-child(2)",
                                              "ts => ts.map(t => parseFloat(t.textContent.replace(/,/g, '')))")
            assert selfs == sorted(selfs), selfs[:10]
            page.fill("#filter", "burn_")
            names = page.eval_on_selector_all("#fn-table tbody tr", "rs => rs.map(r => r.dataset.name)")
            assert sorted(names) == ["burn_a", "burn_b", "burn_c"], names
            page.screenshot(path=os.path.join(out, "table.png"), full_page=True)

            # Sandwich of burn_b: its callers (run_round, main) above it at its full width.
            page.click("#fn-table tr[data-name=burn_b] button.sw")
            page.wait_for_function("window.whyslow.sandwichFrames().callers.length > 0")
            sw = page.evaluate("window.whyslow.sandwichFrames()")
            callers = {f["name"]: f for f in sw["callers"]}
            full = callers["burn_b"]["width"]
            assert callers["burn_b"]["depth"] == 0 and callers["run_round"]["depth"] == 1, callers
            assert abs(callers["run_round"]["width"] - full) < 1 and abs(callers["main"]["width"] - full) < 1
            assert sw["callees"][0]["name"] == "burn_b"
            page.screenshot(path=os.path.join(out, "sandwich.png"), full_page=True)

            # The second half of the timeline holds the rest of the samples.
            page.click("#tabs button[data-view=flame]")
            second = select_timeline(page, 0.5, 1.0)
            rest = page.evaluate("window.whyslow.total")
            assert second[0] == selected[1] and rest == everything - half, (second, selected, rest, everything, half)
            # Two ranges of one target in the Diff view: the first half as the baseline, the second half shown.
            select_timeline(page, 0, 0.5)
            page.click("#sel-base")
            page.wait_for_selector("#diff-table", timeout=10000)
            page.click("#tabs button[data-view=flame]")
            select_timeline(page, 0.5, 1.0)
            page.click("#tabs button[data-view=diff]")
            page.wait_for_function("window.whyslow.diffTotals()")
            totals = page.evaluate("window.whyslow.diffTotals()")
            log(f"diff of two ranges: {totals}, ranges: {page.inner_text('#diff-ranges')!r}")
            assert totals == {"before": half, "after": everything - half}, (totals, half, everything)
            page.screenshot(path=os.path.join(out, "diff_ranges.png"), full_page=True)
            page.click("#tabs button[data-view=flame]")
            page.click("#sel-clear")
            page.wait_for_function(f"window.whyslow.total === {everything}")

            # Doctor view renders (cpu_split has no anti-pattern: hot paths link into the flame graph).
            page.click("#tabs button[data-view=doctor]")
            page.wait_for_selector("#doctor .fn, #doctor p", timeout=10000)
            page.screenshot(path=os.path.join(out, "doctor.png"), full_page=True)
            links = page.locator("#doctor .fn")
            if links.count():
                name = links.first.inner_text()
                links.first.click()
                page.wait_for_function("(n) => window.whyslow.zoomed() === n", arg=name)

            assert not errors, errors
            browser.close()
        # The tree the page draws comes from the service's API.
        target = json.load(urllib.request.urlopen(url + "api/v1/targets?windows=true"))[0]
        assert target["windows"]["count"] == 1, target
    finally:
        stop(view)
    threads_view(whyslow, bindir, out)
    live_processes(whyslow, bindir, out)
    diff_view(whyslow, bindir, out)
    doctor_view(whyslow, bindir, out)
    findings_track(whyslow, bindir, out)
    label_filter(whyslow, bindir, out)
    memory_view(whyslow, bindir, out)
    log(f"passed in {time.time() - t0:.1f} s (screenshots in {out})")


def select_timeline(page, a, b):
    """Drags over the timeline from fraction a to fraction b of its width; the selected slices [i, j)
    once the tree of that range is drawn."""
    loads = page.evaluate("window.whyslow.loads")
    box = page.locator("#timeline").bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + a * box["width"] + (1 if a == 0 else 0), y)
    page.mouse.down()
    page.mouse.move(box["x"] + b * box["width"] - (1 if b == 1 else 0), y, steps=8)
    page.mouse.up()
    page.wait_for_function(f"window.whyslow.loads > {loads}")
    return page.evaluate("window.whyslow.timeline().sel")


def next_polls(page, cond):
    """Until `cond` (JavaScript) holds in the Processes view, which polls the agent every few seconds: what the agent
    lists when this is called is shown by the second poll from now (the first may have asked before)."""
    polls = page.evaluate("window.whyslow.polls")
    # The view's own polls bound the wait; the timeout only bounds how long a hung page takes to show.
    page.wait_for_function(f"({cond}) || window.whyslow.polls > {polls + 1}", timeout=120000)
    assert page.evaluate(cond), f"{cond}: not by the view's second poll"


def new_page(browser):
    """A page with the UI's test hooks (window.whyslow) turned on before its scripts run."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.add_init_script("window.whyslowTestHooks = true")
    return page


def open_page(pw, url):
    browser = pw.chromium.launch(executable_path=CHROMIUM)
    page = new_page(browser)
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url)
    page.wait_for_function("window.whyslow && window.whyslow.ready", timeout=10000)
    return browser, page, errors


def threads_view(whyslow, bindir, out):
    """Four worker threads: filtering on one shows exactly its samples (a quarter, +-5 points), filtering
    on the process shows them all."""
    f = os.path.join(out, "threads.data")
    subprocess.run([whyslow, "record", "-F", "999", "-o", f, "--", os.path.join(bindir, "threads"), "0.5"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    view, url = start_view(whyslow, [f])
    try:
        with sync_playwright() as pw:
            browser, page, errors = open_page(pw, url)
            full = page.evaluate("window.whyslow.total")
            threads = page.evaluate("window.whyslow.threads()")
            workers = [t for t in threads if t["name"].startswith("worker-")]
            assert len(workers) == 4, threads
            w = workers[0]
            loads = page.evaluate("window.whyslow.loads")
            page.select_option("#thread", f"thread={w['tid']}")
            page.wait_for_function(f"window.whyslow.loads > {loads}")
            got = page.evaluate("window.whyslow.total")
            log(f"threads: {full} samples, {w['name']} {got}")
            assert got == w["value"] and abs(100 * got / full - 25) <= 5, (got, w, full)
            assert {f["name"] for f in frames(page)} >= {"thread_work"}
            page.screenshot(path=os.path.join(out, "thread_filter.png"), full_page=True)
            loads = page.evaluate("window.whyslow.loads")
            page.select_option("#thread", f"pid={w['pid']}")
            page.wait_for_function(f"window.whyslow.loads > {loads}")
            assert page.evaluate("window.whyslow.total") == sum(t["value"] for t in threads if t["pid"] == w["pid"])
            assert not errors, errors
            browser.close()
    finally:
        stop(view)


def live_processes(whyslow, bindir, out):
    """`whyslow serve` with a command-line target: a cpu_split started while the Processes view is open appears in
    it, and leaves it when it ends, without a reload (the view polls)."""
    agent, url, api = serve(whyslow, out, "serve-data")
    try:
        tid = api("api/v1/targets", {"match": {"cmdline": "cpu_split 5.0417"}, "sources": ["cpu"], "window_s": 1})["id"]
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM)
            page = new_page(browser)
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url)
            page.click("#tabs button[data-view=processes]")
            page.wait_for_function("window.whyslow.polls >= 1")
            work = subprocess.Popen([os.path.join(bindir, "cpu_split"), "5.0417"], stdout=subprocess.DEVNULL)
            row = f"#processes li[data-pid='{work.pid}']"
            followed(api, tid, [work.pid])
            next_polls(page, f"document.querySelector(\"{row}\")")
            log(f"live processes: pid {work.pid} shown after {page.evaluate('window.whyslow.polls')} polls")
            page.screenshot(path=os.path.join(out, "processes.png"), full_page=True)
            assert work.wait() == 0
            until(api, f"pid {work.pid} gone from /processes",
                  lambda: all(p["pid"] != work.pid for p in api("api/v1/processes")), 4)
            next_polls(page, f"!document.querySelector(\"{row}\")")
            assert not errors, errors
            browser.close()
    finally:
        stop(agent)


def diff_view(whyslow, bindir, out):
    """The 1x and 2x builds of diffwork: work_b is red (grew) and its delta is `whyslow diff`'s."""
    files = []
    for name in ("diffwork", "diffwork_2x"):
        f = os.path.join(out, name + ".data")
        subprocess.run([whyslow, "record", "-o", f, "--", os.path.join(bindir, name), "6000"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        files.append(f)
    cli = json.loads(subprocess.run([whyslow, "diff", *files, "--format", "json", "--limit", "500"],
                                    check=True, capture_output=True, text=True).stdout)
    want = next(f for f in cli["functions"] if f["name"] == "work_b")
    view, url = start_view(whyslow, files)
    try:
        with sync_playwright() as pw:
            browser, page, errors = open_page(pw, url)
            page.click("#tabs button[data-view=diff]")
            page.wait_for_selector("#diff-table tr[data-name=work_b]", timeout=10000)
            row = page.locator("#diff-table tr[data-name=work_b]")
            assert row.get_attribute("class") == "grew", row.get_attribute("class")
            cells = row.locator("td").all_inner_texts()
            values = row.locator("td").evaluate_all("ts => ts.map(t => t.dataset.value || '')")
            log(f"diff work_b row {cells} ({values}), whyslow diff: self_delta {want['self_delta']}")
            assert float(values[3]) == want["self_delta"], (values, want)
            assert float(values[4]) == want["total_delta"], (values, want)
            # Shown in units (as `whyslow diff` prints them), signed: "+1.08s", "+38.8ms".
            assert cells[3].startswith("+") and cells[3][-1] == "s" and " " not in cells[3], cells
            assert page.eval_on_selector_all("#diff-table tbody tr", "rs => rs[0].dataset.name") == "work_b"
            # The canvas diff flame graph (its hit-test): work_b is drawn red (its self time grew), its after -
            # before is the total delta and its self's the self delta `whyslow diff` gives (6 decimals there).
            page.wait_for_function("window.whyslow.diffFrames().length > 0")
            drawn = [f for f in page.evaluate("window.whyslow.diffFrames()") if f["name"] == "work_b"]
            assert drawn and all(f["change"] == "grew" and f["color"].startswith("hsl(0,") for f in drawn), drawn
            delta = sum(f["after"] - f["before"] for f in drawn)
            log(f"diff flame graph: work_b drawn {len(drawn)}x, delta {delta:.6f} ({drawn[0]['color']})")
            self_delta = sum(f["after_self"] - f["before_self"] for f in drawn)
            assert abs(delta - want["total_delta"]) <= 2e-6 and abs(self_delta - want["self_delta"]) <= 2e-6, \
                (delta, self_delta, want)
            # Every frame's color tells its self change; callers whose self did not change stay neutral.
            everything = page.evaluate("window.whyslow.diffFrames()")
            sign = {1: "grew", -1: "shrank", 0: "same"}
            for f in everything:
                d = f["after_self"] - f["before_self"]
                assert f["change"] == sign[(d > 1e-9) - (d < -1e-9)], f
            assert any(f["change"] == "same" and f["depth"] > 0 for f in everything), everything[:5]
            canvas = page.locator("#diff-flame").bounding_box()
            widest_b = max(drawn, key=lambda f: f["width"])
            page.mouse.move(canvas["x"] + widest_b["x"] + widest_b["width"] / 2, canvas["y"] + widest_b["y"] + 9)
            assert page.inner_text("#tooltip").startswith("work_b"), page.inner_text("#tooltip")
            page.screenshot(path=os.path.join(out, "diff.png"), full_page=True)
            assert not errors, errors
            browser.close()
    finally:
        stop(view)


def doctor_view(whyslow, bindir, out):
    """A tz-stat-storm recording: the doctor view lists the finding with its evidence."""
    f = os.path.join(out, "tzlog.data")
    subprocess.run([whyslow, "doctor", "-o", f, "--", os.path.join(bindir, "doctor_tzlog")],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    view, url = start_view(whyslow, [f])
    try:
        with sync_playwright() as pw:
            browser, page, errors = open_page(pw, url)
            page.click("#tabs button[data-view=doctor]")
            page.wait_for_selector("#doctor article[data-id=tz-stat-storm]", timeout=15000)
            box = page.locator("#doctor article[data-id=tz-stat-storm]")
            evidence = box.locator("li").all_inner_texts()
            log(f"doctor: tz-stat-storm with {len(evidence)} lines of evidence, e.g. {evidence[:1]}")
            assert evidence and all(e.strip() for e in evidence), evidence
            page.screenshot(path=os.path.join(out, "doctor_tz.png"), full_page=True)
            links = box.locator(".fn")
            if links.count():
                name = links.first.inner_text()
                links.first.click()
                page.wait_for_function("(n) => window.whyslow.zoomed() === n", arg=name)
                assert any(fr["matched"] for fr in frames(page))
            assert not errors, errors
            browser.close()
    finally:
        stop(view)


def findings_track(whyslow, bindir, out):
    """`whyslow serve`'s always-on doctor above the timeline: an -O0 build's finding is a bar on its row, and
    hotswitch's change (SIGUSR1 after 11 windows) one regression mark that opens the Diff view of the two ranges,
    where hot_new grew."""
    agent, url, api = serve(whyslow, out, "serve-doctor-data")
    try:
        common = {"sources": ["cpu"], "frequency": 999, "window_s": 1}
        hot = api("api/v1/targets", {"name": "hot", "match": {"cmdline": "hotswitch 18 ui"}, **common})["id"]
        opt = api("api/v1/targets", {"name": "opt", "match": {"cmdline": "doctor_optwork_O0"}, **common})["id"]
        o = subprocess.Popen([os.path.join(bindir, "doctor_optwork_O0")], stdout=subprocess.DEVNULL)
        w = subprocess.Popen([os.path.join(bindir, "hotswitch"), "18", "ui"], stdout=subprocess.DEVNULL)
        await_windows(api, hot, 11)
        w.send_signal(10)  # SIGUSR1: hot_new takes hot_old's place
        # The detector finds a change within two windows (regress::Config::after); the window in flight at the
        # signal, and one more, make four: bounded by those windows of hot, once the doctor diagnosed them all.
        changed_at = windows(api, hot)

        def regression():
            if api(f"api/v1/regressions?target={hot}")["regressions"]:
                return True
            assert windows(api, hot) < changed_at + 4 or metric(url, "whyslow_doctor_queue_windows") != 0, \
                "no regression within 4 windows of the change"
            return False

        until(api, "a regression", regression, (4 + 5) * 2 * SCANS_PER_S)
        assert o.wait() == 0
        # The -O0 build's finding, once the doctor has diagnosed its windows: another finding (a busy machine's
        # cpu-oversubscription) may come first, so the wait is for this one, bounded by the doctor's queue.
        # Its last window is stored after it exited: settled once the count held for two windows' scans.
        seen = {"windows": -1, "beat": scan_beat(api), "scans": 0}

        def unoptimized():
            rules = [f["rule"] for f in api(f"api/v1/findings?target={opt}&from=now-10m")["findings"]]
            if "unoptimized-build" in rules:
                return True
            n, beat = windows(api, opt), scan_beat(api)
            if n != seen["windows"] or metric(url, "whyslow_doctor_queue_windows") != 0:
                seen.update(windows=n, scans=0)
            elif beat != seen["beat"]:
                seen["scans"] += 1
            seen["beat"] = beat
            assert seen["scans"] < 2 * SCANS_PER_S, \
                f"all {n} windows of the -O0 build diagnosed, and no unoptimized-build among {rules}"
            return False

        until(api, "the -O0 build's finding", unoptimized, 20 * 2 * SCANS_PER_S)
        with sync_playwright() as pw:
            browser, page, errors = open_page(pw, url)
            # The first target (hot): one regression mark on the track.
            page.wait_for_function("window.whyslow.findings() !== null", timeout=10000)
            marks = page.locator("#findings-track .freg")
            assert marks.count() == 1, marks.count()
            title = marks.first.get_attribute("title")
            log(f"findings track: regression mark {title!r}")
            assert title.startswith("hot_new: self 0.0%"), title
            page.screenshot(path=os.path.join(out, "findings_track_regression.png"), full_page=True)
            marks.first.click()
            page.wait_for_selector("#diff-table tr[data-name=hot_new]", timeout=10000)
            row = page.locator("#diff-table tr[data-name=hot_new]")
            assert row.get_attribute("class") == "grew", row.get_attribute("class")
            assert "before the change" in page.inner_text("#diff-ranges")
            page.screenshot(path=os.path.join(out, "findings_track_diff.png"), full_page=True)
            # The -O0 target: its finding is a row with one bar (one episode).
            page.select_option("#target", str(opt))
            # The track's rows are drawn after the findings arrive: wait for the row itself (CI once read
            # the track between the two and found no rows).
            page.wait_for_function(
                "[...document.querySelectorAll('#findings-track .ftrack .flabel')]"
                ".some(e => e.textContent.trim() === 'unoptimized-build')", timeout=10000)
            rows = page.locator("#findings-track .ftrack")
            labels = [rows.nth(i).locator(".flabel").inner_text() for i in range(rows.count())]
            log(f"findings track rows of the -O0 build: {labels}")
            assert "unoptimized-build" in labels, labels
            bar = rows.nth(labels.index("unoptimized-build")).locator(".fseg")
            tip = bar.first.get_attribute("title")
            assert bar.count() == 1 and "without optimization" in tip and "peak" in tip, tip
            assert bar.first.bounding_box()["width"] > 5
            page.screenshot(path=os.path.join(out, "findings_track.png"), full_page=True)
            assert not errors, errors
            browser.close()
        assert w.wait() == 0
    finally:
        stop(agent)


def label_filter(whyslow, bindir, out):
    """`whyslow serve`'s label filter: two cpu_split of one target, one in a systemd unit's cgroup; the unit is
    offered among the labels present, and choosing it shows that process's samples only."""
    root = next((r for r in ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
                 if os.path.exists(f"{r}/cgroup.procs") and os.path.exists(f"{r}/cgroup.controllers")), None)
    unit = f"wsui-{os.getpid()}.service"
    cg = root and os.path.join(root, "system.slice", unit)
    try:
        os.makedirs(cg, exist_ok=True)
    except (OSError, TypeError):
        log("label filter: no writable cgroup v2 here: skipped")
        return
    agent, url, api = serve(whyslow, out, "serve-label-data")
    work = []
    try:
        tid = api("api/v1/targets", {"name": "split", "match": {"cmdline": "cpu_split 8.0419"}, "sources": ["cpu"],
                                     "frequency": 99, "window_s": 1})["id"]
        split = os.path.join(bindir, "cpu_split")
        # The shell moves itself into the unit, then execs (the agent reads a followed process again when it
        # execs). Its own command line does not match the target (the workload's path comes from the
        # environment), so the samples the target holds are cpu_split's, inside the unit.
        inside = subprocess.Popen(["sh", "-c", f'echo $$ > {cg}/cgroup.procs && exec "$SPLIT" 8.0419'],
                                  env={**os.environ, "SPLIT": split}, stdout=subprocess.DEVNULL)
        outside = subprocess.Popen([split, "8.0419"], stdout=subprocess.DEVNULL)
        work = [inside, outside]
        want = f"unit={unit}"
        # Until the shell has moved and exec'd (it exits if it cannot move).
        while open(f"/proc/{inside.pid}/comm").read().strip() != "cpu_split":
            assert inside.poll() is None, "the shell could not move into the unit"
            time.sleep(0.01)
        got = followed(api, tid, [inside.pid, outside.pid])
        assert got[0]["labels"].get("unit") == unit, got
        await_windows(api, tid, 2)
        with sync_playwright() as pw:
            browser, page, errors = open_page(pw, url)
            # The page lists the labels of the processes the agent follows (/processes) as it loads.
            assert want in page.evaluate("window.whyslow.labels()"), page.evaluate("window.whyslow.labels()")
            full = page.evaluate("window.whyslow.threads()")
            assert {t["pid"] for t in full} >= {inside.pid, outside.pid}, full
            loads = page.evaluate("window.whyslow.loads")
            page.select_option("#labels", want)
            page.wait_for_function(f"window.whyslow.loads > {loads}")
            page.wait_for_function(f"window.whyslow.threads().length > 0 && window.whyslow.threads()"
                                   f".every((t) => t.pid === {inside.pid})", timeout=10000)
            got = page.evaluate("window.whyslow.total")
            log(f"label filter: {want} shows {got} samples of pid {inside.pid} only")
            assert got > 0 and "(filtered)" in page.inner_text("#shown")
            assert "labels=" + urllib.parse.quote(want) in page.url, page.url
            assert len(frames(page)) > 1
            page.screenshot(path=os.path.join(out, "label_filter.png"), full_page=True)
            assert not errors, errors
            browser.close()
    finally:
        for w in work:
            w.kill()
            w.wait()
        stop(agent)
        for _ in range(50):
            try:
                os.rmdir(cg)
                break
            except OSError:
                time.sleep(0.1)


def memory_view(whyslow, bindir, out):
    """`whyslow serve`'s mem source in the UI: memwork leaking 8 MiB/s (on a busy machine its ticks stretch,
    and the leak still outgrows its 4 MiB bounded cache) under a mem target with 1 s windows. With type inuse-bytes the timeline holds each window's in-use at its end (growing), the flame graph what was held
    at the range's end (the last window's level, exactly), and the Diff view of an early and a late selection
    what grew between those moments (cache_put)."""
    agent, url, api = serve(whyslow, out, "serve-mem-data")
    w = subprocess.Popen([os.path.join(bindir, "memwork"), "serve", "30", "8388608"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        pid = int(w.stdout.readline())
        tid = api("api/v1/targets", {"name": "mem", "match": {"pids": [pid]}, "sources": ["mem"], "window_s": 1})["id"]
        # Its probes are attached once the session holds it; then it starts leaking.
        until(api, "the session to hold the process", lambda: (metric(url, "whyslow_processes_held") or 0) >= 1,
              5 * SCANS_PER_S)
        w.stdin.write("go\n")
        w.stdin.flush()
        await_windows(api, tid, 8)
        with sync_playwright() as pw:
            browser, page, errors = open_page(pw, url)
            loads = page.evaluate("window.whyslow.loads")
            page.select_option("#type", "inuse-bytes")
            page.wait_for_function(f"window.whyslow.loads > {loads}")
            levels = [v for v in page.evaluate("window.whyslow.timeline().values") if v]
            log(f"memory view: in use at the windows' ends {levels}")
            assert len(levels) >= 8 and levels[-1] > 2 * levels[1], levels
            # The flame graph of the whole range: what the process held at its end (its last window's level).
            assert page.evaluate("window.whyslow.total") == levels[-1], (page.evaluate("window.whyslow.total"), levels)
            assert widest(frames(page), "cache_put")["width"] > widest(frames(page), "lru_put")["width"]
            page.screenshot(path=os.path.join(out, "memory_timeline.png"), full_page=True)
            # What grew between an early and a late moment: the Diff view of two selections.
            select_timeline(page, 0, 0.35)
            page.click("#sel-base")
            select_timeline(page, 0.65, 1)
            page.click("#tabs button[data-view=diff]")
            page.wait_for_selector("#diff-table tr[data-name=cache_put]", timeout=10000)
            row = page.locator("#diff-table tr[data-name=cache_put]")
            assert row.get_attribute("class") == "grew", row.get_attribute("class")
            page.screenshot(path=os.path.join(out, "memory_diff.png"), full_page=True)
            assert not errors, errors
            browser.close()
    finally:
        w.kill()
        w.wait()
        stop(agent)


if __name__ == "__main__":
    main()
