// The OpenAI Responses API of glint serve, driven by the official clients pinned in package.json: the `openai`
// SDK (responses.create and responses.stream, whose accumulator checks every event's item ids, indices and
// types; function and custom tools; function_call_output round trips, with and without previous_response_id;
// json_schema text format), the `@openai/agents` SDK running an agent with a tool, and the real Codex CLI
// (`codex exec --json`) with a custom provider pointed at the server. The tiny model writes nonsense: these check
// the protocol end to end, not the words.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import { Agent, run, tool, setDefaultOpenAIClient, setOpenAIAPI, setTracingDisabled } from '@openai/agents';
import { z } from 'zod';
import { metric, startServer } from './harness.mjs';

const MODEL = 'glint-tiny';
let server;
let client;

before(async () => {
  // Codex's own instructions and tools make a prompt of ≈ 10k tokens.
  const engineArgs = ['--memory', '512M', '--max-seqs', '8', '--max-model-len', '16384'];
  server = await startServer(['--served-model-name', MODEL], { engineArgs });
  client = new OpenAI({ baseURL: `${server.baseURL}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120_000 });
});

after(async () => {
  if (!server) return;
  const status = await server.stop();
  assert.deepEqual(status, { code: 0, signal: null }, `glint serve did not exit 0 on SIGTERM:\n${server.log()}`);
});

const base = { model: MODEL, temperature: 0, max_output_tokens: 24, reasoning: { effort: 'none' } };
const weather = {
  type: 'function', name: 'get_weather', description: 'The weather in a city', strict: true,
  // maxLength: the tiny model's strings run on; a bounded one closes, so the call is whole within max_output_tokens.
  parameters: {
    type: 'object', properties: { city: { type: 'string', maxLength: 12 } }, required: ['city'],
    additionalProperties: false,
  },
};
const applyPatch = { type: 'custom', name: 'apply_patch', description: 'Apply a patch to files' };

describe('openai client: responses', () => {
  test('create: a message item, usage, stored and retrievable, deletable', async () => {
    const response = await client.responses.create({ ...base, input: 'Hello there' });
    assert.equal(response.object, 'response');
    assert.ok(['completed', 'incomplete'].includes(response.status));
    assert.ok(response.output.length >= 1);
    const message = response.output.find((item) => item.type === 'message');
    assert.ok(message, JSON.stringify(response.output));
    assert.equal(typeof response.output_text, 'string');
    assert.ok(response.usage.input_tokens > 0);
    assert.equal(response.usage.total_tokens, response.usage.input_tokens + response.usage.output_tokens);
    assert.equal(typeof response.usage.input_tokens_details.cached_tokens, 'number');
    assert.equal(typeof response.usage.output_tokens_details.reasoning_tokens, 'number');

    const fetched = await client.responses.retrieve(response.id);
    assert.deepEqual(fetched.output, response.output);
    await client.responses.delete(response.id);
    await assert.rejects(client.responses.retrieve(response.id), (error) => error.status === 404);
  });

  test('stream: the SDK accumulates every event into the final response', async () => {
    const stream = client.responses.stream({ ...base, input: 'Tell me a story', reasoning: { effort: 'low' } });
    const types = [];
    let last = -1;
    for await (const event of stream) {
      types.push(event.type);
      assert.ok(event.sequence_number > last, `sequence_number ${event.sequence_number} after ${last}`);
      last = event.sequence_number;
    }
    const final = await stream.finalResponse();
    assert.equal(types[0], 'response.created');
    assert.equal(types[1], 'response.in_progress');
    assert.ok(['response.completed', 'response.incomplete'].includes(types.at(-1)));
    assert.ok(types.includes('response.output_item.added'));
    assert.ok(final.output.length >= 1);
    if (final.status === 'incomplete') {
      assert.equal(final.incomplete_details.reason, 'max_output_tokens');
      assert.equal(final.usage.output_tokens, 24);
    } else {
      assert.ok(final.usage.output_tokens <= 24);
    }
  });

  test('function tool: forced call, then function_call_output fed back (with and without previous_response_id)', async () => {
    const first = await client.responses.create({
      ...base, max_output_tokens: 200, input: 'Weather in Paris?', tools: [weather],
      tool_choice: { type: 'function', name: 'get_weather' },
    });
    const call = first.output.find((item) => item.type === 'function_call');
    assert.ok(call, JSON.stringify(first.output));
    assert.equal(call.name, 'get_weather');
    const args = JSON.parse(call.arguments);  // strict: constrained to the schema
    assert.equal(typeof args.city, 'string');

    const output = { type: 'function_call_output', call_id: call.call_id, output: '{"temperature": 21}' };
    const followUp = await client.responses.create({
      ...base, previous_response_id: first.id, input: [output], tools: [weather],
    });
    assert.equal(followUp.previous_response_id, first.id);
    assert.ok(followUp.usage.input_tokens > first.usage.input_tokens, 'the follow-up prompt holds the first turn');

    // The same conversation sent whole, as a client with store: false does.
    const whole = await client.responses.create({
      ...base, store: false, tools: [weather],
      input: [{ role: 'user', content: 'Weather in Paris?' }, ...first.output, output],
    });
    assert.ok(whole.output.length >= 1);
    await assert.rejects(client.responses.retrieve(whole.id), (error) => error.status === 404);
  });

  test('custom tool: free-form input, streamed and whole', async () => {
    const args = {
      ...base, max_output_tokens: 48, input: 'Add a file', tools: [applyPatch],
      tool_choice: { type: 'custom', name: 'apply_patch' },
    };
    const stream = client.responses.stream(args);
    let deltas = '';
    for await (const event of stream) {
      if (event.type === 'response.custom_tool_call_input.delta') deltas += event.delta;
    }
    const final = await stream.finalResponse();
    const call = final.output.find((item) => item.type === 'custom_tool_call');
    assert.ok(call, JSON.stringify(final.output));
    assert.equal(call.name, 'apply_patch');
    assert.equal(typeof call.input, 'string');
    assert.equal(deltas, call.input);
    const whole = await client.responses.create(args);
    assert.equal(whole.output.find((item) => item.type === 'custom_tool_call').name, 'apply_patch');
  });

  test('text.format json_schema: the text is JSON of the schema', async () => {
    const schema = {
      type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'], additionalProperties: false,
    };
    const response = await client.responses.create({
      // Room for the bounded blanks the tiny model writes between tokens (a newline and up to 20 per gap).
      ...base, max_output_tokens: 160, input: 'Is it ok?',
      text: { format: { type: 'json_schema', name: 'answer', schema, strict: true } },
    });
    assert.equal(response.status, 'completed', JSON.stringify(response.output));
    assert.equal(typeof JSON.parse(response.output_text).ok, 'boolean');
  });

  test('errors are OpenAI errors with the right status', async () => {
    await assert.rejects(client.responses.create({ ...base, input: 'x', background: true }),
      (error) => error.status === 400 && error.param === 'background');
    await assert.rejects(client.responses.create({ ...base, input: 'x', previous_response_id: 'resp_nope' }),
      (error) => error.status === 404 && /resp_nope/.test(error.message));
    await assert.rejects(client.responses.create({ ...base, input: [{ type: 'bogus_item' }] }),
      (error) => error.status === 400 && error.param === 'input[0].type');
  });

  test('/metrics counts the endpoint', async () => {
    const text = await (await fetch(`${server.baseURL}/metrics`)).text();
    assert.ok(/glint_http_requests_total\{[^}]*endpoint="\/v1\/responses"[^}]*\} [1-9]/.test(text), text.slice(0, 2000));
    assert.ok(metric(text, 'glint_requests_running') >= 0);
  });
});

describe('@openai/agents', () => {
  test('an agent runs a tool through the Responses API', async () => {
    setDefaultOpenAIClient(client);
    setOpenAIAPI('responses');
    setTracingDisabled(true);
    const calls = [];
    const getWeather = tool({
      name: 'get_weather',
      description: 'The weather in a city',
      parameters: z.object({ city: z.enum(['Paris', 'Rome']) }),  // bounded, so the call closes within maxTokens
      execute: async ({ city }) => {
        calls.push(city);
        return `sunny in ${city}`;
      },
    });
    const agent = new Agent({
      name: 'weather', instructions: 'Answer with the tool.', model: MODEL, tools: [getWeather],
      // The tiny tokenizer spells the tags a character at a time (a call is ≈ 70 tokens); parallelToolCalls false
      // ends generation with the call (else the model goes on to maxTokens and the SDK sees response.incomplete).
      modelSettings: {
        toolChoice: 'get_weather', parallelToolCalls: false, temperature: 0, maxTokens: 160, reasoning: { effort: 'none' },
      },
      toolUseBehavior: 'stop_on_first_tool',
    });
    const result = await run(agent, 'Weather in Paris?', { maxTurns: 2 });
    assert.equal(calls.length, 1);
    assert.ok(['Paris', 'Rome'].includes(calls[0]));
    assert.equal(result.finalOutput, `sunny in ${calls[0]}`);
  });
});

describe('codex', () => {
  test('codex exec --json against glint serve finishes with success', { timeout: 240_000 }, async () => {
    const here = dirname(fileURLToPath(import.meta.url));
    const codex = join(here, 'node_modules', '.bin', 'codex');
    const home = mkdtempSync(join(tmpdir(), 'glint-codex-home-'));
    const work = join(home, 'work');
    mkdirSync(work);
    writeFileSync(join(home, 'config.toml'), [
      `model = "${MODEL}"`,
      'model_provider = "glint"',
      'model_context_window = 16384',
      '',
      '[model_providers.glint]',
      'name = "glint"',
      `base_url = "${server.baseURL}/v1"`,
      'wire_api = "responses"',
      'env_key = "GLINT_API_KEY"',
      '',
    ].join('\n'));
    try {
      const child = spawn(codex, ['exec', '--json', '--skip-git-repo-check', '-s', 'read-only', 'Say hello'], {
        cwd: work,
        env: { ...process.env, CODEX_HOME: home, GLINT_API_KEY: 'dummy' },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d) => { stdout += d; });
      child.stderr.on('data', (d) => { stderr += d; });
      const timer = setTimeout(() => child.kill('SIGKILL'), 180_000);
      const code = await new Promise((resolve) => child.on('exit', resolve));
      clearTimeout(timer);
      assert.equal(code, 0, `codex exited ${code}\n${stdout}\n${stderr}`);
      const events = stdout.split('\n').filter((line) => line.startsWith('{')).map((line) => JSON.parse(line));
      const types = events.map((event) => event.type);
      assert.ok(types.includes('turn.completed'), stdout);
      assert.ok(!types.includes('turn.failed'), stdout);
      assert.ok(events.some((event) => event.type === 'item.completed' && event.item.type === 'agent_message'), stdout);
      const usage = events.find((event) => event.type === 'turn.completed').usage;
      assert.ok(usage.input_tokens > 1000, 'Codex sent its instructions and tools');
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });
});
