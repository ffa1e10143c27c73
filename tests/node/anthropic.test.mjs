// glint serve driven by the official Anthropic SDK (@anthropic-ai/sdk, pinned in package.json): messages.create and
// .stream, forced and streamed tool use, tool_result round trips, thinking, images, count_tokens, error shapes and
// the API key; plus the chat API's side of issue 31 (a cut call is not `{}`, numbers close within their bound).
// The tiny model has random-ish weights: the checks are about protocol and shapes, not the words.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import { startServer } from './harness.mjs';

const MODEL = 'glint-tiny';
const engineArgs = ['--memory', '256M', '--max-seqs', '16', '--max-model-len', '2048'];
let server;
let client;

before(async () => {
  server = await startServer(['--served-model-name', MODEL], { engineArgs });
  client = new Anthropic({ baseURL: server.baseURL, apiKey: 'unused', maxRetries: 0, timeout: 120_000 });
});

after(async () => {
  if (!server) return;
  const status = await server.stop();
  assert.deepEqual(status, { code: 0, signal: null }, `glint serve did not exit 0 on SIGTERM:\n${server.log()}`);
});

const ADD = {
  name: 'add',
  description: 'Adds two numbers',
  input_schema: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } }, required: ['a', 'b'] },
};
const WEATHER = {
  name: 'get_weather',
  description: 'The weather of a city',
  input_schema: { type: 'object', properties: { city: { type: 'string', maxLength: 12 } }, required: ['city'] },
};
const base = { model: MODEL, max_tokens: 48, messages: [{ role: 'user', content: 'Hello there' }] };
// Longer than a KDA state checkpoint interval (256 tokens): a shorter prompt has nothing the prefix cache can reuse.
const SYSTEM = 'You are a helpful assistant who answers in plain words. '.repeat(50);
const STOP_REASONS = ['end_turn', 'max_tokens', 'stop_sequence', 'tool_use', 'model_context_window_exceeded'];

function checkUsage(usage) {
  for (const field of ['input_tokens', 'output_tokens', 'cache_read_input_tokens', 'cache_creation_input_tokens']) {
    assert.ok(Number.isInteger(usage[field]) && usage[field] >= 0, `usage.${field}: ${JSON.stringify(usage)}`);
  }
}

// Collects a stream's raw events and its final message.
async function streamed(params) {
  const events = [];
  const stream = client.messages.stream(params);
  stream.on('streamEvent', (event) => events.push(event));
  const message = await stream.finalMessage();
  return { events, message };
}

// The documented order: message_start, per block start → deltas → stop (indices 0, 1, …), message_delta,
// message_stop; a thinking block gets its signature_delta before it stops.
function checkSequence(events) {
  const types = events.map((e) => e.type).filter((t) => t !== 'ping');
  assert.equal(types[0], 'message_start');
  assert.deepEqual(types.slice(-2), ['message_delta', 'message_stop']);
  let open = null;
  let next = 0;
  let signed = false;
  for (const event of events) {
    if (event.type === 'content_block_start') {
      assert.equal(open, null, 'a block starts after the previous one stopped');
      assert.equal(event.index, next++);
      open = event.content_block.type;
      signed = false;
    } else if (event.type === 'content_block_delta') {
      assert.equal(event.index, next - 1);
      if (event.delta.type === 'signature_delta') signed = true;
    } else if (event.type === 'content_block_stop') {
      assert.equal(event.index, next - 1);
      if (open === 'thinking') assert.ok(signed, 'signature_delta before a thinking block stops');
      open = null;
    }
  }
  assert.equal(open, null);
}

