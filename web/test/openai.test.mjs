// The official OpenAI client against prima serve: node openai.test.mjs BASE_URL API_KEY WANT.json
// WANT.json holds prima run's texts for the same requests (greedy, seeded, stop, chat).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';
import { check, failures } from './check.mjs';

const [base, key, wantFile] = process.argv.slice(2);
const want = JSON.parse(readFileSync(wantFile, 'utf8'));
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0, timeout: 60000 });

const models = await client.models.list();
const model = models.data[0].id;

await check('models', () => assert.equal(models.data.length, 1));

await check('completion, greedy, max_tokens and usage', async () => {
  const c = await client.completions.create({ model, prompt: want.prompt, max_tokens: 32, temperature: 0 });
  assert.equal(c.choices[0].text, want.greedy);
  assert.equal(c.choices[0].finish_reason, 'length');
  assert.deepEqual([c.usage.prompt_tokens, c.usage.completion_tokens, c.usage.total_tokens],
    [want.prompt_tokens, 32, want.prompt_tokens + 32]);
});

await check('completion, seeded sampling', async () => {
  const c = await client.completions.create({ model, prompt: want.prompt, max_tokens: 24, temperature: 0.8, seed: 7 });
  assert.equal(c.choices[0].text, want.seeded);
});

await check('completion, stop strings', async () => {
  const c = await client.completions.create({ model, prompt: want.prompt, temperature: 0, stop: ['le gi', 'zzz'] });
  assert.equal(c.choices[0].text, want.stop);
  assert.equal(c.choices[0].finish_reason, 'stop');
});

await check('completion, streaming', async () => {
  const s = await client.completions.create({ model, prompt: want.prompt, max_tokens: 32, temperature: 0, stream: true });
  let text = '';
  for await (const chunk of s) text += chunk.choices[0]?.text ?? '';
  assert.equal(text, want.greedy);
});

const messages = [{ role: 'system', content: want.system }, { role: 'user', content: want.user }];
let reply;
await check('chat, not streaming', async () => {
  const c = await client.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0 });
  reply = c.choices[0].message.content;
  assert.equal(c.choices[0].message.role, 'assistant');
  assert.equal(reply, want.chat);
  assert.equal(c.usage.completion_tokens, 24);
  assert.equal(c.usage.prompt_tokens, want.chat_prompt_tokens);
});

await check('chat, streaming with usage', async () => {
  const s = await client.chat.completions.create({
    model, messages, max_tokens: 24, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let text = '', finish = null, usage = null, chunks = 0;
  for await (const chunk of s) {
    chunks++;
    text += chunk.choices[0]?.delta?.content ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
    usage = chunk.usage ?? usage;
  }
  assert.equal(text, want.chat);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 24);
  assert.ok(chunks > 2, `${chunks} chunks`);
});

await check('chat, the next turn from the cache', async () => {
  const next = [...messages, { role: 'assistant', content: reply }, { role: 'user', content: 'And then?' }];
  const c = await client.chat.completions.create({ model, messages: next, max_tokens: 8, temperature: 0 });
  assert.ok(c.usage.prompt_tokens_details.cached_tokens >= want.chat_prompt_tokens,
    JSON.stringify(c.usage));
});

await check('error: a bad field is a BadRequestError naming it', async () => {
  await assert.rejects(
    client.completions.create({ model, prompt: 'x', max_tokens: 'many' }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'max_tokens');
});

await check('error: a wrong key is an AuthenticationError', async () => {
  const bad = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
});

process.exit(failures() ? 1 : 0);
