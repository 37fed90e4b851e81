// Tool use and constrained output through the official OpenAI, Ollama and Anthropic clients, on a
// random-weight model whose output follows no format on its own: node agents.test.mjs BASE_URL.
// Every call's arguments and every structured reply validate against their schema with ajv
// (independent of the server); streamed calls reassemble into the answer's; a conversation that
// replays a call and its result is accepted in each API's terms.
import assert from 'node:assert/strict';
import Ajv from 'ajv';
import Anthropic from '@anthropic-ai/sdk';
import { Ollama } from 'ollama';
import OpenAI from 'openai';
import { check, failures } from './check.mjs';

const [base] = process.argv.slice(2);
const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'none', maxRetries: 0, timeout: 120000 });
const ollama = new Ollama({ host: base });
const anthropic = new Anthropic({ baseURL: base, apiKey: 'none', maxRetries: 0, timeout: 120000 });
const model = (await openai.models.list()).data[0].id;
const ajv = new Ajv({ strict: false });

const weather = {
  type: 'object',
  properties: {
    city: { type: 'string', maxLength: 16 },
    unit: { enum: ['celsius', 'fahrenheit'] },
    days: { type: 'integer', minimum: 1 },
  },
  required: ['city', 'unit'],
  additionalProperties: false,
};
const pet = {
  type: 'object',
  properties: { name: { type: 'string', maxLength: 12 }, legs: { type: 'integer', minimum: 0 } },
  required: ['name', 'legs'],
  additionalProperties: false,
};
const validWeather = ajv.compile(weather);
const validPet = ajv.compile(pet);
const valid = (v, x) => assert.ok(v(x), `${JSON.stringify(x)}: ${ajv.errorsText(v.errors)}`);
const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather for a city', parameters: weather } }];
const ask = [{ role: 'user', content: 'What is the weather in Oslo?' }];

// ---- OpenAI
let call;
await check('openai: tool_choice required gives calls whose arguments validate', async () => {
  for (const seed of [1, 2, 3]) {
    const c = await openai.chat.completions.create({ model, messages: ask, tools, tool_choice: 'required', seed, max_tokens: 300 });
    const m = c.choices[0].message;
    assert.equal(c.choices[0].finish_reason, 'tool_calls');
    assert.ok(m.tool_calls.length >= 1);
    for (const tc of m.tool_calls) {
      assert.equal(tc.type, 'function');
      assert.equal(tc.function.name, 'get_weather');
      assert.ok(tc.id.length > 0);
      valid(validWeather, JSON.parse(tc.function.arguments));
    }
    call = m.tool_calls[0];
  }
});

