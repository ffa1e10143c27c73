// The chat page (docs/webui.md): conversations in the sidebar, messages, the composer, settings and the API key
// dialog. State lives in `state` and in localStorage (store.js); the DOM is redrawn from it, message by message
// while an answer streams. Talking to the server is chat.js; Markdown is markdown.js.
import {
  AnswerTiming, ApiError, describeError, fetchModel, imageProblem, requestBody, streamChat,
} from './chat.js';
import { codeBlock, escapeHtml, renderMarkdown } from './markdown.js';
import * as store from './store.js';

const $ = (id) => document.getElementById(id);

const state = {
  conversations: store.loadConversations(),  // most recently used first
  currentId: store.loadCurrentId(),
  settings: store.loadSettings(),
  apiKey: store.loadApiKey(),
  model: null,  // {id, max_model_len} from /v1/models
  busy: null,  // {controller, conversation, message} while an answer streams
  pendingImages: [],  // [{name, url}] attached in the composer, sent with the next message
};

// --- storage --------------------------------------------------------------------------------------------------

function current() {
  let conversation = state.conversations.find((c) => c.id === state.currentId);
  if (!conversation) {
    conversation = store.newConversation();
    state.conversations.unshift(conversation);
    state.currentId = conversation.id;
  }
  return conversation;
}

let leaving = false;  // the page is being closed or reloaded
let lastSave = 0;
function persist({ throttled = false } = {}) {
  if (throttled && performance.now() - lastSave < 1000) return;
  lastSave = performance.now();
  const kept = state.conversations.filter((c) => c.messages.length > 0);
  const ok = store.saveConversations(kept) && store.saveCurrentId(state.currentId);
  if (!ok) {
    // Images are kept as data: URLs and fill localStorage (≈ 5 MB in most browsers) fast: the conversations are
    // kept in the page, and on reload those not stored are gone.
    const images = kept.some((c) => c.messages.some((m) => m.images?.length));
    showNotice('The browser refused to store the conversations (storage full or disabled): they will be lost on ' +
      `reload.${images ? ' Images take much room: delete conversations with images to make space.' : ''}`);
  }
}

// --- notices --------------------------------------------------------------------------------------------------

function showNotice(text) {
  const notice = $('notice');
  notice.textContent = text;
  notice.hidden = !text;
}

// --- sidebar --------------------------------------------------------------------------------------------------

function renderSidebar() {
  const list = $('conversations');
  list.replaceChildren();
  for (const conversation of state.conversations) {
    if (conversation.messages.length === 0) continue;
    const item = document.createElement('li');
    if (conversation.id === state.currentId) item.className = 'current';
    const open = document.createElement('button');
    open.type = 'button';
    open.className = 'open-chat';
    open.textContent = conversation.title;
    open.title = conversation.title;
    if (conversation.id === state.currentId) open.setAttribute('aria-current', 'true');
    open.addEventListener('click', () => switchTo(conversation.id));
    const remove = document.createElement('button');
    remove.type = 'button';
    remove.className = 'delete-chat';
    remove.textContent = '✕';
    remove.setAttribute('aria-label', `Delete conversation "${conversation.title}"`);
    remove.addEventListener('click', () => deleteConversation(conversation.id));
    item.append(open, remove);
    list.append(item);
  }
}

function setSidebarOpen(open) {
  $('app').classList.toggle('sidebar-open', open);
  $('scrim').hidden = !open;
  $('toggle-sidebar').setAttribute('aria-expanded', String(open));
  if (open) $('new-chat').focus();
}

function switchTo(id) {
  state.currentId = id;
  store.saveCurrentId(id);
  setSidebarOpen(false);
  showNotice('');
  render();
  $('prompt').focus();
}

function deleteConversation(id) {
  const conversation = state.conversations.find((c) => c.id === id);
  if (!conversation || !window.confirm(`Delete "${conversation.title}"?`)) return;
  if (state.busy?.conversation === conversation) state.busy.controller.abort();
  state.conversations = state.conversations.filter((c) => c !== conversation);
  if (state.currentId === id) state.currentId = state.conversations[0]?.id ?? null;
  persist();
  render();
}

