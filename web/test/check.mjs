// check.mjs — the tests' harness: each check prints ok or FAIL with the reason and the run goes on;
// failures() is the count for the exit status; openPage starts the browser.
import { chromium } from 'playwright-core';

let failed = 0;
export async function check(name, fn) {
  try {
    await fn();
    console.log(`ok: ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL: ${name}: ${e.stack || e}`);
  }
}
export function fail(message) {
  failed++;
  console.log(`FAIL: ${message}`);
}
export const failures = () => failed;

// Headless Chromium (Debian's) and a page in it whose errors fail the run: uncaught ones, and
// the console's (a resource that fails to load, a favicon's 404) unless allow matches them.
export async function openPage(viewport, allow = null) {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu'],
  });
  const page = await browser.newPage({ viewport });
  page.on('pageerror', (e) => fail(`page error: ${e}`));
  page.on('console', (m) => {
    if (m.type() === 'error' && !allow?.test(m.text())) fail(`console error: ${m.text()} (${m.location().url})`);
  });
  return { browser, page };
}
