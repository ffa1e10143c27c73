// The chat page's Markdown renderer and syntax highlighter (src/server/webui/markdown.js, highlight.js) as plain ES
// modules under node: exact HTML for each construct, and the safety rules (docs/webui.md): text is escaped, the
// only tags and attributes are the renderer's own, links only to http(s), mailto or this site, images never loaded.
// A seeded random mix of hostile fragments checks the same rules on inputs nobody wrote by hand.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { escapeHtml, renderInline, renderMarkdown } from '../../src/server/webui/markdown.js';
import { highlight, languageOf } from '../../src/server/webui/highlight.js';

// Every tag the renderer and highlighter write, with the attributes each may carry.
const ALLOWED = {
  p: [], br: [], hr: [], strong: [], em: [], del: [], code: ['class'], pre: [], blockquote: [],
  h1: [], h2: [], h3: [], h4: [], h5: [], h6: [], ul: [], ol: ['start'], li: [],
  a: ['href', 'target', 'rel'], div: ['class'], span: ['class'], button: ['type', 'class', 'aria-label'],
  table: [], thead: [], tbody: [], tr: [], th: ['class'], td: ['class'],
};

// Fails unless every tag of `html` is allowed, every attribute is quoted and allowed, and every link is safe.
function assertSafe(html, input) {
  const where = `input ${JSON.stringify(input)} → ${html}`;
  for (const [, name, attributes] of html.matchAll(/<\/?([a-zA-Z0-9]+)([^>]*)>/g)) {
    assert.ok(name in ALLOWED, `tag <${name}> in ${where}`);
    const rest = attributes.replace(/\s+([a-z-]+)="([^"<>]*)"/g, (_, attribute, value) => {
      assert.ok(ALLOWED[name].includes(attribute), `attribute ${attribute} on <${name}> in ${where}`);
      if (attribute === 'href') assert.match(value, /^(https?:|mailto:|\/(?![/\\])|#)/i, `link ${value} in ${where}`);
      return '';
    });
    assert.equal(rest.trim(), '', `unexpected attribute text "${rest}" on <${name}> in ${where}`);
  }
  // Whatever is not a tag is text: no raw angle brackets left over.
  const text = html.replace(/<\/?[a-zA-Z0-9]+(\s+[a-z-]+="[^"<>]*")*\s*>/g, '');
  assert.doesNotMatch(text, /[<>]/, `unescaped angle bracket in ${where}`);
}

const md = (text) => renderMarkdown(text);