// --- messages -------------------------------------------------------------------------------------------------

function statsText(message) {
  const parts = [];
  const stats = message.stats;
  if (stats?.ttft != null) parts.push(`first token ${stats.ttft.toFixed(2)} s`);
  if (stats?.tokensPerSecond != null) parts.push(`${stats.tokensPerSecond.toFixed(1)} tokens/s`);
  if (stats?.tokens) parts.push(`${stats.exact ? '' : '≈'}${stats.tokens} tokens`);
  if (message.finish === 'abort') parts.push('stopped');
  if (message.finish === 'length') parts.push('cut at the token limit');
  // Every answer that ends gets a finish reason or an error; one without either was cut off by the page closing.
  if (!message.finish && !message.error && state.busy?.message !== message) parts.push('interrupted (the page was closed)');
  return parts.join(' · ');
}

function toolCallsHtml(calls) {
  return calls.map((call) => {
    let args = call.arguments ?? '';
    try {
      args = JSON.stringify(JSON.parse(args), null, 2);
    } catch {
      // still streaming, or not JSON: shown as written
    }
    return `<div class="tool-call"><div class="tool-name">Tool call: ${escapeHtml(call.name ?? '?')}</div>` +
      `${codeBlock(args, 'json')}</div>`;
  }).join('');
}

function actionButton(label, action, aria) {
  const button = document.createElement('button');
  button.type = 'button';
  button.textContent = label;
  button.dataset.action = action;
  if (aria) button.setAttribute('aria-label', aria);
  return button;
}

function assistantBubble(message, wasOpen) {
  const streaming = state.busy?.message === message;
  let html = '';
  if (message.reasoning) {
    const label = streaming && !message.content ? 'Thinking…' : 'Reasoning';
    html += `<details class="reasoning"${wasOpen ? ' open' : ''}><summary>${label}</summary>` +
      `<div class="md">${renderMarkdown(message.reasoning)}</div></details>`;
  }
  html += `<div class="md content">${renderMarkdown(message.content ?? '')}</div>`;
  if (message.toolCalls?.length) html += toolCallsHtml(message.toolCalls);
  if (message.error) html += `<div class="error" role="alert">${escapeHtml(message.error)}</div>`;
  if (streaming && !message.content && !message.reasoning && !message.toolCalls?.length) {
    html += '<div class="waiting">Waiting for the first token…</div>';
  }
  return html;
}

function messageElement(conversation, index, previous) {
  const message = conversation.messages[index];
  const last = index === conversation.messages.length - 1;
  const lastUser = message.role === 'user' && conversation.messages.slice(index + 1).every((m) => m.role !== 'user');
  const article = document.createElement('article');
  article.className = `message ${message.role}`;
  article.dataset.index = String(index);
  const role = document.createElement('div');
  role.className = 'role';
  role.textContent = message.role === 'user' ? 'You' : state.model?.id ?? 'Assistant';
  const bubble = document.createElement('div');
  bubble.className = 'bubble';
  if (state.busy?.message === message) bubble.classList.add('streaming');
  if (message.role === 'user') {
    bubble.textContent = message.content;
    if (message.images?.length) bubble.prepend(thumbnails(message.images));
  }
  else bubble.innerHTML = assistantBubble(message, previous?.querySelector('details.reasoning')?.open);
  article.append(role, bubble);
  if (message.role === 'assistant') {
    const stats = document.createElement('div');
    stats.className = 'stats';
    stats.textContent = statsText(message);
    article.append(stats);
  }
  const actions = document.createElement('div');
  actions.className = 'actions';
  if (!state.busy) {
    if (message.role === 'assistant' && message.content) actions.append(actionButton('Copy', 'copy', 'Copy the answer'));
    if (message.role === 'assistant' && last) actions.append(actionButton('Regenerate', 'regenerate', 'Regenerate the answer'));
    if (lastUser) actions.append(actionButton('Edit', 'edit', 'Edit your last message'));
  }
  if (actions.childElementCount) article.append(actions);
  return article;
}

// --- images ---------------------------------------------------------------------------------------------------

