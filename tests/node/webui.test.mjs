// The chat page of glint serve (src/server/webui/, docs/webui.md) in a real browser: Debian's chromium driven by
// puppeteer-core (pinned in package.json) against the real server on 127.0.0.1 with the default tiny model.
// What a person does: send with Enter, watch the answer stream, stop it (the server's running count drops), reload
// and find the conversation, change settings (seen in the next request body), a context-too-long 400 in plain
// words, keyboard only, a reload mid-answer, a phone-width screen, the API key dialog of a server started with --api-key, then copy,
// regenerate, edit the last message and delete the conversation.
// Throughout: no console errors and no request to any origin but the server's (every request is intercepted).
// Screenshots go to $GLINT_WEBUI_SCREENSHOTS (ctest: build/<preset>/tests/node/webui-screenshots/) for a person to
// look at. The tiny model talks nonsense, so content is checked for shape (it grows, it is kept), not for words;
// temperature 0 keeps it deterministic. Every wait has a timeout and the whole file is bounded by TEST_TIMEOUT_MS.
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import { launchBrowser, requireChromium } from './browser.mjs';
import { eventually, metric, startServer } from './harness.mjs';

const SCREENSHOTS = process.env.GLINT_WEBUI_SCREENSHOTS ?? join(tmpdir(), 'glint-webui-screenshots');
const TEST_TIMEOUT_MS = 60_000;
const WAIT_MS = 10_000;  // any single wait for the page
// A context long enough that a stopped answer is stopped mid-way: 64,000 tokens take the tiny model well over ten
// seconds even on an idle machine (≈ 4,500 tokens/s at the start, slower as the context grows), and the test stops
// it after a few hundred milliseconds. 15,000 tokens (≈ 3 s) were too few on a loaded machine: the page's
// observations before Stop outlasted the answer ("the answer finished before Stop", seen once under ctest -j2).
const MAX_MODEL_LEN = 65536;
const LONG_ANSWER_TOKENS = 64000;
const API_KEY = 'webui-test-key';
const IMAGE_PATH = fileURLToPath(new URL('../data/vision_input/wide/input.png', import.meta.url));  // 300 × 40 PNG
const NOT_AN_IMAGE_PATH = fileURLToPath(new URL('./package.json', import.meta.url));

let server;
let keyServer;
let browser;
const consoleErrors = [];  // console errors and uncaught exceptions of every page
const foreignRequests = [];  // requests to any other origin (refused)
const allowedLoadFailures = new Set();  // statuses a phase provokes on purpose (Chrome logs them as errors)

function chatTitle(text) {
  return text.slice(0, 60);
}

// A page of `context` whose every request is checked: other origins are refused and recorded, chat request
// bodies and headers are kept in `chats` for the settings and key checks.
async function openPage(context, origin, viewport = { width: 1280, height: 800 }) {
  const page = await context.newPage();
  page.setDefaultTimeout(WAIT_MS);
  await page.setViewport(viewport);
  const chats = await watch(page, origin);
  await page.goto(`${origin}/`, { waitUntil: 'load' });
  return { page, chats };
}

// Watches `page`: returns the list its chat requests are recorded in. A test may push {status, body} replies onto
// `chats.scripted`; the next chat request is then answered with one instead of reaching the server.
async function watch(page, origin) {
  const chats = [];
  chats.scripted = [];
  await page.setRequestInterception(true);
  page.on('request', (request) => {
    const url = new URL(request.url());
    if (url.protocol === 'data:') {  // an attached image's thumbnail: never leaves the browser
      request.continue();
      return;
    }
    if (url.origin !== origin) {
      foreignRequests.push(request.url());
      request.abort('accessdenied');
      return;
    }
    if (url.pathname === '/v1/chat/completions') {
      chats.push({ body: JSON.parse(request.postData() ?? 'null'), headers: request.headers() });
      const reply = chats.scripted.shift();
      if (reply) {
        const contentType = reply.status === 200 ? 'text/event-stream' : 'application/json';
        request.respond({ status: reply.status, contentType, body: reply.body });
        return;
      }
    }
    request.continue();
  });
  page.on('console', (message) => {
    if (message.type() !== 'error') return;
    const status = /status of (\d+)/.exec(message.text())?.[1];
    if (message.text().startsWith('Failed to load resource') && allowedLoadFailures.has(Number(status))) return;
    consoleErrors.push(`${message.text()} (${message.location()?.url ?? '?'})`);
  });
  page.on('pageerror', (error) => consoleErrors.push(`uncaught: ${error.message}`));
  return chats;
}

