// The chat page's client logic (src/server/webui/chat.js, store.js's titleFrom) as plain ES modules under node: the
// request body built from a conversation and the settings, SSE splitting, answer timing, and server errors in words.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  AnswerTiming, ApiError, apiMessages, describeError, imageProblem, MAX_IMAGE_BYTES, MIN_RATE_SPAN_MS, requestBody, splitSse,
} from '../../src/server/webui/chat.js';
import { DEFAULT_SETTINGS, titleFrom } from '../../src/server/webui/store.js';

const conversation = {
  messages: [
    { role: 'user', content: 'Weather?' },
    { role: 'assistant', content: '', reasoning: 'think', toolCalls: [{ id: 'call_1', name: 'weather', arguments: '{"city":"Oslo"}' }] },
    { role: 'assistant', content: 'broken', error: 'The server failed' },
    { role: 'user', content: 'And tomorrow?' },
  ],
};

describe('request body', () => {
  test('default settings leave sampling to the server and turn nothing off but the stream options', () => {
    const body = requestBody({ messages: [{ role: 'user', content: 'Hi' }] }, DEFAULT_SETTINGS);
    assert.deepEqual(body, { messages: [{ role: 'user', content: 'Hi' }], stream: true, stream_options: { include_usage: true } });
  });

  test('every setting reaches the body; extra JSON is merged last', () => {
    const settings = { ...DEFAULT_SETTINGS, systemPrompt: 'Be brief.', temperature: '0.5', topP: '0.9', maxTokens: '64',
      reasoningEffort: 'high', thinking: false, extraJson: '{"seed": 7, "temperature": 0}' };
    const body = requestBody({ messages: [{ role: 'user', content: 'Hi' }] }, settings);
    assert.deepEqual(body, {
      messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi' }], stream: true,
      stream_options: { include_usage: true }, temperature: 0, top_p: 0.9, max_tokens: 64, reasoning_effort: 'high',
      chat_template_kwargs: { enable_thinking: false }, seed: 7,
    });
  });

  test('invalid extra JSON throws (the page says so instead of sending)', () => {
    assert.throws(() => requestBody({ messages: [] }, { ...DEFAULT_SETTINGS, extraJson: '{seed: 1}' }), SyntaxError);
  });

  test('history: tool calls sent back, reasoning and failed answers are not, a blank system prompt is dropped', () => {
    assert.deepEqual(apiMessages(conversation, { ...DEFAULT_SETTINGS, systemPrompt: '  ' }), [
      { role: 'user', content: 'Weather?' },
      { role: 'assistant', content: '', tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'weather', arguments: '{"city":"Oslo"}' } }] },
      { role: 'user', content: 'And tomorrow?' },
    ]);
  });
});

describe('stream parsing and timing', () => {
  test('splitSse returns complete events and keeps the unfinished tail', () => {
    assert.deepEqual(splitSse('data: {"a":1}\n\ndata: [DONE]\n\ndata: {"b"'), [['{"a":1}', '[DONE]'], 'data: {"b"']);
    assert.deepEqual(splitSse('data:x\r\n\r\n: comment\n\nevent: e\ndata: y\ndata: z\n\n'), [['x', 'y\nz'], '']);
    assert.deepEqual(splitSse(''), [[], '']);
  });

  test('AnswerTiming: time to first token and decode speed from the deltas; usage makes the count exact', () => {
    const timing = new AnswerTiming(1000);
    assert.deepEqual(timing.summary(), { tokens: 0, exact: false, ttft: null, tokensPerSecond: null });
    timing.delta(1250);
    for (let t = 1350; t <= 2250; t += 100) timing.delta(t);  // 10 more deltas over 1 s
    assert.deepEqual(timing.summary(), { tokens: 11, exact: false, ttft: 0.25, tokensPerSecond: 10 });
    timing.tokens = 21;
    assert.deepEqual(timing.summary(), { tokens: 21, exact: true, ttft: 0.25, tokensPerSecond: 20 });
  });

  test('AnswerTiming: no speed from deltas that arrived together (a short answer in a few network reads)', () => {
    const timing = new AnswerTiming(0);
    for (let i = 0; i < 48; ++i) timing.delta(60 + (i < 40 ? 0 : MIN_RATE_SPAN_MS - 1));
    assert.deepEqual(timing.summary(), { tokens: 48, exact: false, ttft: 0.06, tokensPerSecond: null });
    timing.delta(60 + MIN_RATE_SPAN_MS);
    assert.equal(timing.summary().tokensPerSecond, 48 / (MIN_RATE_SPAN_MS / 1000));
  });
});