function thumbnails(images, removable = false) {
  const strip = document.createElement('div');
  strip.className = 'thumbnails';
  images.forEach((image, i) => {
    const figure = document.createElement('figure');
    const img = document.createElement('img');
    img.src = image.url;  // a data: URL (the page's CSP allows data: images only)
    img.alt = image.name;
    img.title = image.name;
    figure.append(img);
    if (removable) {
      const remove = actionButton('×', 'remove-image', `Remove ${image.name}`);
      remove.dataset.image = String(i);
      figure.append(remove);
    }
    strip.append(figure);
  });
  return strip;
}

function renderAttachments() {
  const box = $('attachments');
  box.replaceChildren();
  box.hidden = state.pendingImages.length === 0;
  if (!box.hidden) box.append(thumbnails(state.pendingImages, true));
}

function readAsDataUrl(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

async function attach(files) {
  const problems = [];
  for (const file of files) {
    const problem = imageProblem(file);
    if (problem) {
      problems.push(problem);
      continue;
    }
    try {
      state.pendingImages.push({ name: file.name || 'pasted image', url: await readAsDataUrl(file) });
    } catch (error) {
      problems.push(`"${file.name}" could not be read (${error?.message ?? error}).`);
    }
  }
  showNotice(problems.join(' '));
  renderAttachments();
}

function setUpAttachments() {
  $('attach').addEventListener('click', () => $('attach-input').click());
  $('attach-input').addEventListener('change', (event) => {
    attach([...event.target.files]);
    event.target.value = '';
  });
  $('prompt').addEventListener('paste', (event) => {
    const files = [...(event.clipboardData?.files ?? [])];
    if (files.length === 0) return;  // plain text pastes as usual
    event.preventDefault();
    attach(files);
  });
  const composer = $('composer');
  composer.addEventListener('dragover', (event) => {
    if (event.dataTransfer?.types.includes('Files')) event.preventDefault();
  });
  composer.addEventListener('drop', (event) => {
    const files = [...(event.dataTransfer?.files ?? [])];
    if (files.length === 0) return;
    event.preventDefault();
    attach(files);
  });
  $('attachments').addEventListener('click', (event) => {
    const button = event.target.closest('button[data-image]');
    if (!button) return;
    state.pendingImages.splice(Number(button.dataset.image), 1);
    renderAttachments();
  });
}

function nearBottom(element) {
  return element.scrollHeight - element.scrollTop - element.clientHeight < 80;
}

function render() {
  const conversation = current();
  $('chat-title').textContent = conversation.messages.length ? conversation.title : 'New chat';
  document.title = conversation.messages.length ? `${conversation.title} – glint` : 'glint chat';
  const messages = $('messages');
  const articles = conversation.messages.map((_, i) => messageElement(conversation, i, null));
  $('empty').hidden = articles.length > 0;
  messages.replaceChildren($('empty'), ...articles);
  messages.scrollTop = messages.scrollHeight;
  renderSidebar();
  const busy = Boolean(state.busy);
  $('send').hidden = busy;
  $('stop').hidden = !busy;
}

// Redraws one message (the one streaming), keeping the reasoning block open if the reader opened it. A redraw
// renders the whole answer again, so its cost grows with the answer: the next one waits REDRAW_IDLE_FACTOR times
// the last one's cost, which keeps rendering under a fifth of the page's time and the page responsive (Stop,
// scrolling, typing) however long the answer grows or however busy the machine is.
const REDRAW_IDLE_FACTOR = 4;
let redrawQueued = false;
let redrawCost = 0;  // ms, of the last redraw (rendering, DOM, the layout read by the scroll)
let redrawEnd = 0;
function redrawMessage(conversation, message) {
  if (redrawQueued) return;
  redrawQueued = true;
  const wait = Math.max(0, redrawEnd + REDRAW_IDLE_FACTOR * redrawCost - performance.now());
  setTimeout(() => requestAnimationFrame(() => {
    redrawQueued = false;
    // Once the answer has finished (state.busy cleared), render() has drawn it whole: a redraw queued during the
    // stream that fires after would only swap in an identical element, detaching the one the reader is clicking.
    if (conversation.id !== state.currentId || state.busy?.message !== message) return;
    const start = performance.now();
    const index = conversation.messages.indexOf(message);
    const messages = $('messages');
    const old = messages.querySelector(`article[data-index="${index}"]`);
    if (!old) return render();
    const follow = nearBottom(messages);
    old.replaceWith(messageElement(conversation, index, old));
    if (follow) messages.scrollTop = messages.scrollHeight;
    redrawEnd = performance.now();
    redrawCost = redrawEnd - start;
  }), wait);
}

// --- generating -----------------------------------------------------------------------------------------------

function applyEvent(message, timing, event) {
  if (event.reasoning) message.reasoning += event.reasoning;
  if (event.content) message.content += event.content;
  if (event.toolCall) {
    const { index, id, name, arguments: fragment } = event.toolCall;
    const call = (message.toolCalls[index] ??= { id: '', name: '', arguments: '' });
    if (id) call.id = id;
    if (name) call.name = name;
    if (fragment) call.arguments += fragment;
  }
  if (event.reasoning || event.content || event.toolCall) timing.delta();
  if (event.finish) message.finish = event.finish;
  if (event.usage) timing.tokens = event.usage.completion_tokens;
}

// Streams an answer to the conversation's last user message into a new assistant message.
async function generate(conversation) {
  let body;
  try {
    body = requestBody(conversation, state.settings);
  } catch (error) {
    showNotice(`The extra request fields in Settings are not valid JSON: ${error.message}`);
    return;
  }
  const message = { role: 'assistant', content: '', reasoning: '', toolCalls: [], finish: null, error: null, stats: null };
  conversation.messages.push(message);
  const controller = new AbortController();
  state.busy = { controller, conversation, message };
  showNotice('');
  render();
  const timing = new AnswerTiming();
  for (let attempt = 0; ; ++attempt) {
    try {
      await streamChat(body, {
        apiKey: state.apiKey, signal: controller.signal,
        on: (event) => {
          const empty = !message.content && !message.reasoning;
          applyEvent(message, timing, event);
          message.stats = timing.summary();
          redrawMessage(conversation, message);
          // Saved at most once a second while streaming, but at once when the answer gets its first text, so that
          // a reload always finds the answer begun (what came after the last save is saved on leaving the page,
          // when the browser lets it: see beforeunload below).
          persist({ throttled: !(empty && (message.content || message.reasoning)) });
        },
      });
    } catch (error) {
      if (leaving) {
        // The page is being closed or reloaded, which cut the stream: not the server's fault. The answer is kept
        // as it came, without a finish reason, and shows as interrupted on the next load.
      } else if (error.name === 'AbortError') {
        message.finish = 'abort';
      } else if (error instanceof ApiError && error.status === 401 && attempt === 0 && (await askKey(true))) {
        continue;
      } else {
        message.error = describeError(error);
      }
    }
    break;
  }
  message.stats = timing.summary();
  message.toolCalls = message.toolCalls.filter(Boolean);
  conversation.updated = Date.now();
  state.busy = null;
  persist();
  render();
  $('prompt').focus();
}

function send(text, images = []) {
  if (state.busy || (!text.trim() && images.length === 0)) return;
  const conversation = current();
  if (conversation.messages.length === 0) conversation.title = store.titleFrom(text || images[0].name);
  const message = { role: 'user', content: text };
  if (images.length) message.images = images;
  conversation.messages.push(message);
  // Most recently used first.
  state.conversations = [conversation, ...state.conversations.filter((c) => c !== conversation)];
  generate(conversation);
}

function regenerate() {
  const conversation = current();
  if (state.busy || conversation.messages.at(-1)?.role !== 'assistant') return;
  conversation.messages.pop();
  generate(conversation);
}

// Replaces the last user message's bubble by an editor; sending it drops that message and everything after it.
function editLast(article) {
  const conversation = current();
  const index = Number(article.dataset.index);
  const bubble = article.querySelector('.bubble');
  const editor = document.createElement('textarea');
  editor.className = 'edit-box';
  editor.value = conversation.messages[index].content;
  editor.setAttribute('aria-label', 'Edit your message (Enter sends, Esc cancels)');
  const actions = article.querySelector('.actions');
  const save = actionButton('Send', 'edit-send');
  const cancel = actionButton('Cancel', 'edit-cancel');
  actions.replaceChildren(save, cancel);
  bubble.replaceWith(editor);
  const commit = () => {
    const images = conversation.messages[index].images ?? [];  // the edited message keeps its images
    if (!editor.value.trim() && images.length === 0) return;
    conversation.messages.splice(index);
    send(editor.value, images);
  };
  save.addEventListener('click', commit);
  cancel.addEventListener('click', () => render());
  editor.addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      commit();
    } else if (event.key === 'Escape') {
      event.stopPropagation();
      render();
    }
  });
  editor.focus();
}

