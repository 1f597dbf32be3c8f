// Drives a live agent run's page in headless Chromium for tests/browser.rs:
// the run waits for a decision; click Approve; the page follows the run's
// events (EventSource, under the page's CSP) and shows the answer when it
// ends. Changing anything needs a credential: the page first signs in at
// /login with the token in NOESIS_TOKEN. Prints one JSON object on stdout;
// screenshots go to argv[4].
//
//   NOESIS_TOKEN=… node live_run.cjs BASE_URL RUN_ID SCREENSHOT_DIR
const path = require("path");
const { chromium } = require(path.join(process.env.NOESIS_PLAYWRIGHT, "node_modules", "playwright-core"));

(async () => {
  const [base, run, shots] = process.argv.slice(2);
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
    page.on("response", async (r) => {
      if (r.status() >= 400) report.errors.push(r.request().method() + " " + r.url() + " " + r.status());
    });

    await page.goto(base + "/login");
    await page.fill("input[name=token]", process.env.NOESIS_TOKEN || "");
    await Promise.all([page.waitForNavigation(), page.click("button")]);
    const cookies = await page.context().cookies();
    const session = cookies.find((c) => c.name === "noesis_session");
    report.checks.session_cookie = Boolean(session && session.httpOnly && session.sameSite === "Strict"
      && session.value !== process.env.NOESIS_TOKEN);
    await page.goto(base + "/runs/" + run);
    await page.waitForSelector("button[data-call]", { timeout: 30000 });
    report.checks.approve_buttons = await page.locator("button[data-call]").count();
    await page.screenshot({ path: path.join(shots, "run-waiting.png"), fullPage: true });
    await page.click("button[data-call]");
    // The answer is streamed slowly: the live view shows it growing.
    const writing = page.locator("#live li.writing");
    await writing.filter({ hasText: "Answer from" }).waitFor({ timeout: 30000 });
    report.checks.streamed_line = await writing.first().textContent();
    // The page reloads itself when the run's `done` event arrives (the
    // streamed line holds the answer too, so wait for the reload first).
    await page.waitForSelector("#live", { state: "detached", timeout: 30000 });
    await page.waitForSelector("text=Answer from the browser run.", { timeout: 30000 });
    report.checks.live_after = await page.locator("#live").count();
    report.checks.forms_after = await page.locator("form.decide").count();
    await page.screenshot({ path: path.join(shots, "run-done.png"), fullPage: true });
  } catch (e) {
    report.errors.push("script: " + String(e));
  } finally {
    await browser.close();
  }
  process.stdout.write(JSON.stringify(report));
})();
