// prima serve's web page in headless Chromium: node page.test.mjs BASE_URL SCREENSHOT.png
// Loads the page, chats (the reply streams in, equals the API's answer), stops a long reply,
// keeps the conversation across a reload, works at a phone's width (the conversations a menu),
// opens the cluster view, draws its charts, and takes screenshots at 1280x800 and 390x844. Any
// error in the console (a favicon's 404) fails it.
import assert from 'node:assert/strict';
import { check, failures, openPage } from './check.mjs';

const [base, shot] = process.argv.slice(2);
const desktop = { width: 1280, height: 800 }, phone = { width: 390, height: 844 };
const { browser, page } = await openPage(desktop);
const foreign = [];
page.on('request', (r) => { if (!r.url().startsWith(base) && !r.url().startsWith('data:')) foreign.push(r.url()); });
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
  await page.evaluate(() => localStorage.setItem('prima.settings', JSON.stringify({ temperature: 0, max_tokens: 3800 })));
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

const width = (sel) => page.locator(sel).first().evaluate((e) => e.getBoundingClientRect().width);
await check('at a phone\'s width the conversations are a menu and the composer is full width', async () => {
  assert.ok(await page.isVisible('[data-testid=sidebar]'), 'the sidebar shows on a wide screen');
  assert.ok(!(await page.isVisible('[data-testid=menu]')), 'no menu button on a wide screen');
  await page.setViewportSize(phone);
  await page.waitForTimeout(300);
  assert.ok(!(await page.isVisible('[data-testid=sidebar]')), 'the sidebar is hidden');
  assert.ok(await width('[data-testid=input]') > 0.6 * phone.width, `message box ${await width('[data-testid=input]')} px wide`);
  assert.ok(await width('[data-testid=msg-user]') > 0.8 * phone.width, `messages ${await width('[data-testid=msg-user]')} px wide`);
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.equal(overflow, 0, 'the page scrolls sideways');
  await page.screenshot({ path: shot.replace(/\.png$/, '-phone.png') });
  await page.click('[data-testid=menu]');
  await page.waitForTimeout(300);
  assert.ok(await page.isVisible('[data-testid=sidebar]'), 'the menu opens the conversations');
  await page.screenshot({ path: shot.replace(/\.png$/, '-phone-menu.png') });
  await page.click('#conversations li span');
  await page.waitForTimeout(300);
  assert.ok(!(await page.isVisible('[data-testid=sidebar]')), 'choosing a conversation closes the menu');
  assert.equal(await page.locator('[data-testid=msg-user]').count(), 2);
  await page.setViewportSize(desktop);
});

await check('a chart has a time axis and units, and one sample is a dot, not a line', async () => {
  const drawn = await page.evaluate(() => {
    // the horizontal extent of the samples' colour (#2f6fdf) on a chart
    const extent = (samples) => {
      const c = document.createElement('canvas');
      c.width = 520;
      c.height = 180;
      chart(c, samples, 'ms', 1000);
      const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
      let lo = c.width, hi = -1;
      for (let i = 0; i < px.length; i += 4)
        if (px[i] < 90 && px[i + 1] > 80 && px[i + 1] < 140 && px[i + 2] > 190) {
          const x = (i / 4) % c.width;
          lo = Math.min(lo, x);
          hi = Math.max(hi, x);
        }
      return hi - lo;
    };
    return { one: extent([{ t: 990, v: 5 }]), two: extent([{ t: 990, v: 5 }, { t: 992, v: 7 }]),
             apart: extent([{ t: 900, v: 5 }, { t: 990, v: 7 }]) };
  });
  assert.ok(drawn.one < 8, `one sample spans ${drawn.one} px`);
  assert.ok(drawn.two > 8, `two samples 2 s apart span ${drawn.two} px`);
  assert.ok(drawn.apart > 200, `samples 90 s apart span ${drawn.apart} px`);
  assert.match(await page.textContent('#view-cluster'), /Time per output token \(ms\)/);
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
  assert.match(devices[0], /window 2 layers × 1 round/);
  const state = await page.textContent('#cluster-state');
  assert.match(state, /ring of 3 devices, 1 round per token/);
  assert.doesNotMatch(state + devices.join(' '), /\(s\)/);
  assert.match(devices[1], /compute .* ms, wait .* ms, disk .* per step(?! \(average\))/); // live
  // memory in use from the counters (resident window pages), not a zero, against the budget
  assert.match(devices[1], /in memory (?!0\.0 MiB)[\d.]+ [MG]iB of [\d.]+ [MG]iB budget \(weights/);
  await page.screenshot({ path: shot, fullPage: true });
  await page.setViewportSize(phone);
  await page.waitForTimeout(1200);
  await page.screenshot({ path: shot.replace(/\.png$/, '-phone-cluster.png'), fullPage: true });
  await page.setViewportSize(desktop);
  await busy;
});

await check('nothing is loaded from elsewhere', () => assert.deepEqual(foreign, []));
await browser.close();
process.exit(failures() ? 1 : 0);
