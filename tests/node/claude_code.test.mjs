// The real Claude Code CLI (@anthropic-ai/claude-code, pinned in package.json; its native binary ships in the
// package) against `glint serve` on the embedded tiny model: `claude -p … --output-format json` must finish with
// success, and a second turn (--continue) must read ≥ 90 % of its prompt from glint's prefix cache (Claude Code's
// per-request billing line is dropped from the system prompt: docs/agents.md). Offline: the CLI's nonessential
// traffic, telemetry and autoupdater are off, HOME is a temporary directory, and every run is bounded in time.
// The tiny model writes nonsense: the test is that the protocol works end to end.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';
import { metric, startServer } from './harness.mjs';

const MODEL = 'glint-tiny';
const KEY = 'claude-code-test-key';
const here = dirname(fileURLToPath(import.meta.url));
const claude = join(here, 'node_modules', '.bin', 'claude');
const home = mkdtempSync(join(tmpdir(), 'glint-claude-home-'));
const work = mkdtempSync(join(tmpdir(), 'glint-claude-work-'));
let server;

before(async () => {
  // Claude Code's system prompt and tools are ≈ 18,000 tokens: a long context, few sequences.
  const engineArgs = ['--memory', '1G', '--max-seqs', '2', '--max-model-len', '65536'];
  server = await startServer(['--served-model-name', MODEL, '--api-key', KEY], { engineArgs });
});

after(async () => {
  rmSync(home, { recursive: true, force: true });
  rmSync(work, { recursive: true, force: true });
  if (!server) return;
  const status = await server.stop();
  assert.deepEqual(status, { code: 0, signal: null }, `glint serve did not exit 0 on SIGTERM:\n${server.log()}`);
});

// Runs `claude ARGS` in the work directory; resolves with its parsed JSON result (rejects after `timeoutMs`).
function runClaude(args, timeoutMs = 180_000) {
  const env = {
    ...process.env,
    HOME: home,
    ANTHROPIC_BASE_URL: server.baseURL,
    ANTHROPIC_API_KEY: KEY,
    ANTHROPIC_SMALL_FAST_MODEL: MODEL,
    ANTHROPIC_DEFAULT_HAIKU_MODEL: MODEL,
    // The tiny model writes until it happens to draw its end token (the CLI samples at temperature 1): ≈ 1 in 125
    // tokens, so a turn outlasted the CLI's 4 × 64-token budget in ≈ 1 of 8 runs (3 of 25 on 2026-12-05) and the CLI
    // failed it ("exceeded the 64 output token maximum"). 4 × 1,024 tokens leaves (1 − 1/125)^4096 ≈ 1e-14.
    CLAUDE_CODE_MAX_OUTPUT_TOKENS: '1024',
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    DISABLE_TELEMETRY: '1',
    DISABLE_AUTOUPDATER: '1',
  };
  const child = spawn(claude, [...args, '--output-format', 'json', '--model', MODEL, '--max-turns', '3',
    '--permission-mode', 'dontAsk'], { cwd: work, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => { stdout += d; });
  child.stderr.on('data', (d) => { stderr += d; });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`claude did not finish in ${timeoutMs} ms\n${stderr}\n${server.log().slice(-4000)}`));
    }, timeoutMs);
    child.on('exit', (code) => {
      clearTimeout(timer);
      const line = stdout.trim().split('\n').pop() ?? '';
      try {
        resolve({ code, result: JSON.parse(line), stderr });
      } catch {
        reject(new Error(`claude exited ${code} without a JSON result:\n${stdout}\n${stderr}`));
      }
    });
  });
}

test('claude -p finishes with success, and its second turn reads ≥ 90 % of the prompt from the cache', {
  timeout: 420_000,
}, async () => {
  const first = await runClaude(['-p', 'Say hi in one word.']);
  assert.equal(first.code, 0, `${first.stderr}\n${JSON.stringify(first.result)}`);
  assert.equal(first.result.type, 'result');
  assert.equal(first.result.subtype, 'success', JSON.stringify(first.result));
  assert.equal(first.result.is_error, false);
  assert.ok(first.result.usage.input_tokens + first.result.usage.cache_read_input_tokens > 1000);

  const metrics = async () => (await fetch(`${server.baseURL}/metrics`, {
    headers: { Authorization: `Bearer ${KEY}` },
  })).text();
  const before = await metrics();
  const second = await runClaude(['-p', 'Now say bye.', '--continue']);
  assert.equal(second.code, 0, `${second.stderr}\n${JSON.stringify(second.result)}`);
  assert.equal(second.result.subtype, 'success', JSON.stringify(second.result));
  // The CLI's own figures for the turn, and glint's for the same requests.
  const usage = second.result.usage;
  const prompt = usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens;
  const fraction = usage.cache_read_input_tokens / prompt;
  const after = await metrics();
  const label = '{api="messages"}';
  const cached = metric(after, `glint_api_prompt_tokens_cached_total${label}`) -
    metric(before, `glint_api_prompt_tokens_cached_total${label}`);
  const total = metric(after, `glint_api_prompt_tokens_total${label}`) -
    metric(before, `glint_api_prompt_tokens_total${label}`);
  console.log(`second turn: cache_read_input_tokens ${usage.cache_read_input_tokens} of ${prompt} prompt tokens ` +
    `(${(100 * fraction).toFixed(1)} %); glint /metrics: ${cached} of ${total} cached`);
  assert.ok(fraction >= 0.9, `only ${(100 * fraction).toFixed(1)} % of the second turn came from the cache`);
  assert.ok(cached / total >= 0.9, `glint counted ${cached} of ${total} prompt tokens cached`);
});
