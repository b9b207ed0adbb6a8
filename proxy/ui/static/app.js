// breakwater dashboard. Everything it shows comes from the management API
// with the key kept in sessionStorage. Every value reaches the page as
// text (textContent, attribute values set one by one): nothing from the
// gateway is ever parsed as HTML.
'use strict';

const KEY = 'breakwater-management-key';
const POLL_MS = 1500;

// ---------------------------------------------------------------- helpers

// el builds an element: attrs are set as properties or attributes, children
// are nodes or strings (strings become text nodes).
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'text') e.textContent = String(v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function ms(v) {
  if (!v || v <= 0) return '—';
  if (v < 1000) return v + ' ms';
  const s = v / 1000;
  if (s < 60) return s.toFixed(1) + ' s';
  const whole = Math.floor(s);
  const m = Math.floor(whole / 60);
  if (m < 60) return m + ' min ' + (whole % 60) + ' s';
  return Math.floor(m / 60) + ' h ' + (m % 60) + ' min';
}

function badge(text) {
  const t = String(text || '');
  let cls = 'warn';
  if (/^(CLOSED|active|ok|up|true)$/i.test(t)) cls = 'ok';
  else if (/^(OPEN|banned|expired|credits_exhausted|down|degraded|error)$/i.test(t)) cls = 'bad';
  return el('span', { class: 'badge ' + cls }, t);
}

function statusBadge(code) {
  const c = Number(code);
  return el('span', { class: 'badge ' + (c >= 200 && c < 300 ? 'ok' : c >= 500 || c === 0 ? 'bad' : 'warn') }, String(code));
}

function when(t) {
  const d = new Date(t);
  if (isNaN(d)) return String(t || '');
  return el('time', { datetime: t, title: t }, d.toLocaleTimeString(undefined, { hour12: false }) + '.' + String(d.getMilliseconds()).padStart(3, '0'));
}

function latency(v) { return (v || 0) + ' ms'; }

// table renders rows with columns [{h: header, v: row => node|string, cls}].
function table(caption, cols, rows, rowAttrs) {
  const head = el('tr', {}, cols.map(c => el('th', { scope: 'col', class: c.cls }, c.h)));
  const body = rows.map(r => el('tr', rowAttrs ? rowAttrs(r) : {}, cols.map(c => el('td', { class: c.cls }, c.v(r)))));
  const t = el('table', {}, el('caption', { class: 'muted' }, caption), el('thead', {}, head), el('tbody', {}, body));
  if (!rows.length) t.querySelector('tbody').append(el('tr', {}, el('td', { colspan: cols.length, class: 'muted' }, 'none')));
  return el('div', { class: 'tablewrap' }, t);
}

function setStatus(text, kind) {
  const s = document.getElementById('status');
  s.textContent = text || '';
  s.className = 'status' + (kind ? ' ' + kind : '');
}

class APIError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

async function api(method, path, body) {
  const key = sessionStorage.getItem(KEY) || '';
  const opt = { method, headers: {}, cache: 'no-store' };
  if (key) opt.headers['Authorization'] = 'Bearer ' + key;
  if (body !== undefined) {
    opt.headers['Content-Type'] = 'application/json';
    opt.body = JSON.stringify(body);
  }
  const res = await fetch(path, opt);
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (_) { data = null; }
  if (res.status === 401) {
    showLogin(key ? 'The management key was refused.' : '');
    throw new APIError(401, 'unauthorized');
  }
  if (!res.ok) {
    const msg = data && data.error && data.error.message ? data.error.message : (text || res.statusText);
    throw new APIError(res.status, res.status + ': ' + msg);
  }
  return data;
}

// confirmAction asks before an operator action; extra is an optional form
// body (e.g. a setting's value). Resolves true when confirmed.
function confirmAction(title, text, extra) {
  const d = document.getElementById('confirm');
  document.getElementById('confirm-title').textContent = title;
  document.getElementById('confirm-text').textContent = text;
  const box = document.getElementById('confirm-extra');
  box.replaceChildren(...(extra ? [extra] : []));
  d.returnValue = '';
  return new Promise(resolve => {
    d.addEventListener('close', () => resolve(d.returnValue === 'ok'), { once: true });
    d.showModal();
    (extra && extra.querySelector('input,textarea') || document.getElementById('confirm-cancel')).focus();
  });
}

// act runs a confirmed action, reports its answer and refreshes the page.
async function act(title, text, fn, extra) {
  if (!await confirmAction(title, text, extra)) return;
  try {
    const res = await fn();
    setStatus(title + ': done. ' + summarize(res), 'ok');
  } catch (e) {
    setStatus(title + ' failed: ' + e.message, 'err');
  }
  refresh();
}

function summarize(res) {
  if (!res) return '';
  if (res.results) return res.results.map(r => r.connection + ' ' + (r.ok ? 'ok' : 'failed') + (r.status ? ' (' + r.status + ')' : '') + (r.error ? ': ' + r.error : '')).join('; ');
  const parts = [];
  for (const k of ['reset', 'changed', 'removed', 'cleared']) if (k in res) parts.push(k + ': ' + JSON.stringify(res[k]));
  return parts.join(', ');
}

function button(label, onclick, opts) {
  return el('button', Object.assign({ type: 'button', onclick }, opts || {}), label);
}

// ------------------------------------------------------------------ pages

const pages = {};
let state = { page: 'overview', timer: null, busy: false, logFilter: null, logDetail: null, plot: null, preview: '' };

pages.overview = async () => {
  const [h, log] = await Promise.all([
    api('GET', '/api/monitoring/health'),
    // The newest 2000 attempts of the last minute: a bounded read however
    // busy the gateway is; the rates then come from the span they cover.
    api('GET', '/api/request-log?since=-60s&limit=2000').catch(e => ({ error: e.message })),
  ]);
  const out = [el('h1', {}, 'Overview')];
  const provs = Object.entries(h.providers || {});
  const open = provs.filter(([, p]) => p.state !== 'CLOSED').length;
  const cooling = (h.connections || []).filter(c => c.status !== 'active').length;
  const cards = [
    ['Gateway', badge(h.status)],
    ['Store', el('span', {}, badge(h.store && h.store.up ? 'up' : 'down'), ' ', (h.store && h.store.kind) || '')],
    ['Providers not CLOSED', String(open) + ' / ' + provs.length],
    ['Connections not active', String(cooling) + ' / ' + (h.connections || []).length],
    ['Queued', String((h.queues || []).reduce((a, q) => a + q.queued, 0))],
    ['Session pins', String(h.sessionPins || 0)],
  ];
  let byReason = [], byProvider = [], win = 'last 60 s';
  if (log.records) {
    const recs = log.records;
    const ids = new Set(recs.map(r => r.requestId || r.time));
    let span = 60, label = 'last 60 s';
    if (log.truncated && recs.length > 1) {
      span = Math.max((new Date(recs[recs.length - 1].time) - new Date(recs[0].time)) / 1000, 0.001);
      label = 'newest ' + recs.length + ' attempts';
    }
    win = label;
    cards.unshift(['Requests/s (' + label + ')', (ids.size / span).toFixed(2)], ['Attempts/s (' + label + ')', (recs.length / span).toFixed(2)]);
    const reasons = new Map(), served = new Map();
    for (const r of recs) {
      if (r.status >= 200 && r.status < 300 && !r.errorType) served.set(r.provider, (served.get(r.provider) || 0) + 1);
      else {
        const k = r.reason || r.errorType || String(r.status);
        reasons.set(k, (reasons.get(k) || 0) + 1);
      }
    }
    byReason = [...reasons].sort((a, b) => b[1] - a[1]);
    byProvider = [...served].sort((a, b) => b[1] - a[1]);
  }
  out.push(el('div', { class: 'cards' }, cards.map(([k, v]) => el('div', { class: 'card' }, el('div', { class: 'k' }, k), el('div', { class: 'v' }, v)))));
  if (log.error) out.push(el('p', { class: 'muted' }, 'Request log unavailable: ' + log.error));
  out.push(el('h2', {}, 'Breakers'));
  out.push(table('Provider breakers', [
    { h: 'Provider', v: ([id]) => id },
    { h: 'State', v: ([, p]) => badge(p.state) },
    { h: 'Next probe in', v: ([, p]) => ms(p.retryAfterMs) },
  ], provs));
  out.push(el('h2', {}, 'Errors by reason (' + win + ')'));
  out.push(table('Failed attempts by reason', [{ h: 'Reason', v: r => r[0] }, { h: 'Attempts', v: r => String(r[1]), cls: 'num' }], byReason));
  out.push(el('h2', {}, 'Served by provider (' + win + ')'));
  out.push(table('Successful attempts by provider', [{ h: 'Provider', v: r => r[0] }, { h: 'Attempts', v: r => String(r[1]), cls: 'num' }], byProvider));
  return out;
};

pages.providers = async () => {
  const [h, p] = await Promise.all([api('GET', '/api/monitoring/health'), api('GET', '/api/providers')]);
  const rows = (p.providers || []).map(x => Object.assign({}, x, { b: (h.providers || {})[x.id] || {} }));
  return [
    el('h1', {}, 'Providers'),
    el('p', {}, button('Reset every breaker', () => act('Reset every breaker', 'Close every provider breaker now?', () => api('POST', '/api/resilience/reset', {})))),
    table('Providers and their breakers', [
      { h: 'Provider', v: r => r.id },
      { h: 'Type', v: r => r.type + (r.profile ? ' / ' + r.profile : '') },
      { h: 'Breaker', v: r => el('span', { 'data-provider-state': r.id }, badge(r.b.state)) },
      { h: 'Failures', v: r => String(r.b.failureCount || 0), cls: 'num' },
      { h: 'Next probe in', v: r => ms(r.b.retryAfterMs) },
      { h: 'Provider cooldown', v: r => ms(r.b.providerCooldownMs) },
      { h: 'Base URL', v: r => r.baseURL, cls: 'wrap' },
      { h: 'Models', v: r => (r.models || []).join(', ') || 'any', cls: 'wrap' },
      { h: 'Connections', v: r => String((r.connections || []).length), cls: 'num' },
      { h: 'Actions', cls: 'actions', v: r => [
        button('Test', () => act('Test provider ' + r.id, 'Send one test request (GET models) on every connection of ' + r.id + '?', () => api('POST', '/api/providers/' + encodeURIComponent(r.id) + '/test')), { 'aria-label': 'Test provider ' + r.id }),
        button('Reset breaker', () => act('Reset breaker of ' + r.id, 'Close the breaker of ' + r.id + ' now?', () => api('POST', '/api/resilience/reset', { provider: r.id })), { 'aria-label': 'Reset breaker of ' + r.id }),
      ] },
    ], rows),
  ];
};

pages.connections = async () => {
  const h = await api('GET', '/api/monitoring/health');
  const conns = h.connections || [];
  const id = c => c.provider + '/' + c.connection;
  return [
    el('h1', {}, 'Connections'),
    el('p', {}, button('Clear every cooldown', () => act('Clear every cooldown', 'Clear the cooldown of every connection now?', () => api('POST', '/api/resilience/cooldowns', { all: true }))),
      button('Clear every lockout', () => act('Clear every lockout', 'Clear every model lockout now?', () => api('DELETE', '/api/resilience/model-cooldowns', { all: true })))),
    table('Connections', [
      { h: 'Connection', v: id },
      { h: 'Status', v: c => el('span', { 'data-connection-status': id(c) }, badge(c.status)) },
      { h: 'Cooldown left', v: c => ms(c.cooldownRemainingMs) },
      { h: 'Backoff level', v: c => String(c.backoffLevel), cls: 'num' },
      { h: 'Ladders', v: c => {
        const parts = [];
        if (c.authStrikes) parts.push('auth ' + c.authStrikes + ' of ' + c.authStrikesMax + ' → expired');
        if (c.rejectedStrikes) parts.push('rejected ' + c.rejectedStrikes + ' of ' + c.rejectedStrikesMax + ' → banned');
        return parts.length ? parts.join(', ') : '—';
      } },
      { h: 'In flight', v: c => String(c.inFlight), cls: 'num' },
      { h: 'Uses', v: c => String(c.uses), cls: 'num' },
      { h: 'Last error', v: c => c.lastErrorType ? [el('strong', {}, c.lastErrorType), c.errorCode ? ' (' + c.errorCode + ')' : '', c.lastError ? el('div', { class: 'last-error' }, c.lastError) : ''] : '—', cls: 'wrap' },
      { h: 'Lockouts', v: c => (c.lockouts || []).length ? el('ul', {}, c.lockouts.map(l => el('li', {},
        l.model + ': ' + l.reason + ', ' + ms(l.remainingMs) + ' left' + (l.failureCount ? ', ladder step ' + l.failureCount : '') + ' ',
        button('Clear', () => act('Clear lockout', 'Clear the lockout of ' + l.model + ' on ' + id(c) + '?', () => api('DELETE', '/api/resilience/model-cooldowns', { provider: c.provider, connection: c.connection, model: l.model })), { 'aria-label': 'Clear lockout of ' + l.model + ' on ' + id(c) })))) : '—', cls: 'wrap' },
      { h: 'Actions', cls: 'actions', v: c => [
        button('Clear cooldown', () => act('Clear cooldown', 'Clear the cooldown of ' + id(c) + '?', () => api('POST', '/api/resilience/cooldowns', { connectionIds: [id(c)] })), { 'aria-label': 'Clear cooldown of ' + id(c) }),
        button('Reset', () => act('Reset connection', 'Reset ' + id(c) + ' (clears a terminal status, its cooldown and backoff)?', () => api('POST', '/api/resilience/connections/' + encodeURIComponent(c.provider) + '/' + encodeURIComponent(c.connection) + '/reset')), { 'aria-label': 'Reset ' + id(c) }),
      ] },
    ], conns),
  ];
};

function previewBlock(p) {
  const varies = p.orderVaries ? ' (the ' + p.strategy + ' order is drawn per request; shown in configuration order)' : '';
  return [
    el('p', {}, 'Strategy: ', el('strong', {}, p.strategy), varies),
    el('h3', {}, 'Would try, in order'),
    p.candidates.length ? el('ol', { class: 'picks' }, p.candidates.map(c => el('li', {}, c.provider + '/' + c.connection + ' → ' + c.model))) : el('p', { class: 'error' }, 'nothing: every target is excluded' + (p.earliestMs ? '; the first comes back in ' + ms(p.earliestMs) : '')),
    el('h3', {}, 'Excluded'),
    table('Excluded targets and connections', [
      { h: 'Target', v: x => x.provider + (x.connection ? '/' + x.connection : ' (whole provider)') },
      { h: 'Model', v: x => x.model, cls: 'wrap' },
      { h: 'Why', v: x => x.reason + (x.lockReason ? ' (' + x.lockReason + ')' : '') },
      { h: 'Time left', v: x => ms(x.remainingMs) },
    ], p.excluded),
  ];
}

pages.combos = async () => {
  const c = await api('GET', '/api/combos');
  const out = [el('h1', {}, 'Combos'), el('p', { class: 'muted' }, 'What each combo would pick now, and why the rest are left out. Looking changes nothing.')];
  const input = el('input', { id: 'preview-model', type: 'text', value: state.preview, placeholder: 'combo, alias or provider/model' });
  out.push(el('form', { class: 'filters', onsubmit: ev => { ev.preventDefault(); state.preview = input.value.trim(); refresh(); } },
    el('label', { for: 'preview-model' }, 'Preview any model', input), el('button', { type: 'submit' }, 'Preview')));
  if (state.preview) {
    try {
      const p = await api('GET', '/api/routes/preview?model=' + encodeURIComponent(state.preview));
      out.push(el('section', { class: 'panel' }, el('h2', {}, 'Preview: ' + state.preview), previewBlock(p)));
    } catch (e) {
      out.push(el('p', { class: 'error' }, e.message));
    }
  }
  for (const x of c.combos || []) {
    out.push(el('section', { class: 'panel' },
      el('h2', {}, x.id + (x.mode ? ' (' + x.mode + ')' : '')),
      el('p', { class: 'muted' }, 'Targets: ' + x.targets.map(t => t.provider + '/' + t.model + (t.connection ? ' on ' + t.connection : '')).join(', ')),
      previewBlock(x)));
  }
  if (!(c.combos || []).length) out.push(el('p', { class: 'muted' }, 'No combos are configured.'));
  return out;
};

pages.queues = async () => {
  const h = await api('GET', '/api/monitoring/health');
  return [el('h1', {}, 'Queues'), table('Connection slots and queues', [
    { h: 'Connection', v: q => q.provider + (q.connection ? '/' + q.connection : ' (provider)') },
    { h: 'In flight', v: q => String(q.inFlight), cls: 'num' },
    { h: 'Queued', v: q => String(q.queued), cls: 'num' },
  ], h.queues || [])];
};

pages.leases = async () => {
  const l = await api('GET', '/api/leases');
  const left = t => ms(new Date(t).getTime() - Date.now());
  return [el('h1', {}, 'Leases'), table('Active exclusive session leases', [
    { h: 'Connection', v: x => x.provider + '/' + x.connection },
    { h: 'Client key', v: x => x.apiKeyId },
    { h: 'Model', v: x => x.model || '—' },
    { h: 'Generation', v: x => String(x.generation), cls: 'num' },
    { h: 'State', v: x => x.state },
    { h: 'Acquired', v: x => when(x.acquiredAt) },
    { h: 'Expires in', v: x => left(x.expiresAt) },
  ], l.leases || [])];
};

function statusMatches(filter, s) {
  if (!filter) return true;
  if (filter === 'ok') return s >= 200 && s < 300;
  if (filter === 'error') return !(s >= 200 && s < 300);
  if (/^[1-5]xx$/.test(filter)) return Math.floor(s / 100) === Number(filter[0]);
  return String(s) === filter;
}

pages.log = async () => {
  const f = state.logFilter || (state.logFilter = { requestId: '', provider: '', status: '', since: '-1h', until: '' });
  const inputs = {
    requestId: el('input', { id: 'f-request', type: 'text', value: f.requestId, spellcheck: 'false' }),
    provider: el('input', { id: 'f-provider', type: 'text', value: f.provider }),
    status: el('input', { id: 'f-status', type: 'text', value: f.status, placeholder: '429, 5xx, ok, error' }),
    since: el('input', { id: 'f-since', type: 'text', value: f.since, placeholder: '-1h or RFC 3339' }),
    until: el('input', { id: 'f-until', type: 'text', value: f.until, placeholder: 'now' }),
  };
  const form = el('form', { class: 'filters', id: 'log-filters', onsubmit: ev => {
    ev.preventDefault();
    for (const k in inputs) f[k] = inputs[k].value.trim();
    state.logDetail = null;
    refresh();
  } },
  el('label', { for: 'f-request' }, 'Request id', inputs.requestId),
  el('label', { for: 'f-provider' }, 'Provider', inputs.provider),
  el('label', { for: 'f-status' }, 'Status', inputs.status),
  el('label', { for: 'f-since' }, 'Since', inputs.since),
  el('label', { for: 'f-until' }, 'Until', inputs.until),
  el('button', { type: 'submit', id: 'f-apply' }, 'Filter'));
  const q = new URLSearchParams({ limit: '500' });
  if (f.since) q.set('since', f.since);
  if (f.until) q.set('until', f.until);
  if (f.provider) q.set('provider', f.provider);
  if (f.requestId) q.set('requestId', f.requestId);
  const out = [el('h1', {}, 'Request log'), form];
  let recs = [];
  try {
    const res = await api('GET', '/api/request-log?' + q.toString());
    recs = (res.records || []).filter(r => statusMatches(f.status, r.status)).reverse();
    if (res.truncated) out.push(el('p', { class: 'muted' }, 'Only the newest 500 attempts are shown: narrow the window.'));
  } catch (e) {
    if (e.status === 401) throw e;
    out.push(el('p', { class: 'error' }, e.message));
  }
  if (state.logDetail) {
    const d = await api('GET', '/api/request-log?since=-24h&requestId=' + encodeURIComponent(state.logDetail));
    out.push(el('section', { class: 'panel', id: 'log-detail' },
      el('h2', {}, 'Attempts of request ' + state.logDetail),
      button('Close', () => { state.logDetail = null; refresh(); }),
      table('Attempts, oldest first', [
        { h: 'Time', v: r => when(r.time) },
        { h: 'Connection', v: r => r.provider + '/' + r.connection },
        { h: 'Model', v: r => r.model || '', cls: 'wrap' },
        { h: 'Status', v: r => statusBadge(r.status) },
        { h: 'Reason', v: r => r.reason || r.errorType || '' },
        { h: 'Latency', v: r => latency(r.latencyMs), cls: 'num' },
        { h: 'Headers', v: r => r.headers ? el('pre', {}, JSON.stringify(r.headers, null, 1)) : '', cls: 'wrap' },
        { h: 'Error body', v: r => r.errorBody ? el('pre', {}, r.errorBody) : '', cls: 'wrap' },
      ], d.records || [])));
  }
  out.push(table('Attempts, newest first (' + recs.length + ')', [
    { h: 'Time', v: r => when(r.time) },
    { h: 'Request id', v: r => r.requestId ? button(r.requestId, () => { state.logDetail = r.requestId; refresh(); }, { class: 'quiet', 'aria-label': 'Show the attempts of request ' + r.requestId }) : '' },
    { h: 'Connection', v: r => r.provider + '/' + r.connection },
    { h: 'Model', v: r => r.model || '', cls: 'wrap' },
    { h: 'Status', v: r => statusBadge(r.status) },
    { h: 'Reason', v: r => r.reason || r.errorType || '' },
    { h: 'Latency', v: r => latency(r.latencyMs), cls: 'num' },
    { h: 'Error', v: r => r.errorBody ? r.errorBody.slice(0, 200) : '', cls: 'wrap' },
  ], recs, r => ({ 'data-request-id': r.requestId || '' })));
  return out;
};

function flatten(obj, prefix, out) {
  for (const [k, v] of Object.entries(obj || {})) {
    const p = prefix ? prefix + '.' + k : k;
    if (v && typeof v === 'object' && !Array.isArray(v)) flatten(v, p, out);
    else out.push([p, v]);
  }
  return out;
}

function patchFor(path, value) {
  const root = {};
  let cur = root;
  const parts = path.split('.');
  parts.slice(0, -1).forEach(p => { cur = cur[p] = {}; });
  cur[parts[parts.length - 1]] = value;
  return root;
}

pages.settings = async () => {
  const s = await api('GET', '/api/resilience');
  const rows = flatten(s.settings, '', []);
  const src = s.sources || {};
  const edit = ([path, value]) => {
    const ta = el('textarea', { id: 'setting-value', spellcheck: 'false' });
    ta.value = JSON.stringify(value);
    const extra = el('div', {}, el('label', { for: 'setting-value' }, 'New value of ' + path + ' (JSON)'), ta);
    act('Change ' + path, 'Save a new value for ' + path + '? It is kept in the saved layer, over the config file.', () => {
      let v;
      try { v = JSON.parse(ta.value); } catch (e) { throw new Error('the value is not JSON: ' + e.message); }
      return api('PATCH', '/api/resilience', patchFor(path, v));
    }, extra);
  };
  return [el('h1', {}, 'Settings'),
    el('p', { class: 'muted' }, 'Each setting with the layer its value comes from (default, file, environment or saved through the API).'),
    table('Resilience settings', [
      { h: 'Setting', v: r => r[0] },
      { h: 'Value', v: r => JSON.stringify(r[1]), cls: 'wrap' },
      { h: 'Source', v: r => el('span', { 'data-setting-source': r[0] }, src[r[0]] || '') },
      { h: 'Actions', cls: 'actions', v: r => [
        button('Edit', () => edit(r), { 'aria-label': 'Edit ' + r[0] }),
        src[r[0]] === 'saved' ? button('Revert', () => act('Revert ' + r[0], 'Drop the saved value of ' + r[0] + ' so the file or default applies again?', () => api('PATCH', '/api/resilience', patchFor(r[0], null))), { 'aria-label': 'Revert ' + r[0] }) : '',
      ] },
    ], rows)];
};

pages.plots = async () => {
  const file = el('input', { id: 'plot-file', type: 'file', accept: '.svg,.html,image/svg+xml,text/html' });
  file.addEventListener('change', () => {
    const f = file.files[0];
    if (!f) return;
    if (state.plot) URL.revokeObjectURL(state.plot.url);
    const svg = /\.svg$/i.test(f.name);
    // The plot runs nowhere near the page: an SVG is shown as an image (no
    // scripts), an HTML plot in a frame sandboxed without scripts or origin.
    const blob = new Blob([f], { type: svg ? 'image/svg+xml' : 'text/html' });
    state.plot = { name: f.name, url: URL.createObjectURL(blob), svg };
    render(pages.plots);
  });
  const out = [el('h1', {}, 'Scenario plots'),
    el('p', {}, 'Open a plot written by ', el('code', {}, 'breakwater sim -plot out.svg|out.html'), '. It stays in this browser; nothing is uploaded.'),
    el('label', { for: 'plot-file' }, 'Plot file '), file];
  if (state.plot) {
    out.push(el('h2', {}, state.plot.name));
    out.push(el('div', { class: 'plot' }, state.plot.svg
      ? el('img', { src: state.plot.url, alt: 'Scenario plot ' + state.plot.name })
      : el('iframe', { src: state.plot.url, sandbox: '', title: 'Scenario plot ' + state.plot.name })));
  }
  return out;
};
pages.plots.static = true;

// ------------------------------------------------------------------ shell

async function render(page) {
  const nodes = await page();
  const main = document.getElementById('main');
  // A redraw keeps the focused control focused when it is redrawn (a
  // button of the same label in the same place), so live updates do not
  // throw a keyboard user back to the top.
  const focused = document.activeElement && main.contains(document.activeElement) ? document.activeElement : null;
  const label = focused && (focused.getAttribute('aria-label') || focused.id || focused.textContent);
  main.replaceChildren(...nodes);
  if (label) {
    for (const c of main.querySelectorAll('button, input, a, select, textarea')) {
      if ((c.getAttribute('aria-label') || c.id || c.textContent) === label) { c.focus(); break; }
    }
  }
}

// refresh redraws the current page. A live update (force false) leaves the
// page alone while the operator is typing in one of its fields.
async function refresh(force = true) {
  if (sessionStorage.getItem(KEY) === null) return;
  if (state.busy) { if (force) state.again = true; return; }
  const page = pages[state.page];
  if (!page) return;
  const active = document.activeElement;
  if (!force && active && active.closest && active.closest('#main') && active.matches('input:not([type=checkbox]):not([type=file]), textarea, select')) return;
  state.busy = true;
  try {
    await render(page);
    document.getElementById('updated').textContent = 'updated ' + new Date().toLocaleTimeString();
    if (document.getElementById('status').classList.contains('err') && state.failing) setStatus('');
    state.failing = false;
  } catch (e) {
    if (e.status !== 401) { setStatus('Refreshing failed: ' + e.message, 'err'); state.failing = true; }
  } finally {
    state.busy = false;
    if (state.again) { state.again = false; refresh(); }
  }
}

function tick() {
  clearTimeout(state.timer);
  state.timer = setTimeout(async () => {
    const page = pages[state.page];
    if (document.getElementById('live').checked && !document.hidden && page && !page.static && !document.getElementById('confirm').open) await refresh(false);
    tick();
  }, POLL_MS);
}

function route() {
  const name = (location.hash || '#overview').slice(1);
  state.page = pages[name] ? name : 'overview';
  for (const a of document.querySelectorAll('#nav a')) {
    if (a.getAttribute('href') === '#' + state.page) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  setStatus('');
  document.getElementById('main').replaceChildren();
  refresh();
}

function showLogin(msg) {
  sessionStorage.removeItem(KEY);
  document.getElementById('app').hidden = true;
  document.getElementById('login').hidden = false;
  document.getElementById('login-error').textContent = msg || '';
  document.getElementById('login-key').focus();
}

function showApp() {
  document.getElementById('login').hidden = true;
  document.getElementById('app').hidden = false;
  route();
  tick();
}

document.addEventListener('DOMContentLoaded', () => {
  document.getElementById('login-form').addEventListener('submit', async ev => {
    ev.preventDefault();
    const key = document.getElementById('login-key').value;
    sessionStorage.setItem(KEY, key);
    try {
      await api('GET', '/api/resilience');
      document.getElementById('login-key').value = '';
      showApp();
    } catch (e) {
      if (e.status !== 401) document.getElementById('login-error').textContent = e.message;
    }
  });
  document.getElementById('logout').addEventListener('click', () => showLogin(''));
  window.addEventListener('hashchange', route);
  // A stored key, or none at all: a gateway on a loopback address may run
  // without a management key, and then the dashboard opens directly.
  if (sessionStorage.getItem(KEY) === null) sessionStorage.setItem(KEY, '');
  api('GET', '/api/resilience').then(showApp, () => {});
});