async function copyText(text, button) {
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    // No clipboard API (a page served over plain http to another machine is not a secure context).
    const scratch = document.createElement('textarea');
    scratch.value = text;
    document.body.append(scratch);
    scratch.select();
    document.execCommand('copy');
    scratch.remove();
  }
  const label = button.textContent;
  button.textContent = 'Copied';
  setTimeout(() => { button.textContent = label; }, 1200);
}

function onMessagesClick(event) {
  const button = event.target.closest('button');
  if (!button) return;
  const article = button.closest('article');
  if (button.classList.contains('copy-code')) {
    copyText(button.closest('.code-block').querySelector('code').textContent, button);
  } else if (button.dataset.action === 'copy') {
    copyText(current().messages[Number(article.dataset.index)].content, button);
  } else if (button.dataset.action === 'regenerate') {
    regenerate();
  } else if (button.dataset.action === 'edit') {
    editLast(article);
  }
}

// --- settings -------------------------------------------------------------------------------------------------

const SETTINGS_FIELDS = {
  systemPrompt: 'set-system', temperature: 'set-temperature', topP: 'set-top-p', maxTokens: 'set-max-tokens',
  reasoningEffort: 'set-effort', extraJson: 'set-extra',
};

function fillSettings(settings) {
  for (const [key, id] of Object.entries(SETTINGS_FIELDS)) $(id).value = settings[key];
  $('set-thinking').checked = settings.thinking;
  $('settings-error').hidden = true;
}

