// Times a dashboard page in headless Chromium (Debian's, via playwright-core):
// from the start of navigation to the first frame of the tree on screen, and
// to the load event. Five loads; prints the medians as JSON.
//   node bench/dashboard-first-screen.cjs URL
const path = require("path");
const { chromium } = require(path.join(process.env.NOESIS_PLAYWRIGHT, "node_modules", "playwright-core"));

(async () => {
  const url = process.argv[2];
  const browser = await chromium.launch({
    executablePath: process.env.NOESIS_CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu"],
  });
  const first = [], loaded = [];
  try {
    for (let i = 0; i < 6; i++) {
      const page = await browser.newPage();
      const start = Date.now();
      await page.goto(url, { waitUntil: "commit" });
      await page.locator(".tree li").first().waitFor({ state: "visible" });
      const shown = Date.now() - start;
      await page.waitForLoadState("load");
      const done = Date.now() - start;
      if (i > 0) { first.push(shown); loaded.push(done); } // the first load warms the browser
      await page.close();
    }
  } finally {
    await browser.close();
  }
  const median = (v) => v.sort((a, b) => a - b)[Math.floor(v.length / 2)];
  process.stdout.write(JSON.stringify({ first_screen_ms: median(first), load_ms: median(loaded), runs: first.length }) + "\n");
})().catch((e) => { process.stderr.write(String(e && e.stack || e) + "\n"); process.exit(1); });
