// Talking to glint serve (docs/server.md) from the page: the request body built from a conversation and the
// settings, the SSE stream parsed into deltas, per-answer timing, and server errors turned into plain words.
// Only same-origin, relative URLs are used, so the page never talks to another host.

export class ApiError extends Error {
  constructor(status, body) {
    const error = body?.error ?? {};
    super(error.message || `HTTP ${status}`);
    this.status = status;
    this.code = error.code || '';
    this.type = error.type || '';
    this.param = error.param || '';
  }
}

function headers(apiKey) {
  const result = { 'Content-Type': 'application/json' };
  if (apiKey) result.Authorization = `Bearer ${apiKey}`;
  return result;
}

async function errorOf(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    // not JSON (a proxy's page, say): the status is all there is
  }
  return new ApiError(response.status, body);
}

// GET /v1/models → the first model ({id, max_model_len}); throws ApiError (401 when a key is needed).
export async function fetchModel(apiKey) {
  const response = await fetch('/v1/models', { headers: headers(apiKey) });
  if (!response.ok) throw await errorOf(response);
  const body = await response.json();
  return body.data?.[0] ?? null;
}

// The messages the API sees: the system prompt, then each turn (tool calls with their arguments; reasoning is not
// sent back, as the chat template drops past reasoning anyway).
export function apiMessages(conversation, settings) {
  const messages = [];
  if (settings.systemPrompt.trim()) messages.push({ role: 'system', content: settings.systemPrompt });
  for (const message of conversation.messages) {
    if (message.role === 'user') {
      // Images go first, as image_url parts with their data: URLs (docs/server.md "Images"), then the text.
      const content = message.images?.length
        ? [...message.images.map((image) => ({ type: 'image_url', image_url: { url: image.url } })),
          { type: 'text', text: message.content }]
        : message.content;
      messages.push({ role: 'user', content });
    } else if (message.role === 'assistant' && !message.error) {
      const turn = { role: 'assistant', content: message.content ?? '' };
      if (message.toolCalls?.length) {
        turn.tool_calls = message.toolCalls.map((call) => ({
          id: call.id, type: 'function', function: { name: call.name, arguments: call.arguments },
        }));
      }
      messages.push(turn);
    }
  }
  return messages;
}

// The POST /v1/chat/completions body. Empty settings fields mean "the server's default" and are left out; the
// extra JSON fields (settings.extraJson, an object) are merged last, so they can set anything (tools, seed, ...).
export function requestBody(conversation, settings) {
  const body = { messages: apiMessages(conversation, settings), stream: true, stream_options: { include_usage: true } };
  if (settings.temperature !== '') body.temperature = Number(settings.temperature);
  if (settings.topP !== '') body.top_p = Number(settings.topP);
  if (settings.maxTokens !== '') body.max_tokens = Number(settings.maxTokens);
  if (settings.reasoningEffort) body.reasoning_effort = settings.reasoningEffort;
  if (!settings.thinking) body.chat_template_kwargs = { enable_thinking: false };
  const extra = settings.extraJson.trim() ? JSON.parse(settings.extraJson) : {};
  return { ...body, ...extra };
}

// Splits SSE text into complete events; returns [events' data strings, the unfinished tail].
export function splitSse(buffer) {
  const events = [];
  const parts = buffer.replace(/\r\n/g, '\n').split('\n\n');
  const tail = parts.pop();
  for (const part of parts) {
    const data = part.split('\n').filter((line) => line.startsWith('data:')).map((line) => line.slice(5).trimStart());
    if (data.length) events.push(data.join('\n'));
  }
  return [events, tail];
}

// Timing of one answer, from the stream alone: time to first token (request sent → first delta with text or a tool
// call) and decode speed (tokens after the first / time from the first to the last delta). Token counts come from
// the usage chunk; an answer stopped before it has only its delta count, shown as approximate.
// The speed needs the deltas to span MIN_RATE_SPAN_MS: a fast server's short answer arrives in a few network reads,
// dozens of deltas at once, and their spacing then measures the reads, not the decoding (48 tokens of the tiny model
// once showed as 22000 tokens/s).
export const MIN_RATE_SPAN_MS = 250;

export class AnswerTiming {
  constructor(now = performance.now()) {
    this.sent = now;
    this.first = null;
    this.last = null;
    this.deltas = 0;
    this.tokens = null;
  }

