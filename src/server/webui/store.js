// What the page keeps in the browser's localStorage (nothing is stored on the server): the conversations, the
// settings, the API key and which conversation is open. Keys are prefixed so other pages of the same origin are
// left alone. A value that does not parse (edited by hand, an older format) is replaced by the default.
const PREFIX = 'glint.webui.';

export const DEFAULT_SETTINGS = Object.freeze({
  systemPrompt: '',
  temperature: '',  // '' = the server's default (the checkpoint's generation_config.json)
  topP: '',
  maxTokens: '',  // '' = up to the context limit
  reasoningEffort: '',  // '', 'low', 'high', 'max'
  thinking: true,  // false sends chat_template_kwargs.enable_thinking = false
  extraJson: '',  // a JSON object merged into every request
});

function read(name, fallback) {
  try {
    const text = localStorage.getItem(PREFIX + name);
    return text === null ? fallback : JSON.parse(text);
  } catch {
    return fallback;
  }
}

// Returns false when the browser refused (storage full or disabled), so the page can say so.
function write(name, value) {
  try {
    localStorage.setItem(PREFIX + name, JSON.stringify(value));
    return true;
  } catch {
    return false;
  }
}

export function loadSettings() {
  const stored = read('settings', {});
  const settings = { ...DEFAULT_SETTINGS };
  for (const key of Object.keys(DEFAULT_SETTINGS)) {
    if (stored && typeof stored[key] === typeof DEFAULT_SETTINGS[key]) settings[key] = stored[key];
  }
  return settings;
}

export const saveSettings = (settings) => write('settings', settings);

export function loadConversations() {
  const stored = read('conversations', []);
  if (!Array.isArray(stored)) return [];
  return stored.filter((c) => c && typeof c.id === 'string' && Array.isArray(c.messages));
}

export const saveConversations = (conversations) => write('conversations', conversations);

export const loadCurrentId = () => read('current', null);
export const saveCurrentId = (id) => write('current', id);

export const loadApiKey = () => read('apiKey', '');
export const saveApiKey = (key) => write('apiKey', key);

export function newConversation() {
  const id = `c${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}`;
  return { id, title: 'New chat', created: Date.now(), updated: Date.now(), messages: [] };
}

// The title a conversation gets from its first message: its first line, at most 60 characters.
export function titleFrom(text) {
  const line = text.trim().split('\n')[0].trim();
  return line.length > 60 ? `${line.slice(0, 57)}…` : line || 'New chat';
}
