// Batch jobs through the official `openai` npm client (pinned in package.json) against glint serve: files.create
// with a JSONL input, batches.create, polling batches.retrieve until the batch ends, files.content of the output
// and error files, batches.list, cancellation, files.list and files.delete. The tiny model writes nonsense: these
// check the protocol and the line formats, not the words.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import OpenAI, { toFile } from 'openai';
import { startServer } from './harness.mjs';

const MODEL = 'glint-tiny';
const batchDir = mkdtempSync(join(tmpdir(), 'glint-batches-'));
let server;
let client;

before(async () => {
  server = await startServer(['--served-model-name', MODEL, '--batch-dir', batchDir, '--batch-concurrency', '1']);
  client = new OpenAI({ baseURL: `${server.baseURL}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });
});

after(async () => {
  rmSync(batchDir, { recursive: true, force: true });
  if (!server) return;
  const status = await server.stop();
  assert.deepEqual(status, { code: 0, signal: null }, `glint serve did not exit 0 on SIGTERM:\n${server.log()}`);
});

function jsonl(count, maxTokens, extra = []) {
  const lines = [];
  for (let i = 0; i < count; ++i) {
    lines.push(JSON.stringify({
      custom_id: `req-${i}`, method: 'POST', url: '/v1/chat/completions',
      body: { model: MODEL, messages: [{ role: 'user', content: `Say ${i}` }], max_tokens: maxTokens,
              temperature: 0, ignore_eos: true },
    }));
  }
  return [...lines, ...extra].join('\n') + '\n';
}

async function upload(text) {
  return client.files.create({ file: await toFile(Buffer.from(text), 'input.jsonl'), purpose: 'batch' });
}

// Polls (every 100 ms, 60 s at most) until the batch is in one of `statuses`.
async function waitFor(id, statuses) {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const batch = await client.batches.retrieve(id);
    if (statuses.includes(batch.status)) return batch;
    assert.ok(Date.now() < deadline, `batch ${id} stuck in ${batch.status}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

async function lines(fileId) {
  const response = await client.files.content(fileId);
  return (await response.text()).trim().split('\n').map((line) => JSON.parse(line));
}

test('files.create, batches.create, poll, files.content: output and error lines in OpenAI format', async () => {
  const file = await upload(jsonl(4, 6, ['{"custom_id": "wrong-url", "method": "POST", "url": "/v1/completions", "body": {}}']));
  assert.equal(file.object, 'file');
  assert.equal(file.purpose, 'batch');
  assert.ok(file.id.startsWith('file-'));
  assert.equal((await client.files.retrieve(file.id)).bytes, file.bytes);

  const created = await client.batches.create({
    input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h', metadata: { job: 'test' },
  });
  assert.equal(created.object, 'batch');
  assert.ok(['validating', 'in_progress', 'completed'].includes(created.status));
  assert.deepEqual(created.metadata, { job: 'test' });

  const batch = await waitFor(created.id, ['completed', 'failed']);
  assert.equal(batch.status, 'completed', JSON.stringify(batch));
  assert.deepEqual(batch.request_counts, { total: 5, completed: 4, failed: 1 });
  assert.ok(batch.completed_at >= batch.created_at && batch.in_progress_at >= batch.created_at);

  const output = await lines(batch.output_file_id);
  assert.deepEqual(output.map((line) => line.custom_id).sort(), ['req-0', 'req-1', 'req-2', 'req-3']);
  for (const line of output) {
    assert.ok(line.id.startsWith('batch_req_'));
    assert.equal(line.error, null);
    assert.equal(line.response.status_code, 200);
    assert.equal(line.response.body.object, 'chat.completion');
    assert.equal(line.response.request_id, line.response.body.id);
    assert.equal(line.response.body.usage.completion_tokens, 6);
  }
  const errors = await lines(batch.error_file_id);
  assert.equal(errors.length, 1);
  assert.equal(errors[0].custom_id, 'wrong-url');
  assert.equal(errors[0].response, null);
  assert.equal(errors[0].error.code, 'mismatched_url');

  const listed = await client.batches.list({ limit: 10 });
  assert.ok(listed.data.some((entry) => entry.id === batch.id));
});

test('cancel: a running batch ends cancelled with the results it had', async () => {
  const file = await upload(jsonl(40, 64));
  const created = await client.batches.create({
    input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h',
  });
  await waitFor(created.id, ['in_progress']);
  const cancelling = await client.batches.cancel(created.id);
  assert.ok(['cancelling', 'cancelled'].includes(cancelling.status), cancelling.status);
  const batch = await waitFor(created.id, ['cancelled']);
  assert.ok(batch.cancelled_at >= batch.created_at);
  assert.ok(batch.request_counts.completed < 40, JSON.stringify(batch.request_counts));
  if (batch.output_file_id) {
    const output = await lines(batch.output_file_id);
    assert.equal(new Set(output.map((line) => line.custom_id)).size, output.length);
  }
  // Cancelling again answers the batch as it is.
  assert.equal((await client.batches.cancel(created.id)).status, 'cancelled');
});

test('bad requests: unknown endpoint, unknown file, wrong purpose; files.list and files.delete', async () => {
  const file = await upload(jsonl(1, 2));
  await assert.rejects(
    client.batches.create({ input_file_id: file.id, endpoint: '/v1/embeddings', completion_window: '24h' }),
    (error) => error.status === 400 && /not one a batch can use/.test(error.message));
  await assert.rejects(
    client.batches.create({ input_file_id: 'file-none', endpoint: '/v1/chat/completions', completion_window: '24h' }),
    (error) => error.status === 404);
  await assert.rejects(
    client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '1h' }),
    (error) => error.status === 400 && error.param === 'completion_window');
  await assert.rejects(client.files.create({ file: await toFile(Buffer.from('x'), 'a.txt'), purpose: 'fine-tune' }),
    (error) => error.status === 400 && error.param === 'purpose');
  const files = await client.files.list();
  assert.ok(files.data.some((entry) => entry.id === file.id));
  const deleted = await client.files.delete(file.id);
  assert.deepEqual([deleted.id, deleted.deleted], [file.id, true]);
  await assert.rejects(client.files.retrieve(file.id), (error) => error.status === 404);
});
