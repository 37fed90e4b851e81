// prima serve's web page in headless Chromium: node page.test.mjs BASE_URL SCREENSHOT.png
// Loads the page, chats (the reply streams in, equals the API's answer), stops a long reply,
// keeps the conversation across a reload, opens the cluster view and takes a screenshot.
import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';
import { check, fail, failures } from './check.mjs';

const [base, shot] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu'],
});
const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
const foreign = [];
page.on('request', (r) => { if (!r.url().startsWith(base) && !r.url().startsWith('data:')) foreign.push(r.url()); });
page.on('pageerror', (e) => fail(`page error: ${e}`));
await page.addInitScript(() => {
  if (!localStorage.getItem('prima.settings'))
    localStorage.setItem('prima.settings', JSON.stringify({ temperature: 0, max_tokens: 40 }));
});
await page.goto(`${base}/`);

const assistant = '[data-testid=msg-assistant]';
await check('a message streams in and equals the API answer', async () => {
  await page.fill('[data-testid=input]', 'Tell me a story.');
  await page.click('[data-testid=send]');
  await page.waitForFunction((sel) => document.querySelector(`${sel} .body`)?.textContent.length > 0, assistant);
  await page.waitForFunction(() => document.querySelector('[data-testid=stop]').disabled, null, { timeout: 30000 });
  const stored = await page.evaluate(() => JSON.parse(localStorage.getItem('prima.conversations'))[0].messages[1].content);
  const res = await fetch(`${base}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'user', content: 'Tell me a story.' }], temperature: 0, max_tokens: 40, top_p: 0.95, top_k: 40, min_p: 0.05 }),
  });
  const answer = (await res.json()).choices[0].message.content;
  assert.equal(stored, answer);
  assert.match(await page.textContent(`${assistant} .info`), /40 tokens/);
});

await check('markdown with a code block is rendered, raw HTML is not', async () => {
  await page.evaluate(() => {
    const el = document.createElement('div');
    el.id = 'md-probe';
    el.innerHTML = marked.parse('**bold**\n\n```c\nint x;\n```\n\n<img src=x onerror=alert(1)>');
    document.body.append(el);
  });
  assert.equal(await page.locator('#md-probe strong').textContent(), 'bold');
  assert.equal(await page.locator('#md-probe pre code').textContent(), 'int x;\n');
  assert.equal(await page.locator('#md-probe img').count(), 0);
});

await check('a long reply grows while it streams, and the stop button ends it', async () => {
  await page.evaluate(() => localStorage.setItem('prima.settings', JSON.stringify({ temperature: 0, max_tokens: 1900 })));
  await page.reload();
  await page.fill('[data-testid=input]', 'And a long one.');
  await page.click('[data-testid=send]');
  const length = () => page.evaluate((sel) => document.querySelectorAll(sel)[1]?.querySelector('.body').textContent.length ?? 0, assistant);
  await page.waitForFunction((sel) => document.querySelectorAll(sel)[1]?.querySelector('.body').textContent.length > 0, assistant);
  const first = await length();
  await page.waitForTimeout(300);
  const second = await length();
  assert.ok(await page.isEnabled('[data-testid=stop]'),
    `still streaming: ${await page.locator(assistant).nth(1).locator('.info').textContent()}`);
  assert.ok(second > first, `the reply grew from ${first} to ${second} characters`);
  await page.click('[data-testid=stop]');
  await page.waitForFunction(() => document.querySelector('[data-testid=stop]').disabled);
  assert.equal(await page.locator(assistant).nth(1).locator('.info').textContent(), 'stopped');
});

await check('the conversation survives a reload', async () => {
  await page.reload();
  assert.equal(await page.locator('[data-testid=msg-user]').count(), 2);
  assert.equal(await page.locator('#conversations li').count(), 1);
  await page.screenshot({ path: shot.replace(/\.png$/, '-chat.png') });
});

await check('the cluster view shows the ring', async () => {
  await page.click('[data-testid=cluster-tab]');
  await page.waitForFunction(() => document.querySelectorAll('[data-testid=device]').length > 0);
  // something to watch: a reply generated meanwhile (per-step figures, the charts)
  const busy = fetch(`${base}/v1/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 3000, temperature: 0 }),
  });
  await page.waitForTimeout(3500);
  const devices = await page.locator('[data-testid=device]').allTextContents();
  assert.equal(devices.length, Number(process.env.DEVICES ?? 3), devices.join(' | '));
  assert.match(devices[0], /window 2 layer/);
  assert.match(devices[1], /compute .* ms, wait .* ms, disk .* per step(?! \(average\))/); // live
  // memory in use from the counters (resident window pages), not a zero, against the budget
  assert.match(devices[1], /in memory (?!0\.0 MiB)[\d.]+ [MG]iB of [\d.]+ [MG]iB budget \(weights/);
  await page.screenshot({ path: shot, fullPage: true });
  await busy;
});

await check('nothing is loaded from elsewhere', () => assert.deepEqual(foreign, []));
await browser.close();
process.exit(failures() ? 1 : 0);
