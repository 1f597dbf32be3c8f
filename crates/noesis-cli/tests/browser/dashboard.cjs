// Drives the dashboard in headless Chromium (Debian's, through playwright-core)
// for tests/browser.rs: open the newest session, expand its tree, find an
// invalidated frame's reason, open a frame whose texts are hostile. Every
// dialog, console error and page error is recorded: the test expects none.
// Prints one JSON object on stdout; screenshots go to argv[3].
//
//   node dashboard.cjs BASE_URL SCREENSHOT_DIR
const path = require("path");
const { chromium } = require(path.join(process.env.NOESIS_PLAYWRIGHT, "node_modules", "playwright-core"));

(async () => {
  const [base, shots] = process.argv.slice(2);
  const report = { dialogs: [], errors: [], checks: {} };
  const browser = await chromium.launch({
    executablePath: process.env.NOESIS_CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu"],
  });
  try {
    const page = await browser.newPage();
    page.on("dialog", async (d) => { report.dialogs.push(d.message()); await d.dismiss(); });
    page.on("console", (m) => { if (m.type() === "error") report.errors.push(m.text()); });
    page.on("pageerror", (e) => report.errors.push(String(e)));

    await page.goto(base + "/");
    report.checks.title = await page.title();
    await page.screenshot({ path: path.join(shots, "sessions.png"), fullPage: true });

    // The newest session: what changed, and what it invalidated and why.
    await page.locator("a[href^='/sessions/']").first().click();
    await page.waitForSelector("h1");
    report.checks.changed = await page.locator("h3", { hasText: "Changed (1)" }).count();
    report.checks.invalidated_listed = await page.locator("li", { hasText: "file a.py changed" }).count();
    await page.screenshot({ path: path.join(shots, "session.png"), fullPage: true });

    // The first session: its tree holds the run the second one invalidated.
    await page.goto(base + "/");
    await page.locator("a[href^='/sessions/']").last().click();
    await page.waitForSelector("h1");
    await page.click("button[data-expand='none']");
    report.checks.closed_after_collapse = await page.locator(".tree details[open]").count();
    await page.click("button[data-expand='all']");
    report.checks.open_after_expand = await page.locator(".tree details[open]").count();
    report.checks.details = await page.locator(".tree details").count();
    const reason = page.locator(".why", { hasText: "changed" }).first();
    report.checks.reason_visible = await reason.isVisible();
    report.checks.reason = (await reason.textContent()) || "";
    await page.screenshot({ path: path.join(shots, "tree.png"), fullPage: true });

    // The frame with hostile texts: shown as text, nothing runs.
    await page.locator(".tree a", { hasText: "onerror" }).first().click();
    await page.waitForSelector("h1");
    report.checks.frame_heading = (await page.locator("h1").textContent()) || "";
    report.checks.images = await page.locator("main img").count();
    report.checks.javascript_links = await page.locator("a[href^='javascript:']").count();
    await page.screenshot({ path: path.join(shots, "frame.png"), fullPage: true });

    // The agent run with hostile texts, as a timeline.
    await page.goto(base + "/runs");
    await page.locator("a[href='/runs/evil']").click();
    await page.waitForSelector("ol.timeline");
    report.checks.run_calls = await page.locator("ol.timeline code", { hasText: "read_file" }).count();
    await page.screenshot({ path: path.join(shots, "run.png"), fullPage: true });

    await page.goto(base + "/frames?text=model+turn");
    report.checks.search_results = await page.locator("ul.results li").count();
    await page.screenshot({ path: path.join(shots, "search.png"), fullPage: true });

    // Tokens per day as an SVG chart (drawn under the CSP: no inline style).
    await page.goto(base + "/usage");
    report.checks.usage_bars = await page.locator("svg.chart rect").count();
    await page.screenshot({ path: path.join(shots, "usage.png"), fullPage: true });
  } finally {
    await browser.close();
  }
  process.stdout.write(JSON.stringify(report) + "\n");
})().catch((e) => {
  process.stderr.write(String(e && e.stack || e) + "\n");
  process.exit(1);
});