describe('escaping', () => {
  test('escapeHtml escapes the five HTML specials', () => {
    assert.equal(escapeHtml(`<a href="x" title='y'>&</a>`), '&lt;a href=&quot;x&quot; title=&#39;y&#39;&gt;&amp;&lt;/a&gt;');
  });

  test('HTML in the text stays text', () => {
    assert.equal(md('<script>alert(1)</script>'), '<p>&lt;script&gt;alert(1)&lt;/script&gt;</p>');
    assert.equal(md('<img src=x onerror=alert(1)>'), '<p>&lt;img src=x onerror=alert(1)&gt;</p>');
    assert.equal(md('a & b'), '<p>a &amp; b</p>');
    assert.equal(md('# <b>title</b>'), '<h1>&lt;b&gt;title&lt;/b&gt;</h1>');
    assert.equal(md('- <i>x</i>'), '<ul><li>&lt;i&gt;x&lt;/i&gt;</li></ul>');
  });

  test('a link cannot break out of its attribute', () => {
    assert.equal(md('[x](https://a.b/c" onmouseover="alert(1))'), '<p>[x](https://a.b/c&quot; onmouseover=&quot;alert(1))</p>');
    assert.equal(md("[x](https://a.b/c'onclick='y)"),
      '<p><a href="https://a.b/c&#39;onclick=&#39;y" target="_blank" rel="noopener noreferrer">x</a></p>');
    assert.equal(md('[<img src=x onerror=alert(1)>](https://x.y)'),
      '<p><a href="https://x.y" target="_blank" rel="noopener noreferrer">&lt;img src=x onerror=alert(1)&gt;</a></p>');
  });

  test('links to anything but http(s), mailto and this site stay text', () => {
    for (const url of ['javascript:alert(1)', 'JaVaScRiPt:alert(1)', ' javascript:alert(1)', 'data:text/html,hi',
      'vbscript:x', '//evil.example/a', '/\\evil.example/a', 'file:///etc/passwd', '&#106;avascript:alert(1)']) {
      const html = md(`[x](${url})`);
      assert.doesNotMatch(html, /<a /, `${url} became a link: ${html}`);
      assertSafe(html, url);
    }
    assert.equal(md('[a](/v1/models)'), '<p><a href="/v1/models" target="_blank" rel="noopener noreferrer">a</a></p>');
    assert.equal(md('[a](#top)'), '<p><a href="#top" target="_blank" rel="noopener noreferrer">a</a></p>');
    assert.equal(md('[mail](mailto:a@b.c)'), '<p><a href="mailto:a@b.c" target="_blank" rel="noopener noreferrer">mail</a></p>');
    assert.equal(md('[q](https://x.y?a=1&b=2 "title")'),
      '<p><a href="https://x.y?a=1&amp;b=2" target="_blank" rel="noopener noreferrer">q</a></p>');
    assert.equal(md('<https://a.b/c>'), '<p><a href="https://a.b/c" target="_blank" rel="noopener noreferrer">https://a.b/c</a></p>');
  });

  test('images become links and are never loaded', () => {
    const html = md('![a cat](https://example.com/cat.png)');
    assert.equal(html, '<p><a href="https://example.com/cat.png" target="_blank" rel="noopener noreferrer">image: a cat</a></p>');
    assert.doesNotMatch(html, /<img/);
  });

  test('NUL characters (the renderer\'s placeholder marker) are dropped, not trusted', () => {
    assert.equal(md('a\u0000b'), '<p>ab</p>');
    assert.equal(renderInline('\u00000\u0000 `x`'), '0 <code>x</code>');
  });

  test('seeded random hostile input always renders to safe HTML', () => {
    const pieces = ['<script>', '</script>', '<img src=x onerror=a()>', '"', "'", '&', '`', '```', '```js\n', '\n',
      '[', ']', '(', ')', 'javascript:', 'https://a.b', '//h', '/\\h', '**', '*', '_', '~~', '|', '|---|', '- ',
      '1. ', '> ', '# ', '\\', ' ', 'x', '\u0000', '![', '<https://', '>', '=', 'on', '\n\n', '  \n'];
    let seed = 20;  // a fixed seed: the same inputs on every run
    const random = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
    for (let round = 0; round < 3000; ++round) {
      let input = '';
      const length = 1 + Math.floor(random() * 24);
      for (let i = 0; i < length; ++i) input += pieces[Math.floor(random() * pieces.length)];
      assertSafe(md(input), input);
    }
  });
});

describe('blocks and inline', () => {
  test('paragraphs, line breaks, headings, rules, quotes', () => {
    assert.equal(md('one\ntwo\n\nthree'), '<p>one<br>two</p><p>three</p>');
    assert.equal(md('# H1\n### H3 ###'), '<h1>H1</h1><h3>H3</h3>');
    assert.equal(md('a\n\n---\n\nb'), '<p>a</p><hr><p>b</p>');
    assert.equal(md('> quoted\n> more'), '<blockquote><p>quoted<br>more</p></blockquote>');
  });

  test('emphasis, strike-through and inline code', () => {
    assert.equal(md('**bold** *em* _em_ __bold__ ~~gone~~'),
      '<p><strong>bold</strong> <em>em</em> <em>em</em> <strong>bold</strong> <del>gone</del></p>');
    assert.equal(md('`<b>` and `a*b*c`'), '<p><code>&lt;b&gt;</code> and <code>a*b*c</code></p>');
    assert.equal(md('``a ` b``'), '<p><code>a ` b</code></p>');
    assert.equal(md('snake_case_name stays'), '<p>snake_case_name stays</p>');
  });

  test('lists: unordered, ordered with a start, nested, loose', () => {
    assert.equal(md('- a\n- b'), '<ul><li>a</li><li>b</li></ul>');
    assert.equal(md('1. one\n2. two'), '<ol><li>one</li><li>two</li></ol>');
    assert.equal(md('3. three\n4. four'), '<ol start="3"><li>three</li><li>four</li></ol>');
    assert.equal(md('- a\n  - inner\n- b'), '<ul><li>a<ul><li>inner</li></ul></li><li>b</li></ul>');
    assert.equal(md('* a\n\n* b'), '<ul><li>a</li><li>b</li></ul>');
    assert.equal(md('text\n- item'), '<p>text</p><ul><li>item</li></ul>');
  });

  test('fenced code blocks: language, highlighting, copy button, unclosed while streaming', () => {
    const head = (lang) => `<div class="code-block"><div class="code-head"><span class="code-lang">${lang}</span>` +
      '<button type="button" class="copy-code" aria-label="Copy code">Copy</button></div>';
    assert.equal(md('```js\nconst x = "<a>"; // note\n```'),
      `${head('js')}<pre><code class="language-js"><span class="tok-kw">const</span> x = ` +
      '<span class="tok-str">&quot;&lt;a&gt;&quot;</span>; <span class="tok-com">// note</span></code></pre></div>');
    assert.equal(md('```\n**not bold** <x>\n```'), `${head('text')}<pre><code>**not bold** &lt;x&gt;</code></pre></div>`);
    assert.equal(md('~~~python\nprint(1)'),
      `${head('python')}<pre><code class="language-python"><span class="tok-fn">print</span>(<span class="tok-num">1</span>)</code></pre></div>`);
    assert.equal(md('````\n```\ninner\n```\n````'), `${head('text')}<pre><code>\`\`\`\ninner\n\`\`\`</code></pre></div>`);
    assert.equal(md('```"><script>\nx\n```'), md('```&quot;&gt;&lt;script&gt;\nx\n```').replace(/&amp;/g, '&'));
    assertSafe(md('```"><img src=x onerror=a()>\nx\n```'), 'fence info string');
  });

  test('tables with alignment, escaped pipes and missing cells', () => {
    assert.equal(md('| a | b |\n|:--|--:|\n| 1 | 2 |\n| 3 |'),
      '<div class="table-wrap"><table><thead><tr><th class="align-left">a</th><th class="align-right">b</th></tr>' +
      '</thead><tbody><tr><td class="align-left">1</td><td class="align-right">2</td></tr>' +
      '<tr><td class="align-left">3</td><td class="align-right"></td></tr></tbody></table></div>');
    assert.equal(md('x | y\n:-:|---\na \\| b | c'),
      '<div class="table-wrap"><table><thead><tr><th class="align-center">x</th><th>y</th></tr></thead>' +
      '<tbody><tr><td class="align-center">a | b</td><td>c</td></tr></tbody></table></div>');
    assert.equal(md('a | b\nno separator'), '<p>a | b<br>no separator</p>');
  });
});

