#!/usr/bin/env python3
"""Web UI benchmark: time to first render of a 120k-sample, 5k-function profile (folded stacks made here,
opened with `whyslow view`) in headless Chromium, and frames per second while zooming (a click on a frame,
then Escape, repeated; each redraw timed in the page).
Usage: .venv-ui/bin/python bench/ui_render.py [WHYSLOW]   (default target/release/whyslow)"""

import os
import random
import re
import subprocess
import sys
import tempfile
import time

from playwright.sync_api import sync_playwright

whyslow = sys.argv[1] if len(sys.argv) > 1 else "target/release/whyslow"
rng = random.Random(1)
funcs = [f"fn_{i:04d}" for i in range(5000)]
stacks = {}
for _ in range(20000):
    depth = rng.randint(3, 30)
    key = ";".join(["main"] + [rng.choice(funcs[: 50 * d + 50]) for d in range(depth)])
    stacks[key] = stacks.get(key, 0) + 6
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "big.folded")
    with open(path, "w") as f:
        for k, v in stacks.items():
            f.write(f"{k} {v}\n")
    total = sum(stacks.values())
    p = subprocess.Popen([whyslow, "view", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = re.search(r"http://\S+/", p.stdout.readline()).group(0)
    try:
        with sync_playwright() as pw:
            b = pw.chromium.launch(executable_path="/usr/bin/chromium")
            page = b.new_page(viewport={"width": 1600, "height": 1000})
            page.add_init_script("window.whyslowTestHooks = true")  # window.whyslow, read below
            t = time.time()
            page.goto(url)
            page.wait_for_function("window.whyslow && window.whyslow.ready", timeout=60000)
            first = time.time() - t
            n = page.evaluate("window.whyslow.frames().length")
            ms = page.evaluate("""async () => {
                const c = document.getElementById('flame'), r = c.getBoundingClientRect();
                const times = [];
                for (let i = 0; i < 20; i++) {
                    const fs = window.whyslow.frames().filter(f => f.depth === 2 && f.width > 10);
                    const f = fs[i % fs.length];
                    const t0 = performance.now();
                    c.dispatchEvent(new MouseEvent('click', {clientX: r.left + f.x + f.width / 2, clientY: r.top + f.y + 9, bubbles: true}));
                    await new Promise(requestAnimationFrame);
                    times.push(performance.now() - t0);
                    const t1 = performance.now();
                    document.dispatchEvent(new KeyboardEvent('keydown', {key: 'Escape'}));
                    await new Promise(requestAnimationFrame);
                    times.push(performance.now() - t1);
                }
                return times;
            }""")
            b.close()
    finally:
        p.terminate()
        p.wait()
    ms.sort()
    print(f"profile: {total} samples, {len(funcs)} functions, {len(stacks)} stacks; {n} frames drawn")
    print(f"first render (page load to drawn flame graph): {first:.2f} s")
    print(f"zoom/unzoom redraw: median {ms[len(ms)//2]:.1f} ms, worst {ms[-1]:.1f} ms "
          f"({1000 / ms[len(ms)//2]:.0f} fps at the median)")