  delta(now = performance.now()) {
    if (this.first === null) this.first = now;
    this.last = now;
    ++this.deltas;
  }

  summary() {
    const tokens = this.tokens ?? this.deltas;
    const result = { tokens, exact: this.tokens !== null, ttft: null, tokensPerSecond: null };
    if (this.first !== null) result.ttft = (this.first - this.sent) / 1000;
    if (this.first !== null && this.last - this.first >= MIN_RATE_SPAN_MS && tokens > 1) {
      result.tokensPerSecond = (tokens - 1) / ((this.last - this.first) / 1000);
    }
    return result;
  }
}

// Streams one answer. `on` gets {reasoning}, {content}, {toolCall: {index, id, name, arguments}} (fragments to
// append), {finish}, {usage}. Throws ApiError for an error status or an error event, and the fetch's AbortError
// when `signal` fires.
export async function streamChat(body, { apiKey, signal, on }) {
  const response = await fetch('/v1/chat/completions', {
    method: 'POST', headers: headers(apiKey), body: JSON.stringify(body), signal,
  });
  if (!response.ok) throw await errorOf(response);
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    const [events, tail] = splitSse(buffer);
    buffer = tail;
    for (const data of events) {
      if (data === '[DONE]') return;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new ApiError(500, chunk);
      if (chunk.usage) on({ usage: chunk.usage });
      const choice = chunk.choices?.[0];
      if (!choice) continue;
      const delta = choice.delta ?? {};
      if (delta.reasoning_content) on({ reasoning: delta.reasoning_content });
      if (delta.content) on({ content: delta.content });
      for (const call of delta.tool_calls ?? []) {
        on({ toolCall: { index: call.index, id: call.id, name: call.function?.name, arguments: call.function?.arguments } });
      }
      if (choice.finish_reason) on({ finish: choice.finish_reason });
    }
  }
  throw new ApiError(0, { error: { message: 'the server closed the stream before it was finished' } });
}

// An error → a sentence for a person (what happened, what to do).
export function describeError(error) {
  if (error instanceof ApiError) {
    const detail = error.message;
    if (error.status === 429) return 'The server is busy: its queue of requests is full. Wait a moment and send again.';
    if (error.code === 'context_length_exceeded') {
      return `This conversation is too long for the model: ${detail}. Start a new chat, delete earlier turns, or ` +
        'lower "Max tokens" in Settings.';
    }
    if (error.code === 'image_input_not_supported') {
      return `This model cannot look at images (${detail}). Remove the images and send the text alone.`;
    }
    if (error.status === 401) return 'The server did not accept the API key. Enter the key it was started with.';
    if (error.status === 400) return `The server refused the request: ${detail}${error.param ? ` (field "${error.param}")` : ''}.`;
    if (error.status === 503) return `The server cannot take requests right now (${detail}). Try again shortly.`;
    if (error.status === 0) return `The answer was cut off: ${detail}.`;
    if (error.status >= 500) return `The server failed while answering: ${detail}.`;
    return `The server answered ${error.status}: ${detail}.`;
  }
  if (error instanceof SyntaxError) return `The server sent something that is not JSON (${error.message}).`;
  if (error instanceof TypeError) return 'Cannot reach the server. Is glint serve still running?';
  return `Something went wrong: ${error?.message ?? error}.`;
}

// Images the composer accepts: the types glint serve decodes and its default --max-image-bytes (20 MiB; a server
// started with a lower limit answers 400, shown in words).
export const IMAGE_TYPES = Object.freeze(['image/png', 'image/jpeg', 'image/webp', 'image/gif']);
export const MAX_IMAGE_BYTES = 20 * 1024 * 1024;

// Why a file cannot be attached, or '' when it can.
export function imageProblem(file) {
  if (!IMAGE_TYPES.includes(file.type)) {
    return `"${file.name}" is not a PNG, JPEG, WebP or GIF image (it is ${file.type || 'of an unknown type'}).`;
  }
  if (file.size > MAX_IMAGE_BYTES) {
    return `"${file.name}" is ${(file.size / 1048576).toFixed(1)} MiB; the server takes images up to ` +
      `${MAX_IMAGE_BYTES / 1048576} MiB.`;
  }
  return '';
}
