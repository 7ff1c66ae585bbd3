// The built documentation site as a reader sees it, in a real headless Chromium (Debian's),
// driven by playwright-core. Usage: node docs_check.mjs <site base URL> <output dir>.
// Prints one JSON object with what it found; tests/browser/test_docs_in_browser.py judges it.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createRequire } from "node:module";

const require = createRequire(process.env.PLAYWRIGHT_CORE_PREFIX + "/node_modules/");
const { chromium } = require("playwright-core");
const [base, out] = process.argv.slice(2);

// A fresh profile, nothing fetched but the site: no sync, no component or safe-browsing updates.
const context = await chromium.launchPersistentContext(mkdtempSync(join(tmpdir(), "docs-check-")), {
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  viewport: { width: 1280, height: 900 },
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"],
});
const page = context.pages()[0] ?? await context.newPage();
const errors = [];
page.on("pageerror", (e) => errors.push(String(e)));
page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });

const report = { errors };
await page.goto(base + "/", { waitUntil: "networkidle" });
report.home_title = await page.title();
await page.screenshot({ path: join(out, "home.png"), fullPage: false });

// Every link of the navigation, fetched: each must answer 200.
const nav = await page.$$eval("nav.md-nav--primary a.md-nav__link[href]", (as) => [...new Set(as.map((a) => a.href))]);
report.nav_links = nav.length;
report.nav_broken = [];
for (const href of nav) {
  const r = await page.request.get(href);
  if (r.status() !== 200) report.nav_broken.push(`${href}: ${r.status()}`);
}

// Search: the index loads in Material's worker and a query lists pages.
const index = await page.request.get(base + "/search/search_index.json");
report.search_index_status = index.status();
await page.click("input.md-search__input");
// Typed, not filled: Material's search listens to key events.
await page.keyboard.type("loop breaker");
await page.waitForSelector(".md-search-result__item a", { timeout: 15000 }).catch(() => null);
report.search_results = await page.$$eval(".md-search-result__item a", (as) => as.map((a) => a.getAttribute("href")));
await page.keyboard.press("Escape");

// A page with code: Material adds a copy button to each block; pressing one copies its text.
await page.goto(base + "/quick-start/", { waitUntil: "networkidle" });
report.copy_buttons = await page.$$eval("button.md-code__button[title='Copy to clipboard'], button.md-clipboard",
                                        (bs) => bs.length);
report.code_blocks = await page.$$eval("pre > code", (cs) => cs.length);
await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: base });
const first = page.locator("div.highlight").first();
await first.hover();
await first.locator("button.md-code__button[title='Copy to clipboard'], button.md-clipboard").first().click();
report.copied = await page.evaluate(() => navigator.clipboard.readText());
report.first_block = await first.locator("code").innerText();

await page.goto(base + "/reference/configuration/", { waitUntil: "networkidle" });
report.reference_title = await page.title();
await page.screenshot({ path: join(out, "reference-configuration.png"), fullPage: false });
await page.goto(base + "/errors/fallbacks/", { waitUntil: "networkidle" });
await page.screenshot({ path: join(out, "fallbacks.png"), fullPage: false });

await context.close();
process.stdout.write(JSON.stringify(report) + "\n");
