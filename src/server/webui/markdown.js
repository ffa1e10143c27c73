// A small Markdown renderer for model output (docs/webui.md): headings, paragraphs, emphasis, inline code, fenced
// code blocks (highlighted, with a copy button), lists, block quotes, tables, rules and links.
//
// Safety: the input is untrusted (a model can be made to write anything), so every piece of text is HTML-escaped
// before it reaches the output and the only tags in the output are the ones this file writes. Link targets must be
// http(s), mailto, or a same-site path; anything else (javascript:, data:, protocol-relative //host or /\host)
// stays text.
// Images are never loaded (that would be a request leaving the server's origin): they become links.
// Text cut mid-stream renders as far as it goes: an unclosed code fence is a code block to the end.
import { highlight } from './highlight.js';

const ESCAPES = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

export function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => ESCAPES[c]);
}

// --- inline -----------------------------------------------------------------------------------------------------

// Placeholders keep finished HTML (code spans, links) away from later passes. U+0000 cannot appear in the input:
// it is removed first.
const HOLE = '\u0000';

function safeUrl(escapedUrl) {
  if (/^(https?:|mailto:)/i.test(escapedUrl)) return escapedUrl;
  // Not '//host' nor '/\host': browsers read a backslash in an http(s) URL as a slash, so both leave the site.
  if (/^(\/(?![/\\])|#)/.test(escapedUrl)) return escapedUrl;
  return null;
}

function emphasis(html) {
  return html
    .replace(/\*\*(?=\S)([\s\S]*?\S)\*\*/g, '<strong>$1</strong>')
    .replace(/(^|[^\w])__(?=\S)([\s\S]*?\S)__(?!\w)/g, '$1<strong>$2</strong>')
    .replace(/~~(?=\S)([\s\S]*?\S)~~/g, '<del>$1</del>')
    .replace(/(^|[^*\w])\*(?=[^\s*])([^*]*?[^\s*])\*(?![*\w])/g, '$1<em>$2</em>')
    .replace(/(^|[^\w])_(?=[^\s_])([^_]*?[^\s_])_(?!\w)/g, '$1<em>$2</em>');
}

// One line or paragraph of inline Markdown → HTML.
export function renderInline(text) {
  const holes = [];
  const keep = (html) => `${HOLE}${holes.push(html) - 1}${HOLE}`;
  let out = String(text).replace(/\u0000/g, '');
  // Code spans first: nothing inside them is Markdown.
  out = out.replace(/(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/g, (_, ticks, code) => keep(`<code>${escapeHtml(code.trim() || code)}</code>`));
  out = escapeHtml(out);
  // Links and images; the escaped text cannot hold a quote, so the URL cannot leave its attribute.
  out = out.replace(/(!?)\[([^\]\n]*)\]\(\s*([^()\s]+)(?:\s+&quot;[^\n]*?&quot;)?\s*\)/g, (whole, bang, label, url) => {
    const href = safeUrl(url);
    if (href === null) return whole;
    const shown = bang ? `image: ${label || url}` : label || url;
    return keep(`<a href="${href}" target="_blank" rel="noopener noreferrer">${emphasis(shown)}</a>`);
  });
  // Autolinks: an http(s) URL in angle brackets (escaped by now, so &lt;…&gt;).
  out = out.replace(/&lt;(https?:\/\/[^\s&]+)&gt;/g, (_, url) => keep(`<a href="${url}" target="_blank" rel="noopener noreferrer">${url}</a>`));
  out = emphasis(out);
  out = out.replace(/ {2,}\n|\\\n/g, '<br>').replace(/\n/g, '<br>');
  return out.replace(new RegExp(`${HOLE}(\\d+)${HOLE}`, 'g'), (_, i) => holes[Number(i)]);
}

// --- blocks -----------------------------------------------------------------------------------------------------

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)[^`]*$/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;
const QUOTE = /^ {0,3}> ?(.*)$/;
const LIST_ITEM = /^( *)([-*+]|\d{1,9}[.)])\s+(.*)$/;
const TABLE_SEPARATOR = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;

export function codeBlock(code, lang) {
  const language = escapeHtml(lang.toLowerCase());
  return (
    `<div class="code-block"><div class="code-head"><span class="code-lang">${language || 'text'}</span>` +
    `<button type="button" class="copy-code" aria-label="Copy code">Copy</button></div>` +
    `<pre><code${language ? ` class="language-${language}"` : ''}>${highlight(code, lang)}</code></pre></div>`
  );
}

function splitRow(line) {
  let row = line.trim();
  if (row.startsWith('|')) row = row.slice(1);
  if (row.endsWith('|') && !row.endsWith('\\|')) row = row.slice(0, -1);
  return row.split(/(?<!\\)\|/).map((cell) => cell.trim().replace(/\\\|/g, '|'));
}

function table(lines, start) {
  const header = splitRow(lines[start]);
  const aligns = splitRow(lines[start + 1]).map((cell) =>
    cell.startsWith(':') && cell.endsWith(':') ? 'center' : cell.endsWith(':') ? 'right' : cell.startsWith(':') ? 'left' : '');
  // Classes, not style attributes: the page's Content-Security-Policy allows no inline styles.
  const cell = (tag, text, i) => `<${tag}${aligns[i] ? ` class="align-${aligns[i]}"` : ''}>${renderInline(text)}</${tag}>`;
  let html = `<div class="table-wrap"><table><thead><tr>${header.map((t, i) => cell('th', t, i)).join('')}</tr></thead><tbody>`;
  let i = start + 2;
  for (; i < lines.length && lines[i].includes('|') && lines[i].trim() !== ''; ++i) {
    const cells = splitRow(lines[i]);
    html += `<tr>${header.map((_, c) => cell('td', cells[c] ?? '', c)).join('')}</tr>`;
  }
  return { html: `${html}</tbody></table></div>`, next: i };
}

// A list starting at lines[start]: items at its indentation; deeper lines belong to the item above them.
function list(lines, start) {
  const first = LIST_ITEM.exec(lines[start]);
  const indent = first[1].length;
  const ordered = /\d/.test(first[2]);
  const items = [];
  let i = start;
  while (i < lines.length) {
    const match = LIST_ITEM.exec(lines[i]);
    if (match && match[1].length === indent && /\d/.test(match[2]) === ordered) {
      items.push([match[3]]);
      ++i;
      continue;
    }
    const blank = lines[i].trim() === '';
    const deeper = lines[i].length - lines[i].trimStart().length > indent;
    if (blank && i + 1 < lines.length && (LIST_ITEM.test(lines[i + 1]) || /^\s/.test(lines[i + 1]))) {
      const next = LIST_ITEM.exec(lines[i + 1]);
      if (!next || next[1].length >= indent) {
        items[items.length - 1].push('');
        ++i;
        continue;
      }
    }
    if (blank || (!deeper && !match && isBlockStart(lines, i))) break;
    if (!deeper && match) break;  // a list of the other kind, or shallower
    items[items.length - 1].push(lines[i].slice(Math.min(indent + 2, lines[i].length - lines[i].trimStart().length)));
    ++i;
  }
  const startNumber = ordered ? parseInt(first[2], 10) : 1;
  const tag = ordered ? 'ol' : 'ul';
  const body = items.map((item) => {
    const inner = item.length === 1 ? renderInline(item[0]) : renderBlocks(item.join('\n'), { tight: true });
    return `<li>${inner}</li>`;
  });
  return { html: `<${tag}${ordered && startNumber !== 1 ? ` start="${startNumber}"` : ''}>${body.join('')}</${tag}>`, next: i };
}

function isBlockStart(lines, i) {
  const line = lines[i];
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) || LIST_ITEM.test(line) ||
    (line.includes('|') && i + 1 < lines.length && TABLE_SEPARATOR.test(lines[i + 1]) && lines[i + 1].includes('-'));
}

// Markdown text → HTML. `tight` (inside list items) renders paragraphs without <p>, as a tight list does.
export function renderBlocks(text, { tight = false } = {}) {
  const lines = String(text).replace(/\u0000/g, '').replace(/\r\n?/g, '\n').split('\n');
  const out = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (line.trim() === '') {
      ++i;
      continue;
    }
    const fence = FENCE.exec(line);
    if (fence) {
      const marker = fence[1];
      const body = [];
      for (++i; i < lines.length && !new RegExp(`^ {0,3}${marker[0]}{${marker.length},}\\s*$`).test(lines[i]); ++i) {
        body.push(lines[i]);
      }
      ++i;  // the closing fence (or past the end while streaming)
      out.push(codeBlock(body.join('\n'), fence[2]));
      continue;
    }
    const heading = HEADING.exec(line);
    if (heading) {
      const level = heading[1].length;
      out.push(`<h${level}>${renderInline(heading[2])}</h${level}>`);
      ++i;
      continue;
    }
    if (RULE.test(line)) {
      out.push('<hr>');
      ++i;
      continue;
    }
    if (QUOTE.test(line)) {
      const quoted = [];
      for (; i < lines.length && QUOTE.test(lines[i]); ++i) quoted.push(QUOTE.exec(lines[i])[1]);
      out.push(`<blockquote>${renderBlocks(quoted.join('\n'))}</blockquote>`);
      continue;
    }
    if (LIST_ITEM.test(line)) {
      const result = list(lines, i);
      out.push(result.html);
      i = result.next;
      continue;
    }
    if (line.includes('|') && i + 1 < lines.length && TABLE_SEPARATOR.test(lines[i + 1]) && lines[i + 1].includes('-')) {
      const result = table(lines, i);
      out.push(result.html);
      i = result.next;
      continue;
    }
    const paragraph = [line];
    for (++i; i < lines.length && lines[i].trim() !== '' && !isBlockStart(lines, i); ++i) paragraph.push(lines[i]);
    out.push({ paragraph: renderInline(paragraph.join('\n')) });
  }
  const paragraph = (block) => (tight ? block.paragraph : `<p>${block.paragraph}</p>`);
  return out.map((block) => (typeof block === 'object' ? paragraph(block) : block)).join('');
}

export function renderMarkdown(text) {
  return renderBlocks(text);
}
