// The official Ollama and Anthropic clients, and the OpenAI client's newer paths, against prima
// serve: node apis.test.mjs BASE_URL API_KEY WANT.json. WANT.json holds prima run's texts for the
// same requests (greedy), the prompt's token ids and an alias the server was given.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import Anthropic from '@anthropic-ai/sdk';
import { Ollama } from 'ollama';
import OpenAI from 'openai';
import { check, failures } from './check.mjs';

const [base, key, wantFile] = process.argv.slice(2);
const want = JSON.parse(readFileSync(wantFile, 'utf8'));
const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0, timeout: 60000 });
const ollama = new Ollama({ host: base, headers: { Authorization: `Bearer ${key}` } });
const anthropic = new Anthropic({ baseURL: base, apiKey: key, maxRetries: 0, timeout: 60000 });
const model = (await openai.models.list()).data[0].id;
const messages = [{ role: 'system', content: want.system }, { role: 'user', content: want.user }];

// ---- OpenAI
await check('openai: an unknown model is a 404 NotFoundError, code model_not_found', async () => {
  await assert.rejects(
    openai.chat.completions.create({ model: 'gpt-4o', messages, max_tokens: 2 }),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404 && e.code === 'model_not_found');
  await assert.rejects(openai.models.retrieve('gpt-4o'), (e) => e instanceof OpenAI.NotFoundError);
});

await check('openai: the model answers to its file name and its aliases', async () => {
  assert.equal((await openai.models.retrieve(model)).id, model);
  assert.equal((await openai.models.retrieve(want.alias)).id, model);
  const c = await openai.completions.create({ model: want.alias, prompt: want.prompt, max_tokens: 32, temperature: 0 });
  assert.equal(c.choices[0].text, want.greedy);
});

await check('openai: usage in a stream only with include_usage, as a last chunk without choices', async () => {
  const chunks = async (opts) => {
    const out = [];
    const s = await openai.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0, stream: true, ...opts });
    for await (const c of s) out.push(c);
    return out;
  };
  const plain = await chunks({});
  assert.ok(plain.every((c) => !c.usage), 'usage without include_usage');
  assert.equal(plain.map((c) => c.choices[0]?.delta?.content ?? '').join(''), want.chat);
  const withUsage = await chunks({ stream_options: { include_usage: true } });
  const last = withUsage.at(-1);
  assert.deepEqual(last.choices, []);
  assert.equal(last.usage.completion_tokens, 24);
  assert.ok(withUsage.slice(0, -1).every((c) => !c.usage && c.choices.length === 1));
  assert.equal(withUsage.at(-2).choices[0].finish_reason, 'length');
});

await check('openai: a prompt longer than the context is context_length_exceeded', async () => {
  const long = 'once upon a time '.repeat(200);
  await assert.rejects(openai.completions.create({ model, prompt: long, max_tokens: 1 }),
    (e) => e instanceof OpenAI.BadRequestError && e.code === 'context_length_exceeded' && e.param === 'prompt');
  await assert.rejects(openai.chat.completions.create({ model, messages: [{ role: 'user', content: long }], max_tokens: 1 }),
    (e) => e instanceof OpenAI.BadRequestError && e.code === 'context_length_exceeded');
});

await check('openai: echo, and a prompt of token ids', async () => {
  const e = await openai.completions.create({ model, prompt: want.prompt, max_tokens: 32, temperature: 0, echo: true });
  assert.equal(e.choices[0].text, want.prompt + want.greedy);
  const t = await openai.completions.create({ model, prompt: want.ids, max_tokens: 32, temperature: 0 });
  assert.equal(t.choices[0].text, want.greedy);
  assert.equal(t.usage.prompt_tokens, want.ids.length);
  const tt = await openai.completions.create({ model, prompt: [want.ids], max_tokens: 32, temperature: 0 });
  assert.equal(tt.choices[0].text, want.greedy);
});

