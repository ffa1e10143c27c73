// Starts the real `glint serve` (path in $GLINT_BINARY) on a free loopback port with the embedded tiny model, and
// stops it with SIGTERM, checking it exits 0. Every wait is bounded, and a server left running is killed when the
// test process exits.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const binary = process.env.GLINT_BINARY;
if (!binary) throw new Error('set GLINT_BINARY to the glint executable (ctest does)');

// One model cache for the whole test run, so the tiny model is generated once.
const cacheDir = process.env.GLINT_CACHE_DIR ?? mkdtempSync(join(tmpdir(), 'glint-node-cache-'));
const ownCache = !process.env.GLINT_CACHE_DIR;
const running = new Set();
process.on('exit', () => {
  for (const child of running) child.kill('SIGKILL');
  if (ownCache) rmSync(cacheDir, { recursive: true, force: true });
});

export const ENGINE_ARGS = ['--memory', '256M', '--max-seqs', '16', '--max-model-len', '512'];

// `engineArgs` replaces ENGINE_ARGS (a flag may be given only once). Resolves once the server logs its address;
// rejects if it exits first or takes longer than `timeoutMs`.
export async function startServer(extraArgs = [], { env = {}, timeoutMs = 120_000, engineArgs = ENGINE_ARGS } = {}) {
  const child = spawn(binary, ['serve', '--port', '0', '--no-request-log', ...engineArgs, ...extraArgs], {
    env: { ...process.env, GLINT_CACHE_DIR: cacheDir, ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  running.add(child);
  let log = '';
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`glint serve did not start in ${timeoutMs} ms:\n${log}`)), timeoutMs);
    child.stderr.on('data', (data) => {
      log += data.toString();
      const match = log.match(/serving .* on http:\/\/127\.0\.0\.1:(\d+)/);
      if (match) {
        clearTimeout(timer);
        resolve(Number(match[1]));
      }
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`glint serve exited with ${code} before serving:\n${log}`));
    });
  });
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  return {
    port,
    baseURL: `http://127.0.0.1:${port}`,
    log: () => log,
    // SIGTERM, then the exit status (SIGKILL after `timeoutMs`).
    async stop(timeoutMs = 60_000) {
      if (child.exitCode === null) child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
      const status = await exited;
      clearTimeout(timer);
      running.delete(child);
      return status;
    },
  };
}

// The value of an unlabelled Prometheus sample, e.g. metric(text, 'glint_requests_running').
export function metric(text, name) {
  const line = text.split('\n').find((l) => l.startsWith(name + ' '));
  if (!line) throw new Error(`no metric ${name}`);
  return Number(line.split(' ')[1]);
}

// Polls `check` (async → boolean) every 50 ms until true or `timeoutMs` passes; returns the last result.
export async function eventually(check, timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return await check();
}