describe('anthropic sdk', () => {
  test('messages.create: text blocks, stop_reason, usage; count_tokens agrees', async () => {
    const message = await client.messages.create({ ...base, system: SYSTEM, temperature: 0 });
    assert.equal(message.type, 'message');
    assert.equal(message.role, 'assistant');
    assert.ok(message.id.startsWith('msg_'));
    assert.ok(STOP_REASONS.includes(message.stop_reason), message.stop_reason);
    for (const block of message.content) assert.equal(block.type, 'text');
    checkUsage(message.usage);
    const counted = await client.messages.countTokens({ model: MODEL, system: SYSTEM, messages: base.messages });
    assert.equal(counted.input_tokens, message.usage.input_tokens + message.usage.cache_read_input_tokens);
    // The same prompt again is a prefix-cache hit, reported as cache_read_input_tokens.
    const again = await client.messages.create({ ...base, system: SYSTEM, temperature: 0 });
    assert.ok(again.usage.cache_read_input_tokens > 0, JSON.stringify(again.usage));
    assert.equal(again.usage.input_tokens + again.usage.cache_read_input_tokens, counted.input_tokens);
  });

  test('messages.stream: the event sequence and the accumulated message agree', async () => {
    const { events, message } = await streamed({ ...base, max_tokens: 24, system: 'Be brief.' });
    checkSequence(events);
    const text = events
      .filter((e) => e.type === 'content_block_delta' && e.delta.type === 'text_delta')
      .map((e) => e.delta.text)
      .join('');
    assert.equal(message.content.filter((b) => b.type === 'text').map((b) => b.text).join(''), text);
    assert.ok(events[0].message.usage.input_tokens > 0);
    checkUsage(message.usage);
  });

  test('forced tool use: numbers close within their bound at temperature 0', async () => {
    const message = await client.messages.create({
      ...base, max_tokens: 200, temperature: 0, tools: [ADD, WEATHER], tool_choice: { type: 'tool', name: 'add' },
    });
    assert.equal(message.stop_reason, 'tool_use', JSON.stringify(message));
    const call = message.content.find((b) => b.type === 'tool_use');
    assert.equal(call.name, 'add');
    assert.ok(call.id.startsWith('toolu_'));
    assert.equal(typeof call.input.a, 'number', JSON.stringify(call.input));
    assert.equal(typeof call.input.b, 'number', JSON.stringify(call.input));
  });

  test('streamed tool use: input_json_delta fragments as generated', async () => {
    const { events, message } = await streamed({
      ...base, max_tokens: 200, temperature: 0, tools: [WEATHER], tool_choice: { type: 'any' },
    });
    checkSequence(events);
    assert.equal(message.stop_reason, 'tool_use', JSON.stringify(message));
    const fragments = events.filter((e) => e.type === 'content_block_delta' && e.delta.type === 'input_json_delta');
    assert.ok(fragments.length >= 2, `arguments must stream, got ${fragments.length} fragment(s)`);
    const call = message.content.find((b) => b.type === 'tool_use');
    assert.deepEqual(JSON.parse(fragments.map((e) => e.delta.partial_json).join('')), call.input);
    assert.equal(typeof call.input.city, 'string');
  });

  test('a call cut by max_tokens is the text so far, never {}', async () => {
    const { events, message } = await streamed({
      ...base, max_tokens: 4, temperature: 0, tools: [WEATHER], tool_choice: { type: 'tool', name: 'get_weather' },
    });
    assert.equal(message.stop_reason, 'max_tokens');
    const partial = events
      .filter((e) => e.type === 'content_block_delta' && e.delta.type === 'input_json_delta')
      .map((e) => e.delta.partial_json)
      .join('');
    assert.notEqual(partial, '{}');
    assert.ok(!partial.includes('</'), partial);
    // The chat API: finish_reason length and the text so far (with 1 token, nothing: "", not a made-up "{}").
    for (const maxTokens of [1, 4]) {
      const reply = await fetch(`${server.baseURL}/v1/chat/completions`, {
        method: 'POST',
        body: JSON.stringify({
          model: MODEL, max_tokens: maxTokens, temperature: 0, messages: base.messages,
          tools: [{ type: 'function', function: { name: 'get_weather', parameters: WEATHER.input_schema } }],
          tool_choice: { type: 'function', function: { name: 'get_weather' } },
        }),
      });
      const choice = (await reply.json()).choices[0];
      assert.equal(choice.finish_reason, 'length');
      const args = choice.message.tool_calls[0].function.arguments;
      assert.notEqual(args, '{}', `max_tokens ${maxTokens}`);
      assert.ok(!args.includes('</'), args);
    }
  });

  test('tool_result round trip, with is_error', async () => {
    const message = await client.messages.create({
      ...base,
      tools: [WEATHER],
      messages: [
        { role: 'user', content: 'Weather in Paris?' },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } }] },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'text', text: 'sunny, 21 C' }] },
            { type: 'text', text: 'And Oslo?' },
          ],
        },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_2', name: 'get_weather', input: { city: 'Oslo' } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_2', is_error: true, content: 'timeout' }] },
      ],
    });
    assert.ok(STOP_REASONS.includes(message.stop_reason));
  });

  test('thinking: blocks in order, signed', async () => {
    const { events, message } = await streamed({
      ...base, max_tokens: 40, thinking: { type: 'enabled', budget_tokens: 1024 },
      messages: [
        { role: 'user', content: 'Think first.' },
        { role: 'assistant', content: [{ type: 'thinking', thinking: 'earlier', signature: 'x' }, { type: 'text', text: 'ok' }] },
        { role: 'user', content: 'Again.' },
      ],
    });
    checkSequence(events);
    const thinking = message.content.filter((b) => b.type === 'thinking');
    for (const block of thinking) assert.ok(block.signature.length > 0);
    if (thinking.length > 0) assert.equal(message.content[0].type, 'thinking');
  });

  test('images: base64 accepted, count_tokens counts the image tokens', async () => {
    const here = dirname(fileURLToPath(import.meta.url));
    const png = readFileSync(join(here, '..', 'data', 'vision_input', 'wide', 'input.png')).toString('base64');
    const content = [
      { type: 'image', source: { type: 'base64', media_type: 'image/png', data: png } },
      { type: 'text', text: 'What is this?' },
    ];
    const message = await client.messages.create({ ...base, max_tokens: 8, messages: [{ role: 'user', content }] });
    const counted = await client.messages.countTokens({ model: MODEL, messages: [{ role: 'user', content }] });
    const plain = await client.messages.countTokens({ model: MODEL, messages: [{ role: 'user', content: 'What is this?' }] });
    assert.equal(counted.input_tokens, message.usage.input_tokens + message.usage.cache_read_input_tokens);
    assert.ok(counted.input_tokens > plain.input_tokens + 4, `${counted.input_tokens} vs ${plain.input_tokens}`);
  });

  test('errors have Anthropic shapes', async () => {
    await assert.rejects(client.messages.create({ model: MODEL, messages: base.messages }), (error) => {
      assert.ok(error instanceof Anthropic.BadRequestError, String(error));
      assert.equal(error.error.type, 'error');
      assert.equal(error.error.error.type, 'invalid_request_error');
      assert.match(error.error.error.message, /max_tokens/);
      return true;
    });
    await assert.rejects(client.messages.create({ ...base, model: 'claude-nonexistent' }), (error) => {
      assert.ok(error instanceof Anthropic.NotFoundError, String(error));
      assert.equal(error.error.error.type, 'not_found_error');
      return true;
    });
    await assert.rejects(
      client.messages.create({ ...base, messages: [{ role: 'user', content: [{ type: 'hologram' }] }] }),
      (error) => error instanceof Anthropic.BadRequestError && /hologram/.test(error.error.error.message),
    );
  });

  test('--api-key: x-api-key accepted, wrong key is authentication_error', async () => {
    const keyed = await startServer(['--served-model-name', MODEL, '--api-key', 'sekret'], { engineArgs });
    try {
      const good = new Anthropic({ baseURL: keyed.baseURL, apiKey: 'sekret', maxRetries: 0 });
      const message = await good.messages.create({ ...base, max_tokens: 2 });
      assert.equal(message.type, 'message');
      const bad = new Anthropic({ baseURL: keyed.baseURL, apiKey: 'wrong', maxRetries: 0 });
      await assert.rejects(bad.messages.create({ ...base, max_tokens: 2 }), (error) => {
        assert.ok(error instanceof Anthropic.AuthenticationError, String(error));
        assert.equal(error.error.error.type, 'authentication_error');
        return true;
      });
      const head = await fetch(`${keyed.baseURL}/`, { method: 'HEAD' });
      assert.equal(head.status, 200);
    } finally {
      await keyed.stop();
    }
  });
});