// Several prompts: one choice each, by index, equal to the prompt asked alone; usage summed
const prompts = [want.prompt, 'Lily saw a big', 'The sun was'];
await check('openai: an array of prompts answers a choice per prompt, equal to each alone', async () => {
  const opts = { model, max_tokens: 20, temperature: 0 };
  const alone = [];
  for (const prompt of prompts) alone.push(await openai.completions.create({ ...opts, prompt }));
  const c = await openai.completions.create({ ...opts, prompt: prompts });
  assert.deepEqual(c.choices.map((x) => x.index), [0, 1, 2]);
  assert.deepEqual(c.choices.map((x) => x.text), alone.map((a) => a.choices[0].text));
  assert.deepEqual(c.choices.map((x) => x.finish_reason), alone.map((a) => a.choices[0].finish_reason));
  for (const k of ['prompt_tokens', 'completion_tokens', 'total_tokens'])
    assert.equal(c.usage[k], alone.reduce((n, a) => n + a.usage[k], 0), k);

  // streamed: each chunk one choice, by index; reassembled, the same; usage once, at the end
  const texts = ['', '', ''], ends = [null, null, null], ids = new Set();
  let usage = null, chunks = 0;
  const s = await openai.completions.create({ ...opts, prompt: prompts, stream: true, stream_options: { include_usage: true } });
  for await (const k of s) {
    assert.equal(usage, null, 'a chunk after the usage');
    ids.add(k.id);
    if (k.usage) {
      assert.deepEqual(k.choices, []);
      usage = k.usage;
      continue;
    }
    assert.equal(k.choices.length, 1);
    const { index, text, finish_reason } = k.choices[0];
    assert.equal(ends[index], null, `choice ${index} after its end`);
    texts[index] += text;
    ends[index] = finish_reason;
    chunks++;
  }
  assert.ok(chunks > 3 && ids.size === 1, `${chunks} chunks, ids ${[...ids]}`);
  assert.deepEqual(texts, c.choices.map((x) => x.text));
  assert.deepEqual(ends, c.choices.map((x) => x.finish_reason));
  assert.deepEqual(usage, c.usage);

  // echo per choice, and prompts of token ids
  const e = await openai.completions.create({ ...opts, prompt: prompts, echo: true });
  assert.deepEqual(e.choices.map((x) => x.text), prompts.map((p, i) => p + c.choices[i].text));
  const t = await openai.completions.create({ ...opts, max_tokens: 32, prompt: [want.ids, want.ids] });
  assert.deepEqual(t.choices.map((x) => x.text), [want.greedy, want.greedy]);
  assert.equal(t.usage.prompt_tokens, 2 * want.ids.length);
});