describe('highlight', () => {
  test('per language: keywords, types, strings, comments, numbers, calls', () => {
    assert.equal(highlight('int x = 0x1F; // <b>', 'cpp'),
      '<span class="tok-type">int</span> x = <span class="tok-num">0x1F</span>; <span class="tok-com">// &lt;b&gt;</span>');
    assert.equal(highlight('def f(): return None  # done', 'py'),
      '<span class="tok-kw">def</span> <span class="tok-fn">f</span>(): <span class="tok-kw">return</span> ' +
      '<span class="tok-lit">None</span>  <span class="tok-com"># done</span>');
    assert.equal(highlight('echo "a#b" x#y # c', 'sh'),
      '<span class="tok-kw">echo</span> <span class="tok-str">&quot;a#b&quot;</span> x#y <span class="tok-com"># c</span>');
    assert.equal(highlight('"a\\"b" /* c */ 1.5e3', 'c'),
      '<span class="tok-str">&quot;a\\&quot;b&quot;</span> <span class="tok-com">/* c */</span> <span class="tok-num">1.5e3</span>');
    assert.equal(highlight('x1 = 2', 'js'), 'x1 = <span class="tok-num">2</span>');
  });

  test('aliases and unknown languages', () => {
    assert.equal(languageOf('C++'), languageOf('cpp'));
    assert.equal(languageOf('TypeScript'), languageOf('ts'));
    assert.equal(languageOf('brainfuck'), null);
    assert.equal(highlight('<script>alert("x")</script>', 'html'),
      '&lt;script&gt;<span class="tok-fn">alert</span>(<span class="tok-str">&quot;x&quot;</span>)&lt;/script&gt;');
  });

  test('an unterminated string or comment runs to the end (of the line for strings) without hanging', () => {
    assert.equal(highlight('"open\nnext', 'c'), '<span class="tok-str">&quot;open</span>\nnext');
    assert.equal(highlight('/* open', 'c'), '<span class="tok-com">/* open</span>');
    assert.equal(highlight('`a\nb', 'js'), '<span class="tok-str">`a\nb</span>');
    assert.equal(highlight('"\\', 'c'), '<span class="tok-str">&quot;\\</span>');
  });

  test('the output is always escaped text inside highlight spans', () => {
    const input = '<img src=x onerror=a()> "</span><script>" /* <b> */ \'&\'';
    for (const lang of ['c', 'cpp', 'js', 'ts', 'python', 'rust', 'go', 'java', 'bash', 'json', 'sql', 'none']) {
      const html = highlight(input, lang);
      assert.equal(html.replace(/<span class="tok-[a-z]+">|<\/span>/g, '').replace(/&lt;|&gt;|&quot;|&#39;|&amp;/g, (e) =>
        ({ '&lt;': '<', '&gt;': '>', '&quot;': '"', '&#39;': "'", '&amp;': '&' })[e]), input, lang);
    }
  });
});
