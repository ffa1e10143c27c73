// glint serve driven by the official openai npm client (pinned in package.json): chat, completions, streaming,
// tools, logprobs, errors, API keys, 200 concurrent streams, and clients that disconnect mid-stream.
// The tiny model has random weights, so these tests check shapes, counts and protocol, not the words.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import { eventually, metric, startServer } from './harness.mjs';

const MODEL = 'glint-tiny';
let server;
let client;

before(async () => {
  server = await startServer(['--served-model-name', MODEL]);
  client = new OpenAI({ baseURL: `${server.baseURL}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120_000 });
});

after(async () => {
  if (!server) return;
  const status = await server.stop();
  assert.deepEqual(status, { code: 0, signal: null }, `glint serve did not exit 0 on SIGTERM:\n${server.log()}`);
});

const chatArgs = { model: MODEL, messages: [{ role: 'user', content: 'Hello there' }], temperature: 0, max_tokens: 8 };

async function promptTokens(body) {
  const reply = await fetch(`${server.baseURL}/tokenize`, { method: 'POST', body: JSON.stringify(body) });
  assert.equal(reply.status, 200);
  return (await reply.json()).count;
}

describe('openai client', () => {
  test('models.list names the served model', async () => {
    const models = await client.models.list();
    assert.ok(models.data.some((m) => m.id === MODEL));
  });

  test('chat completion: message, reasoning split, usage', async () => {
    const reply = await client.chat.completions.create({ ...chatArgs, ignore_eos: true });
    assert.equal(reply.object, 'chat.completion');
    assert.equal(reply.model, MODEL);
    assert.equal(reply.choices.length, 1);
    const message = reply.choices[0].message;
    assert.equal(message.role, 'assistant');
    assert.ok(message.content === null || typeof message.content === 'string');
    assert.ok('reasoning_content' in message);
    assert.equal(reply.choices[0].finish_reason, 'length');
    assert.equal(reply.usage.completion_tokens, 8);
    assert.equal(reply.usage.prompt_tokens, await promptTokens({ messages: chatArgs.messages, add_generation_prompt: true }));
    assert.equal(reply.usage.total_tokens, reply.usage.prompt_tokens + 8);

    // With thinking off the template closes <think>, so nothing is reasoning.
    const plain = await client.chat.completions.create({
      ...chatArgs, ignore_eos: true, chat_template_kwargs: { enable_thinking: false },
    });
    assert.equal(plain.choices[0].message.reasoning_content, null);
    assert.equal(typeof plain.choices[0].message.content, 'string');
  });

  test('greedy chat is deterministic and equals its stream', async () => {
    const args = { ...chatArgs, chat_template_kwargs: { enable_thinking: false }, ignore_eos: true };
    const first = await client.chat.completions.create(args);
    const second = await client.chat.completions.create(args);
    assert.equal(first.choices[0].message.content, second.choices[0].message.content);
    const stream = await client.chat.completions.create({ ...args, stream: true, stream_options: { include_usage: true } });
    let content = '';
    let roleSeen = false;
    let finish = null;
    let usage = null;
    for await (const chunk of stream) {
      assert.equal(chunk.object, 'chat.completion.chunk');
      if (chunk.usage) usage = chunk.usage;
      if (chunk.choices.length === 0) continue;
      const choice = chunk.choices[0];
      if (choice.delta.role) roleSeen = true;
      if (choice.delta.content) content += choice.delta.content;
      if (choice.finish_reason) finish = choice.finish_reason;
    }
    assert.ok(roleSeen);
    assert.equal(content, first.choices[0].message.content);
    assert.equal(finish, 'length');
    assert.equal(usage.completion_tokens, 8);
  });

  test('n > 1 and logprobs', async () => {
    const reply = await client.chat.completions.create({
      ...chatArgs, n: 2, temperature: 1, seed: 5, logprobs: true, top_logprobs: 3, ignore_eos: true, max_tokens: 4,
    });
    assert.equal(reply.choices.length, 2);
    assert.deepEqual(reply.choices.map((c) => c.index), [0, 1]);
    for (const choice of reply.choices) {
      const entries = choice.logprobs.content;
      assert.equal(entries.length, 4);
      for (const entry of entries) {
        assert.equal(typeof entry.token, 'string');
        assert.ok(entry.logprob <= 0);
        assert.ok(Array.isArray(entry.bytes));
        assert.equal(entry.top_logprobs.length, 3);
        assert.ok(entry.top_logprobs[0].logprob >= entry.top_logprobs[2].logprob);
      }
    }
    assert.equal(reply.usage.completion_tokens, 8);
  });

  test('completions: text, stream, token prompts, logprobs', async () => {
    const reply = await client.completions.create({
      model: MODEL, prompt: 'The quick brown fox', max_tokens: 6, temperature: 0, ignore_eos: true, logprobs: 2,
    });
    assert.equal(reply.object, 'text_completion');
    assert.equal(typeof reply.choices[0].text, 'string');
    assert.equal(reply.choices[0].logprobs.tokens.length, 6);
    assert.equal(reply.choices[0].logprobs.token_logprobs.length, 6);
    assert.equal(reply.usage.completion_tokens, 6);

    const stream = await client.completions.create({
      model: MODEL, prompt: 'The quick brown fox', max_tokens: 6, temperature: 0, ignore_eos: true, stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let usage = null;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      for (const choice of chunk.choices) text += choice.text;
    }
    assert.equal(text, reply.choices[0].text);
    assert.equal(usage.completion_tokens, 6);

    const tokens = await client.completions.create({ model: MODEL, prompt: [5, 6, 7, 8], max_tokens: 3, ignore_eos: true });
    assert.equal(tokens.usage.prompt_tokens, 4);
    assert.equal(tokens.usage.completion_tokens, 3);
  });

  test('tools: a named tool_choice becomes a tool call, whole and streamed', async () => {
    const tools = [{
      type: 'function',
      function: {
        name: 'get_weather', description: 'Weather in a city',
        parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 10 } }, required: ['city'] },
      },
    }];
    // Room for the whole call: a call cut by max_tokens is its text so far (finish_reason length), not JSON.
    const args = {
      ...chatArgs, tools, tool_choice: { type: 'function', function: { name: 'get_weather' } }, max_tokens: 200,
    };
    const reply = await client.chat.completions.create(args);
    assert.equal(reply.choices[0].finish_reason, 'tool_calls');
    const calls = reply.choices[0].message.tool_calls;
    assert.equal(calls.length >= 1, true);
    assert.equal(calls[0].type, 'function');
    assert.equal(calls[0].function.name, 'get_weather');
    assert.match(calls[0].id, /^call_/);
    assert.equal(typeof JSON.parse(calls[0].function.arguments), 'object');

    const stream = await client.chat.completions.create({ ...args, stream: true });
    const streamed = [];
    for await (const chunk of stream) {
      for (const delta of chunk.choices[0]?.delta?.tool_calls ?? []) {
        if (delta.id) streamed[delta.index] = { name: delta.function.name, arguments: '' };
        streamed[delta.index].arguments += delta.function.arguments ?? '';
      }
    }
    assert.equal(streamed[0].name, 'get_weather');
    assert.deepEqual(JSON.parse(streamed[0].arguments), JSON.parse(calls[0].function.arguments));

    // Past tool calls and results render (arguments given as a JSON string, as OpenAI clients send them).
    const followUp = await client.chat.completions.create({
      ...chatArgs, tools,
      messages: [
        { role: 'user', content: 'Weather in Paris?' },
        { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
        { role: 'tool', tool_call_id: 'call_1', content: 'Sunny' },
      ],
    });
    assert.equal(followUp.choices.length, 1);
  });

  test('errors are OpenAI errors with the right status', async () => {
    await assert.rejects(client.chat.completions.create({ ...chatArgs, temperature: 5 }), (error) => {
      assert.ok(error instanceof OpenAI.BadRequestError);
      assert.equal(error.status, 400);
      assert.equal(error.param, 'temperature');
      return true;
    });
    await assert.rejects(client.chat.completions.create({ ...chatArgs, model: 'nope' }), (error) => {
      assert.ok(error instanceof OpenAI.NotFoundError);
      assert.equal(error.code, 'model_not_found');
      return true;
    });
    await assert.rejects(client.completions.create({ model: MODEL, prompt: Array(600).fill(5), max_tokens: 1 }), (error) => {
      assert.ok(error instanceof OpenAI.BadRequestError);
      assert.equal(error.code, 'context_length_exceeded');
      return true;
    });
    await assert.rejects(client.chat.completions.create({ ...chatArgs, messages: [] }), OpenAI.BadRequestError);
    await assert.rejects(
      client.chat.completions.create({ ...chatArgs, tool_choice: 'required' }),
      (error) => error instanceof OpenAI.BadRequestError && error.param === 'tool_choice');
  });

  test('200 concurrent streams all complete with correct usage', async () => {
    const prompt = [11, 12, 13];
    const maxTokens = 3;
    const one = async (i) => {
      const stream = await client.completions.create({
        model: MODEL, prompt, max_tokens: maxTokens, ignore_eos: true, stream: true, seed: i,
        stream_options: { include_usage: true },
      });
      let usage = null;
      let finish = null;
      for await (const chunk of stream) {
        if (chunk.usage) usage = chunk.usage;
        for (const choice of chunk.choices) finish = choice.finish_reason ?? finish;
      }
      return { usage, finish };
    };
    const results = await Promise.all(Array.from({ length: 200 }, (_, i) => one(i)));
    for (const { usage, finish } of results) {
      assert.equal(finish, 'length');
      assert.deepEqual(
        { prompt: usage.prompt_tokens, completion: usage.completion_tokens, total: usage.total_tokens },
        { prompt: prompt.length, completion: maxTokens, total: prompt.length + maxTokens });
    }
  });

  test('a client that disconnects mid-stream leaves no running request and no used blocks', async () => {
    // On the fp32 reference path (≈ 80 tokens/s on the tiny model) 480 tokens take seconds, so the abort always
    // lands mid-stream; on the fast path (≈ 1,000 tokens/s) the stream could finish as 'length' first.
    const slow = await startServer(['--served-model-name', MODEL, '--path', 'reference']);
    try {
      const slowClient = new OpenAI({ baseURL: `${slow.baseURL}/v1`, apiKey: 'unused', maxRetries: 0 });
      const controller = new AbortController();
      const stream = await slowClient.completions.create(
        { model: MODEL, prompt: 'Tell me a long story', max_tokens: 480, ignore_eos: true, stream: true },
        { signal: controller.signal });
      let chunks = 0;
      try {
        for await (const chunk of stream) {
          if (chunk.choices.length > 0 && ++chunks === 2) controller.abort();
        }
      } catch (error) {
        assert.ok(error instanceof OpenAI.APIUserAbortError, `unexpected error: ${error}`);
      }
      // Events that came in the same network read as the second may still be yielded after the abort (seen once in
      // CI: 3); a stream that went on would bring hundreds.
      assert.ok(chunks >= 2 && chunks < 10, `the stream went on after the abort: ${chunks} chunks`);
      const idle = await eventually(async () => {
        const text = await (await fetch(`${slow.baseURL}/metrics`)).text();
        return metric(text, 'glint_requests_running') === 0 && metric(text, 'glint_requests_waiting') === 0 &&
            metric(text, 'glint_kv_blocks_used') === 0 && metric(text, 'glint_state_slots_used') === 0;
      });
      assert.ok(idle, 'the disconnected request still holds memory');
      const text = await (await fetch(`${slow.baseURL}/metrics`)).text();
      assert.ok(/glint_request_success_total\{finish_reason="abort"\} [1-9]/.test(text),
                'the disconnected request was not counted as aborted');
    } finally {
      const status = await slow.stop();
      assert.deepEqual(status, { code: 0, signal: null });
    }
  });
});

describe('API key', () => {
  test('every endpoint but /health needs the key', async () => {
    const keyed = await startServer(['--served-model-name', MODEL], { env: { GLINT_API_KEY: 'sk-test-key' } });
    try {
      const health = await fetch(`${keyed.baseURL}/health`);
      assert.equal(health.status, 200);
      const anonymous = await fetch(`${keyed.baseURL}/metrics`);
      assert.equal(anonymous.status, 401);
      const wrong = new OpenAI({ baseURL: `${keyed.baseURL}/v1`, apiKey: 'sk-wrong', maxRetries: 0 });
      await assert.rejects(wrong.models.list(), OpenAI.AuthenticationError);
      await assert.rejects(wrong.chat.completions.create(chatArgs), OpenAI.AuthenticationError);
      const right = new OpenAI({ baseURL: `${keyed.baseURL}/v1`, apiKey: 'sk-test-key', maxRetries: 0 });
      const reply = await right.chat.completions.create({ ...chatArgs, max_tokens: 2 });
      assert.equal(reply.choices.length, 1);
    } finally {
      const status = await keyed.stop();
      assert.deepEqual(status, { code: 0, signal: null });
    }
  });
});