await check('openai: too many prompts, none, or a mix of kinds are a 400 naming prompt', async () => {
  for (const prompt of [Array(17).fill('a'), [], ['a', [1, 2]], [[1], 'a']])
    await assert.rejects(openai.completions.create({ model, prompt, max_tokens: 1 }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'prompt', JSON.stringify(prompt).slice(0, 40));
  // one prompt over the context fails the request, as it fails alone
  await assert.rejects(openai.completions.create({ model, prompt: ['a', 'once upon a time '.repeat(200)], max_tokens: 1 }),
    (e) => e instanceof OpenAI.BadRequestError && e.code === 'context_length_exceeded');
});

// JSON numbers carry a float32 to 15 digits; base64 carries its bytes
const close = (a, b) => assert.ok(a.length === b.length && a.every((x, i) => Math.abs(x - b[i]) < 1e-7),
  `${a.slice(0, 4)}... vs ${b.slice(0, 4)}...`);
await check('openai: embeddings (unit length, per input, token ids as the text, base64 as floats)', async () => {
  const one = await openai.embeddings.create({ model, input: want.prompt });
  const v = one.data[0].embedding;
  assert.equal(one.object, 'list');
  assert.equal(v.length, 64);
  assert.ok(Math.abs(v.reduce((s, x) => s + x * x, 0) - 1) < 1e-5);
  assert.equal(one.usage.prompt_tokens, want.ids.length);
  const many = await openai.embeddings.create({ model: want.alias, input: ['A cat.', want.prompt, want.ids] });
  assert.deepEqual(many.data.map((d) => d.index), [0, 1, 2]);
  assert.deepEqual(many.data[1].embedding, v);
  assert.deepEqual(many.data[2].embedding, v);
  assert.notDeepEqual(many.data[0].embedding, v);
  const floats = await openai.embeddings.create({ model, input: want.prompt, encoding_format: 'float' });
  close(floats.data[0].embedding, v);
  const e = await ollama.embed({ model, input: ['A cat.', want.prompt] });
  assert.equal(e.embeddings.length, 2);
  close(e.embeddings[1], v);
});

// ---- Ollama
await check('ollama: list, ps, show, version', async () => {
  const tags = await ollama.list();
  assert.equal(tags.models.length, 1);
  assert.equal(tags.models[0].name, `${model}:latest`);
  assert.equal(tags.models[0].details.family, 'llama');
  assert.equal(tags.models[0].details.format, 'gguf');
  assert.ok(tags.models[0].size > 0);
  const ps = await ollama.ps();
  assert.equal(ps.models[0].context_length, 256);
  const show = await ollama.show({ model: want.alias });
  assert.equal(show.model_info['general.architecture'], 'llama');
  assert.ok(show.details.quantization_level.length > 0);
  assert.ok((await ollama.version()).version.length > 0);
});

await check('ollama: chat equals prima run, streaming equals not', async () => {
  const options = { temperature: 0, num_predict: 24 };
  const c = await ollama.chat({ model: want.alias, messages, options, keep_alive: '5m', think: false });
  assert.equal(c.message.role, 'assistant');
  assert.equal(c.message.content, want.chat);
  assert.equal(c.done, true);
  assert.equal(c.done_reason, 'length');
  assert.equal(c.eval_count, 24);
  assert.ok(c.total_duration > 0 && c.eval_duration > 0 && c.prompt_eval_count > 0);
  let text = '', parts = 0, last;
  for await (const part of await ollama.chat({ model: `${want.alias}:latest`, messages, options, stream: true })) {
    parts++;
    text += part.message.content;
    last = part;
  }
  assert.equal(text, want.chat);
  assert.ok(parts > 2, `${parts} parts`);
  assert.equal(last.done, true);
  assert.equal(last.eval_count, 24);
});

await check('ollama: generate (the prompt as a user turn, or raw), streaming and not', async () => {
  const g = await ollama.generate({ model, prompt: want.prompt, options: { temperature: 0, num_predict: 16 } });
  assert.equal(g.response, want.generate);
  assert.equal(g.done_reason, 'length');
  const raw = await ollama.generate({ model, prompt: want.prompt, raw: true, options: { temperature: 0, num_predict: 32 } });
  assert.equal(raw.response, want.greedy);
  let text = '';
  for await (const part of await ollama.generate({ model, prompt: want.prompt, raw: true, stream: true, options: { temperature: 0, num_predict: 32 } }))
    text += part.response;
  assert.equal(text, want.greedy);
  const stop = await ollama.generate({ model, prompt: want.prompt, raw: true, options: { temperature: 0, stop: ['le gi'] } });
  assert.equal(stop.done_reason, 'stop');
  assert.equal(stop.response, want.greedy.slice(0, want.greedy.indexOf('le gi')));
});

await check('ollama: an unknown model is a ResponseError 404', async () => {
  await assert.rejects(ollama.chat({ model: 'llama3.2', messages }), (e) => e.name === 'ResponseError' && e.status_code === 404);
  await assert.rejects(ollama.show({ model: 'llama3.2' }), (e) => e.status_code === 404);
});

// ---- Anthropic
const system = want.system;
const amessages = [{ role: 'user', content: want.user }];
await check('anthropic: messages equal prima run, with usage', async () => {
  const m = await anthropic.messages.create({ model: want.alias, max_tokens: 24, system, messages: amessages, temperature: 0 });
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.equal(m.content.length, 1);
  assert.equal(m.content[0].text, want.chat);
  assert.equal(m.stop_reason, 'max_tokens');
  assert.equal(m.usage.output_tokens, 24);
  assert.ok(m.usage.input_tokens > 0);
  const blocks = await anthropic.messages.create({ model, max_tokens: 24, temperature: 0,
    system: [{ type: 'text', text: system }], messages: [{ role: 'user', content: [{ type: 'text', text: want.user }] }] });
  assert.equal(blocks.content[0].text, want.chat);
});

await check('anthropic: streaming, its events in order, the same text', async () => {
  const stream = anthropic.messages.stream({ model, max_tokens: 24, system, messages: amessages, temperature: 0 });
  const types = [];
  let text = '';
  stream.on('streamEvent', (e) => types.push(e.type));
  stream.on('text', (t) => { text += t; });
  const final = await stream.finalMessage();
  assert.equal(text, want.chat);
  assert.equal(final.content[0].text, want.chat);
  assert.equal(final.stop_reason, 'max_tokens');
  assert.equal(final.usage.output_tokens, 24);
  assert.equal(types[0], 'message_start');
  assert.deepEqual(types.slice(-3), ['content_block_stop', 'message_delta', 'message_stop']);
  assert.ok(types.includes('content_block_start') && types.filter((t) => t === 'content_block_delta').length > 2);
});

await check('anthropic: stop_sequences name the one that stopped it', async () => {
  const m = await anthropic.messages.create({ model, max_tokens: 64, temperature: 0, system, messages: amessages,
    stop_sequences: ['zzz', want.chat.slice(5, 9)] });
  assert.equal(m.stop_reason, 'stop_sequence');
  assert.equal(m.stop_sequence, want.chat.slice(5, 9));
  assert.equal(m.content[0].text, want.chat.slice(0, want.chat.indexOf(want.chat.slice(5, 9))));
});

await check('anthropic: errors in its shape (NotFoundError, BadRequestError, AuthenticationError)', async () => {
  await assert.rejects(anthropic.messages.create({ model: 'claude-opus-4', max_tokens: 8, messages: amessages }),
    (e) => e instanceof Anthropic.NotFoundError && e.error?.error?.type === 'not_found_error');
  await assert.rejects(anthropic.messages.create({ model, max_tokens: 8, messages: [] }),
    (e) => e instanceof Anthropic.BadRequestError && e.error?.error?.type === 'invalid_request_error');
  const bad = new Anthropic({ baseURL: base, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(bad.messages.create({ model, max_tokens: 8, messages: amessages }),
    (e) => e instanceof Anthropic.AuthenticationError);
});

process.exit(failures() ? 1 : 0);
