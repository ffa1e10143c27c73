// A small syntax highlighter for code blocks in answers (docs/webui.md): one left-to-right scanner that knows, per
// language, the comment markers, string quotes and keywords, and wraps comments, strings, numbers, keywords and
// literals in <span class="tok-…">. Everything it emits is HTML-escaped text inside those spans, so highlighting
// cannot inject markup. Unknown languages get strings, numbers and the common comment markers only.
const ESCAPES = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
const escape = (text) => text.replace(/[&<>"']/g, (c) => ESCAPES[c]);

const words = (text) => new Set(text.split(/\s+/).filter(Boolean));

const C_LIKE = 'if else for while do switch case default break continue return goto sizeof typedef struct union enum ' +
  'static const volatile extern inline register';
const CPP = `${C_LIKE} class public private protected virtual override final template typename namespace using new ` +
  'delete this operator friend explicit constexpr consteval noexcept auto decltype try catch throw co_await ' +
  'co_return co_yield concept requires static_assert mutable';
const C_TYPES = 'void bool char short int long float double signed unsigned size_t int8_t int16_t int32_t int64_t ' +
  'uint8_t uint16_t uint32_t uint64_t std string vector';
const JS = 'var let const function return if else for while do switch case default break continue new delete ' +
  'typeof instanceof in of class extends super this import export from as async await yield try catch finally ' +
  'throw void static get set';

// name → { line: line-comment markers, block: [open, close] or null, quotes, keywords, types, literals }
const LANGUAGES = {
  c: { line: ['//'], block: ['/*', '*/'], quotes: `"'`, keywords: words(C_LIKE), types: words(C_TYPES),
    literals: words('NULL true false') },
  cpp: { line: ['//'], block: ['/*', '*/'], quotes: `"'`, keywords: words(CPP), types: words(C_TYPES),
    literals: words('nullptr true false NULL') },
  js: { line: ['//'], block: ['/*', '*/'], quotes: '"\'`', keywords: words(JS), types: words(''),
    literals: words('true false null undefined NaN Infinity') },
  ts: { line: ['//'], block: ['/*', '*/'], quotes: '"\'`', keywords: words(`${JS} interface type enum implements ` +
    'declare readonly namespace abstract public private protected keyof'), types: words('string number boolean any unknown never'),
  literals: words('true false null undefined') },
  python: { line: ['#'], block: null, quotes: `"'`, keywords: words('def class return if elif else for while in ' +
    'not and or is import from as with try except finally raise pass break continue lambda yield global nonlocal ' +
    'assert del async await match case'), types: words('int float str bool list dict tuple set bytes object'),
  literals: words('True False None self') },
  rust: { line: ['//'], block: ['/*', '*/'], quotes: '"', keywords: words('fn let mut const static if else match ' +
    'for while loop in return break continue struct enum impl trait pub use mod crate super self Self where as ' +
    'move ref async await dyn unsafe type'), types: words('i8 i16 i32 i64 u8 u16 u32 u64 usize isize f32 f64 bool ' +
    'char str String Vec Option Result Box'), literals: words('true false None Some Ok Err') },
  go: { line: ['//'], block: ['/*', '*/'], quotes: '"\'`', keywords: words('func var const type struct interface ' +
    'map chan package import return if else for range switch case default break continue go defer select ' +
    'fallthrough goto'), types: words('int int8 int16 int32 int64 uint uint8 uint16 uint32 uint64 float32 float64 ' +
    'string bool byte rune error any'), literals: words('true false nil iota') },
  java: { line: ['//'], block: ['/*', '*/'], quotes: `"'`, keywords: words('class interface enum extends implements ' +
    'public private protected static final abstract new return if else for while do switch case default break ' +
    'continue try catch finally throw throws import package this super void synchronized var record'),
  types: words('int long short byte char boolean float double String Object'), literals: words('true false null') },
  bash: { line: ['#'], block: null, quotes: `"'`, keywords: words('if then else elif fi for while until do done ' +
    'case esac in function return local export readonly set unset source exit echo cd'), types: words(''),
  literals: words('true false') },
  json: { line: [], block: null, quotes: '"', keywords: words(''), types: words(''),
    literals: words('true false null') },
  sql: { line: ['--'], block: ['/*', '*/'], quotes: `'"`, keywords: words('select from where insert into values ' +
    'update set delete create table drop alter index join left right inner outer on group by order having limit ' +
    'as and or not null is in distinct union all primary key references default SELECT FROM WHERE INSERT INTO ' +
    'VALUES UPDATE SET DELETE CREATE TABLE DROP ALTER INDEX JOIN LEFT RIGHT INNER OUTER ON GROUP BY ORDER HAVING ' +
    'LIMIT AS AND OR NOT NULL IS IN DISTINCT UNION ALL PRIMARY KEY REFERENCES DEFAULT'), types: words('int integer ' +
    'text varchar real boolean INT INTEGER TEXT VARCHAR REAL BOOLEAN'), literals: words('true false TRUE FALSE') },
};
const ALIASES = { 'c++': 'cpp', cc: 'cpp', h: 'cpp', hpp: 'cpp', cxx: 'cpp', javascript: 'js', mjs: 'js', jsx: 'js',
  typescript: 'ts', tsx: 'ts', py: 'python', python3: 'python', rs: 'rust', golang: 'go', sh: 'bash',
  shell: 'bash', zsh: 'bash', console: 'bash' };
const GENERIC = { line: ['//', '#'], block: ['/*', '*/'], quotes: `"'`, keywords: words(''), types: words(''),
  literals: words('') };

export function languageOf(name) {
  const key = String(name || '').toLowerCase();
  return LANGUAGES[ALIASES[key] ?? key] ?? null;
}

const span = (kind, text) => `<span class="tok-${kind}">${escape(text)}</span>`;

// The end of a string starting at `start` with quote `q` (backslash escapes; a line ends all but backtick strings).
function stringEnd(code, start, q) {
  let i = start + 1;
  while (i < code.length) {
    const c = code[i];
    if (c === '\\') i += 2;
    else if (c === q) return i + 1;
    else if (c === '\n' && q !== '`') return i;
    else ++i;
  }
  return code.length;
}

// Highlighted HTML of `code` in language `name` (any string; unknown → generic rules).
export function highlight(code, name) {
  const lang = languageOf(name) ?? GENERIC;
  const text = String(code);
  let out = '';
  let plain = '';
  const flush = () => {
    out += escape(plain);
    plain = '';
  };
  const emit = (kind, piece) => {
    flush();
    out += span(kind, piece);
  };
  const rest = (marker, at) => text.startsWith(marker, at);
  let i = 0;
  while (i < text.length) {
    const lineMarker = lang.line.find((marker) => rest(marker, i));
    if (lineMarker && (lineMarker !== '#' || i === 0 || /\s/.test(text[i - 1]))) {
      const end = text.indexOf('\n', i);
      const stop = end < 0 ? text.length : end;
      emit('com', text.slice(i, stop));
      i = stop;
      continue;
    }
    if (lang.block && rest(lang.block[0], i)) {
      const end = text.indexOf(lang.block[1], i + lang.block[0].length);
      const stop = end < 0 ? text.length : end + lang.block[1].length;
      emit('com', text.slice(i, stop));
      i = stop;
      continue;
    }
    const c = text[i];
    if (lang.quotes.includes(c)) {
      const stop = stringEnd(text, i, c);
      emit('str', text.slice(i, stop));
      i = stop;
      continue;
    }
    const number = /^(0x[\da-fA-F_]+|\d[\d_]*(\.\d+)?([eE][+-]?\d+)?)[a-zA-Z]*/.exec(text.slice(i, i + 64));
    if (number && (i === 0 || !/[\w$]/.test(text[i - 1]))) {
      emit('num', number[0]);
      i += number[0].length;
      continue;
    }
    const word = /^[A-Za-z_$][\w$]*/.exec(text.slice(i, i + 256));
    if (word) {
      const w = word[0];
      if (lang.keywords.has(w)) emit('kw', w);
      else if (lang.types.has(w)) emit('type', w);
      else if (lang.literals.has(w)) emit('lit', w);
      else if (text[i + w.length] === '(') emit('fn', w);
      else plain += w;
      i += w.length;
      continue;
    }
    plain += c;
    ++i;
  }
  flush();
  return out;
}