describe('errors in plain words', () => {
  const api = (status, error) => new ApiError(status, { error });
  test('each status gets a sentence that says what to do', () => {
    assert.match(describeError(api(429, { message: 'queue full', code: 'server_busy' })), /busy.*Wait a moment/);
    const tooLong = describeError(api(400, { message: 'the prompt has 9000 tokens but this model\'s context is 8192 tokens', code: 'context_length_exceeded' }));
    assert.match(tooLong, /^This conversation is too long for the model: the prompt has 9000 tokens/);
    assert.match(tooLong, /Start a new chat/);
    assert.match(describeError(api(401, { message: 'invalid API key' })), /API key/);
    assert.equal(describeError(api(400, { message: 'temperature must be in [0, 2]', param: 'temperature' })),
      'The server refused the request: temperature must be in [0, 2] (field "temperature").');
    assert.match(describeError(api(503, { message: 'shutting down' })), /cannot take requests right now \(shutting down\)/);
    assert.match(describeError(api(500, { message: 'engine failed' })), /failed while answering: engine failed/);
    assert.equal(describeError(new ApiError(404, null)), 'The server answered 404: HTTP 404.');
    assert.match(describeError(new TypeError('Failed to fetch')), /Cannot reach the server/);
  });
});

test('titleFrom: the first line, at most 60 characters', () => {
  assert.equal(titleFrom('  Hello\nworld'), 'Hello');
  assert.equal(titleFrom('x'.repeat(80)), `${'x'.repeat(57)}…`);
  assert.equal(titleFrom('\n\n'), 'New chat');
});

describe('images', () => {
  test('a message with images sends image_url parts first, then its text; one without stays a string', () => {
    const url = 'data:image/png;base64,iVBORw0KGgo=';
    const messages = apiMessages({ messages: [{ role: 'user', content: 'What?', images: [{ name: 'a.png', url }] },
      { role: 'user', content: 'plain' }] }, DEFAULT_SETTINGS);
    assert.deepEqual(messages, [
      { role: 'user', content: [{ type: 'image_url', image_url: { url } }, { type: 'text', text: 'What?' }] },
      { role: 'user', content: 'plain' }]);
  });

  test('the composer refuses other types and files over the server\'s default limit, naming them', () => {
    assert.equal(imageProblem({ name: 'a.webp', type: 'image/webp', size: MAX_IMAGE_BYTES }), '');
    assert.match(imageProblem({ name: 'big.png', type: 'image/png', size: MAX_IMAGE_BYTES + 1 }),
      /"big.png" is 20.0 MiB; the server takes images up to 20 MiB/);
    assert.match(imageProblem({ name: 'a.bmp', type: 'image/bmp', size: 10 }), /"a.bmp" is not a PNG, JPEG, WebP or GIF/);
    assert.equal(MAX_IMAGE_BYTES, 20 * 1024 * 1024);  // media::DecodeLimits::max_bytes, glint serve's default
  });

  test('a model without a tower: the 400 in plain words', () => {
    const error = new ApiError(400, { error: { message: "this server takes no images: no vision_config",
      code: 'image_input_not_supported', param: 'messages[0].content[0]' } });
    assert.match(describeError(error), /^This model cannot look at images \(this server takes no images: no vision_config\)/);
  });
});