await check('openai: streamed tool-call deltas reassemble into the answer\'s call', async () => {
  const req = { model, messages: ask, tools, tool_choice: { type: 'function', function: { name: 'get_weather' } }, seed: 7, max_tokens: 300 };
  const whole = (await openai.chat.completions.create(req)).choices[0].message.tool_calls;
  const calls = [];
  let finish = null;
  for await (const chunk of await openai.chat.completions.create({ ...req, stream: true })) {
    for (const d of chunk.choices[0]?.delta?.tool_calls ?? []) {
      calls[d.index] ??= { id: d.id, name: '', arguments: '' };
      calls[d.index].name += d.function?.name ?? '';
      calls[d.index].arguments += d.function?.arguments ?? '';
    }
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(finish, 'tool_calls');
  assert.deepEqual(calls.map((c) => [c.name, JSON.parse(c.arguments)]),
    whole.map((c) => [c.function.name, JSON.parse(c.function.arguments)]));
  calls.forEach((c) => valid(validWeather, JSON.parse(c.arguments)));
});

await check('openai: the tool-result turn is accepted and answered', async () => {
  const c = await openai.chat.completions.create({
    model, tools, seed: 1, max_tokens: 8,
    messages: [...ask, { role: 'assistant', content: null, tool_calls: [call] },
      { role: 'tool', tool_call_id: call.id, content: '{"temp": -3}' }],
  });
  assert.equal(c.choices[0].message.role, 'assistant');
  assert.ok(c.usage.prompt_tokens > 10);
});

await check('openai: json_schema strict output parses and validates', async () => {
  for (const seed of [1, 2]) {
    const c = await openai.chat.completions.create({ model, messages: [{ role: 'user', content: 'A pet.' }], seed, max_tokens: 300,
      response_format: { type: 'json_schema', json_schema: { name: 'pet', strict: true, schema: pet } } });
    valid(validPet, JSON.parse(c.choices[0].message.content));
  }
});

// ---- Ollama
await check('ollama: format with a schema gives JSON that validates', async () => {
  for (const seed of [1, 2]) {
    const c = await ollama.chat({ model, messages: [{ role: 'user', content: 'A pet.' }], format: pet, options: { seed } });
    valid(validPet, JSON.parse(c.message.content));
  }
  const g = await ollama.generate({ model, prompt: 'A pet.', format: pet, options: { seed: 3 }, stream: false });
  valid(validPet, JSON.parse(g.response));
  let text = '';
  for await (const part of await ollama.chat({ model, messages: [{ role: 'user', content: 'A pet.' }], format: pet, options: { seed: 4 }, stream: true }))
    text += part.message.content;
  valid(validPet, JSON.parse(text));
});

await check('ollama: tool calls (arguments as objects), streamed and not, and the tool-result turn', async () => {
  // Ollama has no tool_choice; this server takes OpenAI's from the body, so that a call comes
  const req = { model, messages: ask, tools, tool_choice: 'required', options: { seed: 5 } };
  const c = await ollama.chat(req);
  assert.ok(c.message.tool_calls.length >= 1);
  for (const tc of c.message.tool_calls) {
    assert.equal(tc.function.name, 'get_weather');
    valid(validWeather, tc.function.arguments);
  }
  const streamed = [];
  for await (const part of await ollama.chat({ ...req, stream: true }))
    streamed.push(...(part.message.tool_calls ?? []));
  assert.deepEqual(streamed, c.message.tool_calls);
  const next = await ollama.chat({ model, tools, options: { seed: 1, num_predict: 8 }, messages: [...ask,
    { role: 'assistant', content: '', tool_calls: c.message.tool_calls },
    { role: 'tool', content: '{"temp": -3}', tool_name: 'get_weather' }] });
  assert.equal(next.message.role, 'assistant');
  assert.ok(next.prompt_eval_count > 10);
});

// ---- Anthropic
const atools = [{ name: 'get_weather', description: 'Weather for a city', input_schema: weather }];
let use;
await check('anthropic: tool_choice any gives tool_use blocks whose input validates', async () => {
  const m = await anthropic.messages.create({ model, max_tokens: 300, messages: ask, tools: atools, tool_choice: { type: 'any' } });
  assert.equal(m.stop_reason, 'tool_use');
  const uses = m.content.filter((b) => b.type === 'tool_use');
  assert.ok(uses.length >= 1);
  for (const u of uses) {
    assert.equal(u.name, 'get_weather');
    assert.ok(u.id.startsWith('toolu_'));
    valid(validWeather, u.input);
  }
  use = uses[0];
});

await check('anthropic: streamed tool use (input_json_delta) equals the answer', async () => {
  const req = { model, max_tokens: 300, messages: ask, tools: atools, temperature: 0,
    tool_choice: { type: 'tool', name: 'get_weather', disable_parallel_tool_use: true } };
  const whole = await anthropic.messages.create(req);
  const final = await anthropic.messages.stream(req).finalMessage();
  assert.equal(final.stop_reason, 'tool_use');
  const inputs = (m) => m.content.filter((b) => b.type === 'tool_use').map((b) => [b.name, b.input]);
  assert.deepEqual(inputs(final), inputs(whole));
  inputs(final).forEach(([, input]) => valid(validWeather, input));
});

await check('anthropic: the tool_result turn is accepted and answered', async () => {
  const m = await anthropic.messages.create({ model, max_tokens: 8, tools: atools, messages: [...ask,
    { role: 'assistant', content: [use] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '{"temp": -3}' }] }] });
  assert.equal(m.role, 'assistant');
  assert.ok(m.usage.input_tokens > 10);
});

process.exit(failures() ? 1 : 0);
