// Debian's chromium (scripts/setup.sh installs it) started headless by puppeteer-core, for the chat page's browser
// test (webui.test.mjs) and its docs screenshot (webui_screenshot.mjs).
import { existsSync } from 'node:fs';
import puppeteer from 'puppeteer-core';

export const CHROMIUM = process.env.GLINT_CHROMIUM ?? '/usr/bin/chromium';

// Throws the fix when there is no browser, so a missing chromium is one clear error.
export function requireChromium() {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`no browser at ${CHROMIUM}: run scripts/setup.sh (it installs Debian's chromium), ` +
      'or set GLINT_CHROMIUM to a Chromium executable');
  }
}

export async function launchBrowser() {
  requireChromium();
  return puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    // Chromium's sandbox cannot start as root (CI containers run as root).
    args: [...(process.getuid?.() === 0 ? ['--no-sandbox'] : []), '--disable-background-networking', '--no-first-run'],
    timeout: 30_000,
  });
}