const shot = (page, name) => page.screenshot({ path: join(SCREENSHOTS, `${name}.png`) });

async function metrics(target) {
  const reply = await fetch(`${target.baseURL}/metrics`, { headers: { Authorization: `Bearer ${API_KEY}` } });
  assert.equal(reply.status, 200);
  return reply.text();
}

// The last assistant message's visible text (reasoning and content).
const answerText = (page) => page.$$eval('article.message.assistant .bubble', (b) => b.at(-1)?.innerText ?? '');

// Waits until the page is idle again (Send shown, Stop hidden).
async function waitIdle(page) {
  await page.waitForFunction(() => !document.getElementById('send').hidden && document.getElementById('stop').hidden);
}

// Sets a field the way a person does: click, select all, delete, type.
async function typeInto(page, selector, text) {
  await page.click(selector);
  await page.keyboard.down('Control');
  await page.keyboard.press('a');
  await page.keyboard.up('Control');
  await page.keyboard.press('Backspace');
  if (text) await page.type(selector, text);
}

async function setMaxTokens(page, value) {
  await page.click('#open-settings');
  await page.waitForSelector('#settings-dialog[open]');
  await typeInto(page, '#set-max-tokens', value);
  await page.click('#settings-save');
  await page.waitForFunction(() => !document.getElementById('settings-dialog').open);
}

// Checked before any test is declared, so a missing browser is the one error reported, not ten cancelled tests.
requireChromium();

before(async () => {
  mkdirSync(SCREENSHOTS, { recursive: true });
  const engineArgs = ['--memory', '256M', '--max-seqs', '4', '--max-model-len', String(MAX_MODEL_LEN)];
  [server, keyServer] = await Promise.all([
    startServer([], { engineArgs, timeoutMs: 30_000 }),
    startServer(['--api-key', API_KEY], { engineArgs, timeoutMs: 30_000 }),
  ]);
  browser = await launchBrowser();
}, { timeout: 45_000 });

after(async () => {
  await browser?.close();
  for (const target of [server, keyServer]) {
    if (!target) continue;
    const status = await target.stop(10_000);
    assert.deepEqual(status, { code: 0, signal: null }, `glint serve did not exit 0 on SIGTERM:\n${target.log()}`);
  }
}, { timeout: 30_000 });

