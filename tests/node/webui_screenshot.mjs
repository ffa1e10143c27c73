// Takes the chat page's screenshot for docs/server.md: the real glint serve on the default tiny model, one greedy
// answer, the page at 1000×620. Not a test (ctest runs only *.test.mjs); run it after changing the page's look:
//   GLINT_BINARY=build/ci/src/cli/glint node tests/node/webui_screenshot.mjs docs/images/webui-chat.png
import { launchBrowser } from './browser.mjs';
import { startServer } from './harness.mjs';

const output = process.argv[2];
if (!output) throw new Error('usage: node tests/node/webui_screenshot.mjs OUTPUT.png');

const server = await startServer([], { timeoutMs: 30_000 });
const browser = await launchBrowser();
try {
  const page = await browser.newPage();
  page.setDefaultTimeout(20_000);
  await page.setViewport({ width: 1000, height: 620 });
  await page.goto(`${server.baseURL}/`, { waitUntil: 'load' });
  // Greedy and short, so the picture is the same on every run.
  await page.evaluate(() => localStorage.setItem('glint.webui.settings', JSON.stringify({
    temperature: '0', maxTokens: '48', thinking: false,
  })));
  await page.reload({ waitUntil: 'load' });
  await page.waitForFunction(() => document.getElementById('model-name').textContent.includes('glint-tiny'));
  await page.type('#prompt', 'Tell me a short story.');
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => !document.getElementById('send').hidden &&
    document.querySelector('article.message.assistant .stats')?.textContent.includes('tokens'));
  await page.type('#prompt', 'And another one?');
  await page.evaluate(() => document.activeElement.blur());
  await page.screenshot({ path: output });
  console.log(`wrote ${output}`);
} finally {
  await browser.close();
  await server.stop(10_000);
}