// The form's values, or a sentence naming what is wrong.
function readSettings() {
  const settings = { thinking: $('set-thinking').checked };
  for (const [key, id] of Object.entries(SETTINGS_FIELDS)) settings[key] = $(id).value.trim();
  settings.systemPrompt = $('set-system').value;
  const number = (text) => (text === '' ? null : Number(text));
  const temperature = number(settings.temperature);
  if (temperature !== null && !(temperature >= 0 && temperature <= 2)) return 'Temperature must be between 0 and 2.';
  const topP = number(settings.topP);
  if (topP !== null && !(topP > 0 && topP <= 1)) return 'Top-p must be above 0 and at most 1.';
  const maxTokens = number(settings.maxTokens);
  if (maxTokens !== null && !(Number.isInteger(maxTokens) && maxTokens >= 1)) return 'Max tokens must be a whole number of at least 1.';
  if (settings.extraJson) {
    let extra;
    try {
      extra = JSON.parse(settings.extraJson);
    } catch (error) {
      return `Extra request fields are not valid JSON: ${error.message}`;
    }
    if (extra === null || typeof extra !== 'object' || Array.isArray(extra)) return 'Extra request fields must be a JSON object ({...}).';
  }
  return settings;
}

function setUpSettings() {
  const dialog = $('settings-dialog');
  $('open-settings').addEventListener('click', () => {
    fillSettings(state.settings);
    setSidebarOpen(false);
    dialog.showModal();
  });
  $('settings-cancel').addEventListener('click', () => dialog.close());
  $('settings-reset').addEventListener('click', () => fillSettings(store.DEFAULT_SETTINGS));
  $('settings-form').addEventListener('submit', (event) => {
    const settings = readSettings();
    if (typeof settings === 'string') {
      event.preventDefault();
      $('settings-error').textContent = settings;
      $('settings-error').hidden = false;
      return;
    }
    state.settings = settings;
    if (!store.saveSettings(settings)) showNotice('The browser refused to store the settings: they last until reload.');
  });
  dialog.addEventListener('close', () => $('prompt').focus());
}