describe('chat page in chromium', { timeout: TEST_TIMEOUT_MS }, () => {
  let context;
  let page;
  let chats;
  const question = 'Tell me a long story about a lighthouse keeper.';

  test('the page loads with the model named and nothing in it', async () => {
    context = await browser.createBrowserContext();
    ({ page, chats } = await openPage(context, server.baseURL));
    await page.waitForFunction(() => document.getElementById('model-name').textContent.includes('glint-tiny'));
    const model = await page.$eval('#model-name', (e) => e.textContent);
    assert.match(model, new RegExp(`${MAX_MODEL_LEN}-token context`));
    assert.equal(await page.$$eval('article.message', (a) => a.length), 0);
    assert.equal(await page.evaluate(() => document.activeElement.id), 'prompt');
    await shot(page, '01-empty');
  });

  test('settings are saved and sent with the next request', async () => {
    await page.click('#open-settings');
    await page.waitForSelector('#settings-dialog[open]');
    await typeInto(page, '#set-system', 'You are a patient storyteller.');
    // Bad values keep the dialog open with the reason.
    for (const [field, value, reason] of [['#set-temperature', '5', 'Temperature must be between 0 and 2.'],
      ['#set-max-tokens', '1.5', 'Max tokens must be a whole number of at least 1.'],
      ['#set-extra', '[1]', 'Extra request fields must be a JSON object ({...}).']]) {
      await typeInto(page, field, value);
      await page.click('#settings-save');
      assert.equal(await page.$eval('#settings-error', (e) => (e.hidden ? '' : e.textContent)), reason);
      assert.equal(await page.$eval('#settings-dialog', (e) => e.open), true);
      await typeInto(page, field, '');
    }
    await typeInto(page, '#set-temperature', '0');
    await typeInto(page, '#set-max-tokens', String(LONG_ANSWER_TOKENS));
    // ignore_eos keeps the tiny model talking, so the answer is still streaming when Stop is pressed.
    await typeInto(page, '#set-extra', '{"ignore_eos": true}');
    await shot(page, '02-settings');
    await page.click('#settings-save');
    await page.waitForFunction(() => !document.getElementById('settings-dialog').open);
  });

  test('Enter sends, the answer streams in, Stop cancels it on the server', async () => {
    const before = await metrics(server);
    const aborted = (text) => metric(text, 'glint_request_success_total{finish_reason="abort"}');
    await page.type('#prompt', question);
    await page.keyboard.press('Enter');
    await page.waitForSelector('article.message.assistant .bubble.streaming');

    const body = (await eventually(() => chats.length === 1, WAIT_MS)) && chats[0].body;
    assert.ok(body, 'no chat request was sent');
    assert.deepEqual(body.messages, [
      { role: 'system', content: 'You are a patient storyteller.' }, { role: 'user', content: question },
    ]);
    assert.equal(body.temperature, 0);
    assert.equal(body.max_tokens, LONG_ANSWER_TOKENS);
    assert.equal(body.ignore_eos, true);
    assert.equal(body.stream, true);
    assert.ok(!('top_p' in body), 'an empty top-p field must leave the server default');

    // The text grows over several observations while the request runs on the server.
    const lengths = [];
    const grew = await eventually(async () => {
      const length = (await answerText(page)).length;
      if (length > (lengths.at(-1) ?? 0)) lengths.push(length);
      return lengths.length >= 4;
    }, WAIT_MS);
    assert.ok(grew, `the answer did not grow over 4 observations: lengths ${lengths}`);
    // The speed appears once the deltas span 250 ms (chat.js MIN_RATE_SPAN_MS).
    const statsOf = () => page.$$eval('article.message.assistant .stats', (s) => s.at(-1).textContent);
    assert.ok(await eventually(async () => /tokens\/s/.test(await statsOf()), WAIT_MS), 'no tokens/s while streaming');
    assert.equal(metric(await metrics(server), 'glint_requests_running'), 1, 'the answer finished before Stop');
    await shot(page, '03-streaming');

    await page.click('#stop');
    assert.ok(await eventually(async () => metric(await metrics(server), 'glint_requests_running') === 0, WAIT_MS),
      'Stop did not cancel the request on the server');
    assert.equal(aborted(await metrics(server)), aborted(before) + 1);
    await waitIdle(page);
    const stats = await statsOf();
    assert.match(stats, /stopped/);
    assert.match(stats, /first token [\d.]+ s/);
    assert.match(stats, /tokens\/s/);
    assert.equal(await page.$$eval('article.message.assistant .bubble.streaming', (b) => b.length), 0);
    await shot(page, '04-stopped');
  });

  test('after a reload the conversation is in the list with its messages, and the settings are kept', async () => {
    const stopped = await answerText(page);
    assert.ok(stopped.length > 0);
    await page.reload({ waitUntil: 'load' });
    const titles = await page.$$eval('#conversations .open-chat', (b) => b.map((e) => e.textContent));
    assert.deepEqual(titles, [chatTitle(question)]);
    await page.click('#new-chat');
    assert.equal(await page.$$eval('article.message', (a) => a.length), 0);
    await page.click('#conversations .open-chat');
    assert.equal(await page.$eval('#chat-title', (e) => e.textContent), chatTitle(question));
    assert.equal(await page.$eval('article.message.user .bubble', (e) => e.textContent), question);
    assert.equal(await answerText(page), stopped);
    await page.click('#open-settings');
    await page.waitForSelector('#settings-dialog[open]');
    assert.equal(await page.$eval('#set-system', (e) => e.value), 'You are a patient storyteller.');
    assert.equal(await page.$eval('#set-temperature', (e) => e.value), '0');
    assert.equal(await page.$eval('#set-max-tokens', (e) => e.value), String(LONG_ANSWER_TOKENS));
    await page.click('#settings-cancel');
  });

  test('a prompt longer than the context is explained in plain words', async () => {
    allowedLoadFailures.add(400);
    await page.click('#new-chat');
    const longText = 'lighthouse '.repeat(MAX_MODEL_LEN + 500);
    await page.$eval('#prompt', (e, text) => {
      e.value = text;
      e.dispatchEvent(new Event('input'));
    }, longText);
    await page.focus('#prompt');
    await page.keyboard.press('Enter');
    await page.waitForSelector('article.message.assistant .error');
    await waitIdle(page);
    const error = await page.$eval('article.message.assistant .error', (e) => e.textContent);
    assert.match(error, /too long for the model/);
    assert.match(error, new RegExp(`context is ${MAX_MODEL_LEN} tokens`));
    assert.match(error, /Start a new chat/);
    allowedLoadFailures.delete(400);
    await shot(page, '05-too-long');
  });

  test('an image attached: thumbnails, an image_url part, an answer; a wrong file and a 400 in words', async () => {
    await setMaxTokens(page, '8');  // a whole answer, quickly (the settings test asked for LONG_ANSWER_TOKENS)
    await page.click('#new-chat');
    const [chooser] = await Promise.all([page.waitForFileChooser(), page.click('#attach')]);
    await chooser.accept([IMAGE_PATH]);
    await page.waitForSelector('#attachments img');
    await page.type('#prompt', 'What is in this picture?');
    await shot(page, '05b-image-attached');
    const before = chats.length;
    await page.keyboard.press('Enter');
    await page.waitForSelector('article.message.user .bubble img');
    assert.equal(await page.$eval('#attachments', (e) => e.hidden), true, 'the composer keeps the sent image');
    await waitIdle(page);
    const content = chats[before].body.messages.at(-1).content;
    assert.equal(content[0].type, 'image_url');
    assert.match(content[0].image_url.url, /^data:image\/png;base64,iVBOR/);
    assert.deepEqual(content[1], { type: 'text', text: 'What is in this picture?' });
    assert.equal(await page.$('article.message.assistant .error'), null, 'glint-tiny (with its tower) answers');
    assert.ok((await answerText(page)).length > 0);
    await shot(page, '05c-image-answered');
    // Kept with the conversation: the stored message holds the image.
    const stored = await page.evaluate(() => JSON.parse(localStorage.getItem('glint.webui.conversations')));
    assert.equal(stored[0].messages[0].images[0].url, content[0].image_url.url);
    // A file that is not an image is refused in the page, naming it.
    const [again] = await Promise.all([page.waitForFileChooser(), page.click('#attach')]);
    await again.accept([NOT_AN_IMAGE_PATH]);
    await page.waitForFunction(() => document.getElementById('notice').textContent.includes('is not a PNG, JPEG'));
    assert.equal(await page.$('#attachments img'), null);
    // A model without a tower: the server's 400 in plain words (scripted: the default model has a tower).
    allowedLoadFailures.add(400);
    chats.scripted.push({ status: 400, body: JSON.stringify({ error: {
      message: "this server takes no images: the model's config.json has no vision_config", type: 'invalid_request_error',
      param: 'messages[0].content[0]', code: 'image_input_not_supported' } }) });
    const [third] = await Promise.all([page.waitForFileChooser(), page.click('#attach')]);
    await third.accept([IMAGE_PATH]);
    await page.waitForSelector('#attachments img');
    await page.type('#prompt', 'And this one?');
    await page.keyboard.press('Enter');
    await page.waitForSelector('article.message.assistant .error');
    await waitIdle(page);
    const error = await page.$$eval('article.message.assistant .error', (e) => e.at(-1).textContent);
    assert.match(error, /This model cannot look at images/);
    assert.match(error, /has no vision_config/);
    allowedLoadFailures.delete(400);
    await setMaxTokens(page, String(LONG_ANSWER_TOKENS));
  });

  test('keyboard only: Tab to the message box, Enter sends, Esc stops', async () => {
    await page.click('#new-chat');
    await page.evaluate(() => document.activeElement.blur());
    let focused = '';
    for (let tabs = 0; tabs < 40 && focused !== 'prompt'; ++tabs) {
      await page.keyboard.press('Tab');
      focused = await page.evaluate(() => document.activeElement.id);
    }
    assert.equal(focused, 'prompt', 'Tab never reached the message box');
    await page.keyboard.type('Hello by keyboard');
    await page.keyboard.press('Tab');
    assert.equal(await page.evaluate(() => document.activeElement.id), 'send');
    const sent = chats.length;
    await page.keyboard.press('Enter');
    await page.waitForSelector('article.message.assistant .bubble.streaming');
    assert.ok(await eventually(async () => (await answerText(page)).length > 20, WAIT_MS), 'no answer streamed');
    await page.keyboard.press('Escape');
    await waitIdle(page);
    assert.equal(chats.length, sent + 1);
    assert.equal(chats.at(-1).body.messages.at(-1).content, 'Hello by keyboard');
    assert.match(await page.$$eval('article.message.assistant .stats', (s) => s.at(-1).textContent), /stopped/);
    assert.ok(await eventually(async () => metric(await metrics(server), 'glint_requests_running') === 0, WAIT_MS));
  });

  test('a reload mid-answer cancels it on the server and keeps what came, marked interrupted', async () => {
    await page.click('#new-chat');
    await page.type('#prompt', 'Reloaded');
    await page.keyboard.press('Enter');
    await page.waitForSelector('article.message.assistant .bubble.streaming');
    assert.ok(await eventually(async () => (await answerText(page)).length > 20, WAIT_MS), 'no answer streamed');
    await page.reload({ waitUntil: 'load' });
    assert.ok(await eventually(async () => metric(await metrics(server), 'glint_requests_running') === 0, WAIT_MS),
      'the reload did not cancel the request on the server');
    assert.equal(await page.$eval('#chat-title', (e) => e.textContent), 'Reloaded');
    // What came is kept up to the page's last save: at least the answer's first text (saved at once), the rest as
    // far as the save on leaving reached the storage before the reloaded page read it (not certain under load).
    assert.ok((await answerText(page)).length > 0, 'the streamed part was not kept');
    assert.match(await page.$eval('article.message.assistant .stats', (e) => e.textContent), /interrupted \(the page was closed\)$/);
  });

  test('phone width: nothing wider than the screen, conversations in a drawer', async () => {
    await page.setViewport({ width: 390, height: 844, isMobile: true, hasTouch: true });
    const layout = await page.evaluate(() => {
      const box = (id) => document.getElementById(id).getBoundingClientRect().toJSON();
      return {
        scrollWidth: document.documentElement.scrollWidth,
        sidebarVisible: getComputedStyle(document.getElementById('sidebar')).visibility !== 'hidden',
        toggle: box('toggle-sidebar'), prompt: box('prompt'), send: box('send'),
      };
    });
    assert.ok(layout.scrollWidth <= 390, `the page is ${layout.scrollWidth} px wide on a 390 px screen`);
    assert.equal(layout.sidebarVisible, false);
    assert.ok(layout.toggle.width > 0 && layout.toggle.right <= 390, JSON.stringify(layout));
    assert.ok(layout.prompt.width >= 200, `the message box is only ${layout.prompt.width} px wide`);
    assert.ok(layout.send.right <= 390 && layout.send.bottom <= 844);
    await shot(page, '06-phone');
    await page.click('#toggle-sidebar');
    await page.waitForFunction(() => getComputedStyle(document.getElementById('sidebar')).visibility === 'visible');
    assert.ok((await page.$$('#conversations .open-chat')).length >= 2);
    await new Promise((r) => setTimeout(r, 300));  // the drawer's slide-in transition (0.15 s)
    await shot(page, '07-phone-drawer');
    await page.click('#conversations .open-chat');
    await page.waitForFunction(() => getComputedStyle(document.getElementById('sidebar')).visibility === 'hidden');
    assert.equal(await page.$eval('#chat-title', (e) => e.textContent), 'Reloaded');
    await shot(page, '08-phone-chat');
    await page.close();
    await context.close();
  });

  let keyContext;
  let keyPage;
  let keyChats;
  const keyAnswer = () => keyPage.$$eval('article.message.assistant .content', (c) => c.at(-1)?.textContent ?? '');

  test('a server with --api-key: the key is asked for once, then sent and kept', async () => {
    allowedLoadFailures.add(401);
    keyContext = await browser.createBrowserContext();
    await keyContext.overridePermissions(keyServer.baseURL, ['clipboard-read', 'clipboard-sanitized-write']);
    ({ page: keyPage, chats: keyChats } = await openPage(keyContext, keyServer.baseURL));
    await keyPage.waitForSelector('#key-dialog[open]');
    assert.match(await keyPage.$eval('#key-message', (e) => e.textContent), /--api-key/);
    await shot(keyPage, '09-api-key');
    await keyPage.type('#key-input', API_KEY);
    await keyPage.keyboard.press('Enter');
    await keyPage.waitForFunction(() => document.getElementById('model-name').textContent.includes('glint-tiny'));
    assert.equal(await keyPage.$eval('#key-dialog', (e) => e.open), false);
    allowedLoadFailures.delete(401);

    await keyPage.reload({ waitUntil: 'load' });
    await keyPage.waitForFunction(() => document.getElementById('model-name').textContent.includes('glint-tiny'));
    assert.equal(await keyPage.$eval('#key-dialog', (e) => e.open), false, 'the key was asked for again');
    // Short greedy answers without reasoning, so the next test can compare them.
    await keyPage.click('#open-settings');
    await keyPage.waitForSelector('#settings-dialog[open]');
    await typeInto(keyPage, '#set-temperature', '0');
    await typeInto(keyPage, '#set-max-tokens', '16');
    await keyPage.click('#set-thinking');
    await keyPage.click('#settings-save');
    await keyPage.type('#prompt', 'Hi');
    await keyPage.keyboard.press('Enter');
    await waitIdle(keyPage);
    assert.equal(keyChats.length, 1);
    assert.equal(keyChats[0].headers.authorization, `Bearer ${API_KEY}`);
    assert.deepEqual(keyChats[0].body.chat_template_kwargs, { enable_thinking: false });
    assert.equal(await keyPage.$$eval('article.message.assistant .error', (e) => e.length), 0);
    assert.match(await keyPage.$eval('article.message.assistant .stats', (e) => e.textContent), /^first token .* 16 tokens · cut at the token limit$/);
  });

  test('copy, regenerate (greedy: the same answer), edit the last message, delete the conversation', async () => {
    const first = await keyAnswer();
    assert.ok(first.length > 0, 'the greedy answer is empty');
    // Copy gives the answer's Markdown source, as kept in localStorage.
    const source = await keyPage.evaluate(() => JSON.parse(localStorage['glint.webui.conversations'])[0].messages[1].content);
    assert.equal(source.trim(), first.trim());
    await keyPage.click('article.message.assistant button[data-action="copy"]');
    assert.equal(await keyPage.evaluate(() => navigator.clipboard.readText()), source);

    await keyPage.click('button[data-action="regenerate"]');
    await waitIdle(keyPage);
    assert.equal(keyChats.length, 2);
    assert.deepEqual(keyChats[1].body.messages, keyChats[0].body.messages);
    assert.equal(await keyAnswer(), first);
    assert.equal(await keyPage.$$eval('article.message', (a) => a.length), 2);

    await keyPage.click('button[data-action="edit"]');
    await typeInto(keyPage, '.edit-box', 'Hello again');
    await keyPage.keyboard.press('Enter');
    await waitIdle(keyPage);
    assert.equal(keyChats.length, 3);
    assert.deepEqual(keyChats[2].body.messages, [{ role: 'user', content: 'Hello again' }]);
    assert.deepEqual(await keyPage.$$eval('article.message', (a) => a.map((e) => e.className)),
      ['message user', 'message assistant']);
    assert.equal(await keyPage.$eval('article.message.user .bubble', (e) => e.textContent), 'Hello again');
    await shot(keyPage, '10-edited');

    keyPage.once('dialog', (dialog) => dialog.accept());
    await keyPage.click('#conversations .delete-chat');
    await keyPage.waitForFunction(() => document.querySelectorAll('#conversations li').length === 0);
    assert.equal(await keyPage.$$eval('article.message', (a) => a.length), 0);
    await keyPage.reload({ waitUntil: 'load' });
    assert.equal(await keyPage.$$eval('#conversations li', (l) => l.length), 0, 'the deleted conversation came back');
  });

  // What the tiny model cannot write: reasoning, Markdown, code, a tool call, hostile markup; and a 429.
  test('a scripted answer: reasoning folded, code highlighted and copied, tool call shown, markup inert', async () => {
    const chunk = (delta, extra = {}) => `data: ${JSON.stringify({ choices: [{ index: 0, delta, ...extra }] })}\n\n`;
    const content = 'Here:\n\n```cpp\nint main() { return 0; }\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n' +
      '<img src=x onerror="window.pwned=1"> [click](javascript:window.pwned=2) ![pic](http://192.0.2.1/pic.png)';
    keyChats.scripted.push({
      status: 200,
      body: chunk({ role: 'assistant' }) + chunk({ reasoning_content: 'Let me think **hard**.' }) + chunk({ content }) +
        chunk({ tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":' } }] }) +
        chunk({ tool_calls: [{ index: 0, function: { arguments: '"Oslo"}' } }] }) +
        chunk({}, { finish_reason: 'tool_calls' }) +
        `data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: 5, completion_tokens: 30, total_tokens: 35 } })}\n\n` +
        'data: [DONE]\n\n',
    });
    await keyPage.type('#prompt', 'Weather in Oslo?');
    await keyPage.keyboard.press('Enter');
    await waitIdle(keyPage);
    const bubble = 'article.message.assistant .bubble';
    assert.equal(await keyPage.$eval(`${bubble} details.reasoning`, (d) => d.open), false);
    assert.equal(await keyPage.$eval(`${bubble} details.reasoning summary`, (s) => s.textContent), 'Reasoning');
    await keyPage.click(`${bubble} details.reasoning summary`);
    assert.equal(await keyPage.$eval(`${bubble} details.reasoning .md`, (e) => e.innerHTML), '<p>Let me think <strong>hard</strong>.</p>');
    assert.equal(await keyPage.$eval(`${bubble} .code-block code.language-cpp .tok-type`, (e) => e.textContent), 'int');
    assert.equal(await keyPage.$$eval(`${bubble} .content table td`, (t) => t.map((e) => e.textContent).join()), '1,2');
    await keyPage.click(`${bubble} .copy-code`);
    assert.equal(await keyPage.evaluate(() => navigator.clipboard.readText()), 'int main() { return 0; }');
    // The hostile parts stayed text; the image is a link nobody followed.
    assert.equal(await keyPage.$$eval(`${bubble} img`, (i) => i.length), 0);
    assert.deepEqual(await keyPage.$$eval(`${bubble} .content a`, (a) => a.map((e) => [e.textContent, e.getAttribute('href')])),
      [['image: pic', 'http://192.0.2.1/pic.png']]);
    assert.match(await keyPage.$eval(`${bubble} .content`, (e) => e.textContent), /\[click\]\(javascript:window.pwned=2\)/);
    assert.equal(await keyPage.evaluate(() => window.pwned), undefined);
    assert.equal(await keyPage.$eval(`${bubble} .tool-call .tool-name`, (e) => e.textContent), 'Tool call: get_weather');
    assert.equal(await keyPage.$eval(`${bubble} .tool-call code`, (e) => e.textContent), '{\n  "city": "Oslo"\n}');
    assert.match(await keyPage.$eval('article.message.assistant .stats', (e) => e.textContent), /30 tokens$/);
    await shot(keyPage, '11-scripted-answer');
    await keyPage.emulateMediaFeatures([{ name: 'prefers-color-scheme', value: 'dark' }]);
    await shot(keyPage, '12-scripted-answer-dark');
    await keyPage.emulateMediaFeatures([]);

    allowedLoadFailures.add(429);
    keyChats.scripted.push({
      status: 429,
      body: JSON.stringify({ error: { message: 'the queue is full', type: 'rate_limit_error', param: null, code: 'server_busy' } }),
    });
    await keyPage.click('button[data-action="regenerate"]');
    await waitIdle(keyPage);
    assert.match(await keyPage.$eval('article.message.assistant .error', (e) => e.textContent),
      /^The server is busy: its queue of requests is full\. Wait a moment and send again\.$/);
    allowedLoadFailures.delete(429);
    await keyContext.close();
  });

  test('no console errors and no request left the server (and the watch would have seen them)', async () => {
    assert.deepEqual(consoleErrors, []);
    assert.deepEqual(foreignRequests, []);
    // The control: a page without the chat page's Content-Security-Policy, watched the same way.
    const control = await browser.newPage();
    await watch(control, server.baseURL);
    await control.evaluate(() => {
      console.error('control error');
      return fetch('http://192.0.2.1/').catch(() => null);  // TEST-NET-1: nothing answers there anyway
    });
    await control.close();
    assert.deepEqual(foreignRequests, ['http://192.0.2.1/']);
    assert.match(consoleErrors[0] ?? '', /^control error /);
  });
});
