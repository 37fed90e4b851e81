// prima serve's page with an API key (prima serve --api-key): node key.test.mjs BASE_URL KEY SHOT.png
// A fresh browser is asked for the key by the page (not left with no model name and a failing
// first message); a wrong key is asked for again; with the right one the model list loads and a
// message gets its reply. The server's 401s are the only console errors allowed.
import assert from 'node:assert/strict';
import { check, failures, openPage } from './check.mjs';

const [base, key, shot] = process.argv.slice(2);
const { browser, page } = await openPage({ width: 390, height: 844 }, /status of 401/);
await page.goto(`${base}/`);
const dialog = '[data-testid=key-dialog]';

await check('a fresh browser is asked for the key', async () => {
  await page.waitForSelector(`${dialog}[open]`);
  assert.match(await page.textContent('#key-why'), /wants an API key/);
  assert.equal(await page.textContent('#model'), '');
  await page.screenshot({ path: shot });
});

await check('a wrong key is refused and asked for again', async () => {
  await page.fill('[data-testid=key-input]', `${key}-wrong`);
  await page.click('[data-testid=key-save]');
  await page.waitForFunction(() => /refused/.test(document.querySelector('#key-why').textContent));
  assert.ok(await page.isVisible(dialog));
});

await check('with the key the model list loads and a message gets its reply', async () => {
  await page.fill('[data-testid=key-input]', key);
  await page.click('[data-testid=key-save]');
  await page.waitForFunction(() => document.querySelector('#model').textContent.length > 0);
  assert.ok(!(await page.isVisible(dialog)));
  await page.fill('[data-testid=input]', 'Hello.');
  await page.click('[data-testid=send]');
  await page.waitForFunction(() => document.querySelector('[data-testid=stop]').disabled &&
    document.querySelector('[data-testid=msg-assistant] .info').textContent.length > 0, null, { timeout: 30000 });
  const info = await page.textContent('[data-testid=msg-assistant] .info');
  assert.match(info, /tokens in/, info);
});

await check('the key is kept for the next visit', async () => {
  await page.reload();
  await page.waitForFunction(() => document.querySelector('#model').textContent.length > 0);
  assert.ok(!(await page.isVisible(dialog)));
});
await browser.close();
process.exit(failures() ? 1 : 0);