// --- API key --------------------------------------------------------------------------------------------------

let keyRequest = null;  // the promise of the open key dialog: every caller waits for the same answer

// Opens the key dialog; resolves to true when a key was entered, false when the dialog was dismissed.
function askKey(rejected) {
  if (keyRequest) return keyRequest;
  const dialog = $('key-dialog');
  $('key-message').textContent = rejected && state.apiKey
    ? 'The server did not accept the stored API key. Enter the key it was started with (--api-key).'
    : 'This server needs an API key (it was started with --api-key). Enter it once; it is kept in this browser.';
  $('key-input').value = '';
  keyRequest = new Promise((resolve) => {
    const done = (ok) => {
      keyRequest = null;
      resolve(ok);
    };
    dialog.addEventListener('close', () => done(dialog.returnValue === 'key'), { once: true });
  });
  dialog.returnValue = '';
  dialog.showModal();
  return keyRequest;
}

function setUpKeyDialog() {
  $('key-form').addEventListener('submit', (event) => {
    const key = $('key-input').value.trim();
    if (!key) return event.preventDefault();
    state.apiKey = key;
    store.saveApiKey(key);
    $('key-dialog').returnValue = 'key';
  });
}

async function loadModel() {
  for (let attempt = 0; attempt < 3; ++attempt) {
    try {
      state.model = await fetchModel(state.apiKey);
      const length = state.model?.max_model_len;
      $('model-name').textContent = state.model ? `${state.model.id}${length ? ` · ${length}-token context` : ''}` : '';
      render();
      return;
    } catch (error) {
      if (error instanceof ApiError && error.status === 401 && (await askKey(Boolean(state.apiKey)))) continue;
      showNotice(describeError(error));
      return;
    }
  }
}

// --- wiring ---------------------------------------------------------------------------------------------------

function autosize(textarea) {
  textarea.style.height = 'auto';
  textarea.style.height = `${textarea.scrollHeight + 2}px`;
}

function setUp() {
  const prompt = $('prompt');
  $('composer').addEventListener('submit', (event) => {
    event.preventDefault();
    if (state.busy || (!prompt.value.trim() && state.pendingImages.length === 0)) return;
    const text = prompt.value;
    const images = state.pendingImages;
    prompt.value = '';
    state.pendingImages = [];
    renderAttachments();
    autosize(prompt);
    send(text, images);
  });
  prompt.addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      $('composer').requestSubmit();
    }
  });
  prompt.addEventListener('input', () => autosize(prompt));
  $('stop').addEventListener('click', () => state.busy?.controller.abort());
  $('new-chat').addEventListener('click', () => {
    if (current().messages.length === 0) return switchTo(state.currentId);  // already a new chat
    const conversation = store.newConversation();
    state.conversations.unshift(conversation);
    switchTo(conversation.id);
  });
  $('toggle-sidebar').addEventListener('click', () => setSidebarOpen(!$('app').classList.contains('sidebar-open')));
  $('scrim').addEventListener('click', () => setSidebarOpen(false));
  $('messages').addEventListener('click', onMessagesClick);
  document.addEventListener('keydown', (event) => {
    if (event.key !== 'Escape' || document.querySelector('dialog[open]')) return;
    if (state.busy) state.busy.controller.abort();
    else if ($('app').classList.contains('sidebar-open')) setSidebarOpen(false);
  });
  // Saves an answer still streaming (persist is throttled while it streams) when the page is closed or reloaded.
  // beforeunload comes first, before the browser cuts the page's requests (the page never asks to stay). Neither
  // is certain to reach the storage before a reloaded page reads it (under load Chromium was seen to give the new
  // page the last throttled save), so what came in the last second of an answer may be lost on a reload.
  window.addEventListener('beforeunload', () => {
    leaving = true;
    persist();
  });
  window.addEventListener('pagehide', () => {
    leaving = true;
    persist();
  });
  window.addEventListener('pageshow', () => { leaving = false; });  // back from the back/forward cache
  setUpSettings();
  setUpKeyDialog();
  setUpAttachments();
  render();
  prompt.focus();
  loadModel();
}

setUp();
