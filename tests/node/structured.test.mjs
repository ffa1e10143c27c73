// Structured output through the official openai npm client (pinned in package.json): response_format json_schema
// with chat.completions.create and chat.completions.parse (no zod: the client JSON-parses the content), strict
// tools with parse (parsed_arguments), tool_choice required and named with the arguments checked against their
// parameter schemas, and the shape of streamed deltas under a constraint. The tiny model has random weights, so
// the checks are about validity and protocol, not the words; sampling is seeded at temperature 1.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import { startServer } from './harness.mjs';

const MODEL = 'glint-tiny';
let server;
let client;

before(async () => {
  // Tool prompts are ≈ 400 tokens and a call takes up to ≈ 300: a longer context than the harness default.
  const engineArgs = ['--memory', '256M', '--max-seqs', '16', '--max-model-len', '1024'];
  server = await startServer(['--served-model-name', MODEL], { engineArgs });
  client = new OpenAI({ baseURL: `${server.baseURL}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120_000 });
});

after(async () => {
  if (!server) return;
  const status = await server.stop();
  assert.deepEqual(status, { code: 0, signal: null }, `glint serve did not exit 0 on SIGTERM:\n${server.log()}`);
});

// The JSON Schema subset these tests use, checked by hand: type, properties, required, additionalProperties
// (absent = false, as glint compiles it), enum, minimum/maximum, minLength/maxLength, items/minItems/maxItems.
function validate(value, schema, path = '$') {
  const fail = (why) => assert.fail(`${path}: ${why} (${JSON.stringify(value)})`);
  if (schema.enum && !schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(value))) fail('not in enum');
  const types = schema.type === undefined ? [] : [schema.type].flat();
  const typeOf = (v) => (v === null ? 'null' : Array.isArray(v) ? 'array' : Number.isInteger(v) ? 'integer' : typeof v);
  if (types.length && !types.some((t) => t === typeOf(value) || (t === 'number' && typeOf(value) === 'integer'))) {
    fail(`not of type ${types}`);
  }
  if (typeof value === 'number') {
    if (schema.minimum !== undefined && value < schema.minimum) fail('below minimum');
    if (schema.maximum !== undefined && value > schema.maximum) fail('above maximum');
  }
  if (typeof value === 'string') {
    const length = [...value].length;
    if (schema.minLength !== undefined && length < schema.minLength) fail('too short');
    if (schema.maxLength !== undefined && length > schema.maxLength) fail('too long');
  }
  if (Array.isArray(value)) {
    if (schema.minItems !== undefined && value.length < schema.minItems) fail('too few items');
    if (schema.maxItems !== undefined && value.length > schema.maxItems) fail('too many items');
    value.forEach((item, i) => schema.items && validate(item, schema.items, `${path}[${i}]`));
  }
  if (typeOf(value) === 'object' && schema.properties) {
    for (const name of schema.required ?? []) if (!(name in value)) fail(`missing ${name}`);
    for (const [name, item] of Object.entries(value)) {
      if (!(name in schema.properties)) fail(`unexpected property ${name}`);
      validate(item, schema.properties[name], `${path}.${name}`);
    }
  }
}

const RECORD = {
  type: 'object',
  properties: {
    name: { type: 'string', minLength: 1, maxLength: 10 },
    level: { type: 'integer', minimum: 1, maximum: 5 },
    tags: { type: 'array', items: { enum: ['a', 'b', 'c'] }, minItems: 1, maxItems: 2 },
  },
  required: ['name', 'level', 'tags'],
  additionalProperties: false,
};
const ADD = {
  type: 'object',
  properties: { a: { type: 'number', minimum: -50, maximum: 50 }, b: { type: 'integer', minimum: 0, maximum: 9 } },
  required: ['a', 'b'],
  additionalProperties: false,
};
const WEATHER = {
  type: 'object',
  properties: { city: { type: 'string', maxLength: 12 }, unit: { enum: ['celsius', 'fahrenheit'] } },
  required: ['city', 'unit'],
  additionalProperties: false,
};
const TOOLS = [
  { type: 'function', function: { name: 'add', parameters: ADD, strict: true } },
  { type: 'function', function: { name: 'get_weather', parameters: WEATHER, strict: true } },
];
const PARAMETERS = { add: ADD, get_weather: WEATHER };
const base = {
  model: MODEL,
  messages: [{ role: 'user', content: 'Give me a record.' }],
  temperature: 1,
  max_tokens: 320,
  chat_template_kwargs: { enable_thinking: false },
};
const jsonSchema = { type: 'json_schema', json_schema: { name: 'record', schema: RECORD, strict: true } };

describe('structured output with the openai client', () => {
  test('response_format json_schema: create returns valid JSON content', async () => {
    let finished = 0;
    for (const seed of [1, 2, 3]) {
      const reply = await client.chat.completions.create({ ...base, seed, response_format: jsonSchema });
      const choice = reply.choices[0];
      if (choice.finish_reason === 'length') continue;
      assert.equal(choice.finish_reason, 'stop');
      validate(JSON.parse(choice.message.content), RECORD);
      finished += 1;
    }
    assert.ok(finished >= 1, 'no seed finished within max_tokens');
  });

  test('chat.completions.parse (no zod) gives message.parsed', async () => {
    const reply = await client.chat.completions.parse({ ...base, seed: 4, response_format: jsonSchema });
    const message = reply.choices[0].message;
    assert.deepEqual(message.parsed, JSON.parse(message.content));
    validate(message.parsed, RECORD);
  });

  test('tool_choice required: calls of the request tools with valid arguments', async () => {
    let calls = 0;
    for (const seed of [1, 2, 3]) {
      const reply = await client.chat.completions.create({ ...base, seed, tools: TOOLS, tool_choice: 'required' });
      const choice = reply.choices[0];
      if (choice.finish_reason === 'length') continue;
      assert.equal(choice.finish_reason, 'tool_calls');
      assert.ok(choice.message.tool_calls.length >= 1);
      for (const call of choice.message.tool_calls) {
        assert.ok(call.function.name in PARAMETERS, `unknown tool ${call.function.name}`);
        validate(JSON.parse(call.function.arguments), PARAMETERS[call.function.name]);
        calls += 1;
      }
    }
    assert.ok(calls >= 1, 'no call finished within max_tokens');
  });

  test('named tool_choice with parse: parsed_arguments follow the strict schema', async () => {
    const reply = await client.chat.completions.parse({
      ...base, seed: 5, tools: TOOLS, tool_choice: { type: 'function', function: { name: 'add' } },
    });
    const [call] = reply.choices[0].message.tool_calls;
    assert.equal(call.function.name, 'add');
    assert.deepEqual(call.function.parsed_arguments, JSON.parse(call.function.arguments));
    validate(call.function.parsed_arguments, ADD);
  });

  test('streamed deltas keep their shape under a constraint', async () => {
    const stream = await client.chat.completions.create({ ...base, seed: 6, response_format: jsonSchema, stream: true });
    let content = '';
    let roles = 0;
    let finish = null;
    for await (const chunk of stream) {
      assert.equal(chunk.object, 'chat.completion.chunk');
      const [choice] = chunk.choices;
      if (choice.delta.role) roles += 1;
      if (choice.delta.content) content += choice.delta.content;
      if (choice.finish_reason) finish = choice.finish_reason;
    }
    assert.equal(roles, 1);
    if (finish === 'stop') validate(JSON.parse(content), RECORD);
    else assert.equal(finish, 'length');

    const calls = await client.chat.completions.create({
      ...base, seed: 7, tools: TOOLS, tool_choice: { type: 'function', function: { name: 'get_weather' } }, stream: true,
    });
    const argumentsByIndex = new Map();
    for await (const chunk of calls) {
      for (const delta of chunk.choices[0]?.delta.tool_calls ?? []) {
        if (!argumentsByIndex.has(delta.index)) {
          assert.ok(delta.id && delta.type === 'function' && delta.function.name === 'get_weather', JSON.stringify(delta));
          argumentsByIndex.set(delta.index, '');
        }
        argumentsByIndex.set(delta.index, argumentsByIndex.get(delta.index) + (delta.function?.arguments ?? ''));
      }
    }
    assert.ok(argumentsByIndex.size >= 1);
    validate(JSON.parse(argumentsByIndex.get(0)), WEATHER);
  });

  test('a bad schema is a 400 naming the keyword', async () => {
    await assert.rejects(
      client.chat.completions.create({
        ...base, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', not: {} } } },
      }),
      (error) => error instanceof OpenAI.BadRequestError && /'not'/.test(error.message),
    );
  });
});
