// Tranche's web dashboard: one page per view, drawn from /api/v1/ with a bearer token
// and redrawn when the event stream says something changed. Plain JavaScript, no
// libraries; every piece of text from the API goes into the page as text (never as
// HTML), so a job's name or a drain reason cannot inject markup.
'use strict';

const TOKEN_KEY = 'tranche.token';
const SVG = 'http://www.w3.org/2000/svg';
const HOUR = 3600000;
const PALETTE = ['#4e79a7', '#59a14f', '#e15759', '#76b7b2', '#edc948', '#b07aa1',
  '#ff9da7', '#9c755f', '#f28e2b', '#86bcb6'];

const app = {
  token: null,
  who: null,
  route: null,      // {page, arg}
  view: null,       // the current page: {load(), dispose()}
  dirty: false,     // an event arrived while a refresh ran
  refreshing: false,
  lastRefresh: 0,
  timer: null,
  shareOrder: [],
};

// ---- small helpers ---------------------------------------------------------------

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'dataset') Object.assign(e.dataset, v);
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

// Replaces a node's children; nested arrays are flattened, absent parts left out.
function fill(node, ...children) {
  node.replaceChildren(...children.flat(2).filter((c) => c !== null && c !== undefined && c !== false));
}

function svg(tag, attrs, ...children) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

function localTime(ms) {
  if (!ms) return '—';
  const d = new Date(ms);
  const today = new Date();
  const sameDay = d.toDateString() === today.toDateString();
  return sameDay
    ? d.toLocaleTimeString([], {hour: '2-digit', minute: '2-digit', second: '2-digit'})
    : d.toLocaleString([], {year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit'});
}

// A span in its two largest units, as the CLI writes it: 45s, 3m 12s, 2h 5m, 1d 3h.
function duration(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  const d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24, m = Math.floor(s / 60) % 60, x = s % 60;
  const two = (a, au, b, bu) => (b ? `${a}${au} ${b}${bu}` : `${a}${au}`);
  if (d) return two(d, 'd', h, 'h');
  if (h) return two(h, 'h', m, 'm');
  if (m) return two(m, 'm', x, 's');
  return `${x}s`;
}

function gpuHours(v) {
  if (v === 0) return '0';
  if (Math.abs(v) >= 100) return v.toFixed(0);
  if (Math.abs(v) >= 1) return v.toFixed(2);
  return v.toFixed(3);
}

function hashOf(s) {
  let h = 0;
  for (const c of s) h = (h * 31 + c.charCodeAt(0)) >>> 0;
  return h;
}

function colorOf(share) {
  const i = app.shareOrder.indexOf(share);
  return PALETTE[(i >= 0 ? i : hashOf(share)) % PALETTE.length];
}

function badge(status) {
  return el('span', {class: `badge st-${status}`}, status);
}

function jobLink(id, text) {
  return el('a', {href: `#/job/${id}`}, text === undefined ? String(id) : text);
}

function table(head, rows, opts) {
  const o = opts || {};
  return el('table', o.attrs || {},
    el('thead', {}, el('tr', {}, head.map((h) => {
      const [text, cls] = Array.isArray(h) ? h : [h, ''];
      return el('th', {class: cls}, text);
    }))),
    el('tbody', {}, rows.length ? rows
      : [el('tr', {}, el('td', {colspan: head.length, class: 'muted'}, o.empty || 'None'))]));
}

function td(content, cls, attrs) {
  return el('td', Object.assign({class: cls || null}, attrs || {}), content);
}

function banner(text) {
  const b = document.getElementById('banner');
  b.textContent = text || '';
  b.hidden = !text;
}

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function api(path, opts) {
  const o = opts || {};
  const headers = {Authorization: `Bearer ${app.token}`};
  let body;
  // Every change is sent as JSON, even without a body: the API refuses other types.
  if (o.json !== undefined || (o.method || 'GET') !== 'GET') {
    headers['Content-Type'] = 'application/json';
  }
  if (o.json !== undefined) {
    body = JSON.stringify(o.json);
  }
  const r = await fetch(`/api/v1/${path}`, {method: o.method || 'GET', headers, body, signal: o.signal});
  if (!r.ok) {
    let message = `${r.status} ${r.statusText}`;
    try {
      const e = await r.json();
      if (e && e.error && e.error.message) message = e.error.message;
    } catch (_) { /* not JSON */ }
    if (r.status === 401) {
      logout(`The token was refused: ${message}`);
    }
    throw new ApiError(r.status, message);
  }
  return r.json();
}

// ---- the token ----------------------------------------------------------------------

// `tranche dev` opens /ui/#token=…: the fragment never reaches the server; it is moved
// to this tab's sessionStorage and removed from the address bar and the history.
function takeToken() {
  const m = /^#token=([^&]*)(?:&(.*))?$/.exec(location.hash);
  if (m) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
    history.replaceState(null, '', `${location.pathname}#/${m[2] || 'shares'}`);
  }
  app.token = sessionStorage.getItem(TOKEN_KEY);
}

function logout(why) {
  sessionStorage.removeItem(TOKEN_KEY);
  app.token = null;
  app.who = null;
  showLogin(why);
}

function showLogin(why) {
  const page = document.getElementById('page');
  const input = el('input', {id: 'token', type: 'password', placeholder: 'Bearer token', autocomplete: 'off'});
  fill(page, el('div', {class: 'card login'},
    el('h1', {}, 'Log in'),
    why ? el('p', {class: 'muted'}, why) : null,
    el('p', {}, 'Paste a bearer token from ', el('code', {}, 'tranche token issue'),
      ' (it stays in this tab only, until the tab is closed or you log out).'),
    el('form', {onsubmit: (e) => {
      e.preventDefault();
      sessionStorage.setItem(TOKEN_KEY, input.value.trim());
      start();
    }}, input, el('button', {class: 'act primary', type: 'submit'}, 'Log in'))));
  document.getElementById('who').textContent = '';
  document.getElementById('logout').hidden = true;
}

function canOperate() {
  return app.who && (app.who.role === 'operator' || app.who.role === 'admin');
}

// ---- the event stream -------------------------------------------------------------

// EventSource cannot send an Authorization header, so the stream is read with fetch
// and parsed here: blocks of `field: value` lines, a blank line between events.
async function followEvents() {
  let after = null;
  for (;;) {
    if (!app.token) return;
    try {
      const q = after === null ? '' : `?after=${after}`;
      app.events = new AbortController();
      const r = await fetch(`/api/v1/events${q}`,
        {headers: {Authorization: `Bearer ${app.token}`}, signal: app.events.signal});
      if (!r.ok) throw new Error(`events: ${r.status}`);
      setLive(true);
      const reader = r.body.getReader();
      const text = new TextDecoder();
      let buf = '';
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        buf += text.decode(value, {stream: true});
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          let kind = 'message';
          for (const line of block.split('\n')) {
            if (line.startsWith('event:')) kind = line.slice(6).trim();
            else if (line.startsWith('id:')) after = Number(line.slice(3).trim());
          }
          if (kind === 'job' || kind === 'share' || kind === 'reset') changed();
        }
      }
    } catch (_) {
      // Dropped or refused: shown as offline, tried again in a second.
    }
    setLive(false);
    await new Promise((r) => setTimeout(r, 1000));
  }
}

function setLive(on) {
  const l = document.getElementById('live');
  l.className = `live ${on ? 'on' : 'off'}`;
  l.textContent = on ? 'live' : 'offline';
}

// Something changed: the current page reads again, at most every half second.
function changed() {
  if (app.refreshing) {
    app.dirty = true;
    return;
  }
  if (app.timer) return;
  const wait = Math.max(0, 500 - (Date.now() - app.lastRefresh));
  app.timer = setTimeout(() => {
    app.timer = null;
    refresh();
  }, wait);
}

async function refresh() {
  if (!app.view || !app.view.load) return;
  app.refreshing = true;
  app.dirty = false;
  const view = app.view;
  try {
    await view.load();
    if (view === app.view) banner('');
  } catch (e) {
    if (view === app.view && !(e instanceof ApiError && e.status === 401)) banner(e.message);
  } finally {
    app.refreshing = false;
    app.lastRefresh = Date.now();
    document.body.dataset.loaded = String(app.lastRefresh);
    // Milliseconds from the start of the navigation to the page's first drawing.
    if (!document.body.dataset.firstMs) document.body.dataset.firstMs = String(Math.round(performance.now()));
    if (app.dirty) changed();
  }
}

// ---- routing ------------------------------------------------------------------------

const PAGES = {shares: sharesPage, queue: queuePage, nodes: nodesPage, job: jobPage,
  preemptions: preemptionsPage, report: reportPage};

function route() {
  const m = /^#\/([a-z]+)(?:\/([^/?]+))?/.exec(location.hash);
  const page = m && PAGES[m[1]] ? m[1] : 'shares';
  const arg = m ? m[2] : undefined;
  if (app.view && app.view.dispose) app.view.dispose();
  for (const a of document.querySelectorAll('#nav a')) {
    a.classList.toggle('active', a.dataset.page === page);
  }
  const root = document.getElementById('page');
  fill(root);
  document.body.dataset.page = page;
  delete document.body.dataset.loaded;
  app.view = PAGES[page](root, arg);
  banner('');
  refresh();
}

// ---- Shares -------------------------------------------------------------------------

function sharesPage(root) {
  let range = 24;
  const now = el('div');
  const chart = el('div');
  const seg = el('span', {class: 'seg'});
  for (const [h, label] of [[6, '6 hours'], [24, '24 hours'], [24 * 7, '7 days'], [24 * 30, '30 days']]) {
    seg.append(el('button', {type: 'button', class: h === range ? 'on' : null, onclick: (e) => {
      range = h;
      for (const b of seg.children) b.classList.toggle('on', b === e.target);
      refresh();
    }}, label));
  }
  root.append(el('h1', {}, 'Shares'), now,
    el('h2', {}, 'GPUs held per share, hour by hour'),
    el('div', {class: 'controls'}, 'Over the last ', seg,
      el('span', {class: 'tip'}, 'Average GPUs held in each hour, from the accounting ledger; the lighter part of a bar is borrowed.')),
    chart);
  return {
    async load() {
      const to = Date.now();
      const [shares, hours, groups] = await Promise.all([
        api('shares'),
        api(`ledger/hours?from=${to - range * HOUR}&to=${to}`),
        api('groups').catch(() => []),
      ]);
      app.shareOrder = shares.map((s) => s.name);
      const rows = [];
      for (const s of shares) {
        s.units.forEach((u, i) => {
          const used = u.used;
          const pct = (v) => (u.max ? Math.min(100, (100 * v) / Math.max(u.max, used)) : (used ? 100 : 0));
          rows.push(el('tr', {dataset: {share: s.name, unit: u.unit}},
            td(i === 0 ? el('b', {}, el('i', {class: 'swatch', style: null}), s.name) : ''),
            td(i === 0 ? s.strategy : ''),
            td(u.unit),
            td(String(u.max), 'num'),
            td(String(u.used), 'num', {dataset: {field: 'used'}}),
            td(String(u.borrowed), 'num'),
            td(String(u.lent), 'num'),
            td(i === 0 ? String(s.running) : '', 'num'),
            td(i === 0 ? String(s.waiting) : '', 'num', {dataset: {field: 'waiting'}}),
            td(i === 0 && s.fair ? el('span', {title: `decayed usage, half-life ${duration(s.fair.half_life_s * 1000)}; weight ${s.fair.weight}`},
              `${s.fair.decayed_gpu_hours.toFixed(1)} GPU-h, borrows ${s.fair.borrow_order} of ${s.fair.of}`) : ''),
            td(el('span', {class: 'bar', title: `${used} of ${u.max} in use`},
              el('span', {style: null, class: 'fill', dataset: {w: pct(used - u.borrowed)}}),
              el('span', {class: 'fill borrowed', dataset: {w: pct(u.borrowed)}})))));
        });
      }
      const t = table(['Share', 'Strategy', 'Unit', ['Max', 'num'], ['Used', 'num'], ['Borrowed', 'num'],
        ['Lent', 'num'], ['Running', 'num'], ['Waiting', 'num'], 'Fair share', 'Use of max'], rows,
      {attrs: {id: 'shares-now'}, empty: 'No shares yet: an admin creates them with tranche apply.'});
      // Widths and colours are set through the DOM (the page allows no inline styles).
      for (const tr of t.querySelectorAll('tbody tr[data-share]')) {
        const c = colorOf(tr.dataset.share);
        for (const f of tr.querySelectorAll('.fill')) {
          f.style.width = `${f.dataset.w}%`;
          f.style.background = c;
          if (f.classList.contains('borrowed')) f.style.opacity = '0.45';
        }
      }
      fill(now, t, ...groupTable(groups, shares));
      fill(chart, ...stackedCharts(hours, to - range * HOUR, to));
    },
  };
}

// The groups of shares as a tree (each under the group that holds it), per unit of its
// limits: what its shares use together against its max and ceiling. Nothing without groups.
function groupTable(groups, shares) {
  if (!groups.length) return [];
  const byName = new Map(groups.map((g) => [g.name, g]));
  const used = (g, unit, depth) => {
    let sum = 0;
    for (const s of shares) {
      if (!g.shares.includes(s.name)) continue;
      for (const u of s.units) if (u.unit === unit) sum += u.used;
    }
    if (depth < 4) for (const m of g.groups) if (byName.has(m)) sum += used(byName.get(m), unit, depth + 1);
    return sum;
  };
  const nested = new Set(groups.flatMap((g) => g.groups));
  const rows = [];
  const walk = (g, depth) => {
    g.units.forEach((u, i) => {
      rows.push(el('tr', {dataset: {group: g.name, unit: u.unit}},
        td(i === 0 ? el('span', {class: `depth${depth}`}, g.name) : ''),
        td(i === 0 ? g.strategy : ''),
        td(u.unit),
        td(String(u.max), 'num'),
        td(String(used(g, u.unit, 0)), 'num', {dataset: {field: 'used'}}),
        td(u.ceiling === undefined ? 'none' : String(u.ceiling), 'num'),
        td(i === 0 ? [...g.shares, ...g.groups.map((m) => `group ${m}`)].join(', ') : '')));
    });
    if (depth < 4) for (const m of g.groups) if (byName.has(m)) walk(byName.get(m), depth + 1);
  };
  for (const g of groups) if (!nested.has(g.name)) walk(g, 0);
  return [el('h2', {}, 'Groups of shares'),
    table(['Group', 'Strategy', 'Unit', ['Max', 'num'], ['Used', 'num'], ['Ceiling', 'num'], 'Members'], rows,
      {attrs: {id: 'groups-now'}, empty: ''})];
}

// One stacked bar chart per unit: per hour, each share's used then borrowed GPUs.
function stackedCharts(hours, from, to) {
  const units = new Map();
  for (const h of hours.hours) {
    for (const s of h.shares) {
      if (!units.has(s.unit)) units.set(s.unit, new Set());
      if (s.used + s.borrowed > 0) units.get(s.unit).add(s.share);
    }
  }
  if (!units.size) {
    return [el('p', {class: 'muted'}, 'No GPU time counted in this range yet.')];
  }
  const out = [];
  for (const [unit, shareSet] of units) {
    const shares = [...shareSet].sort((a, b) => colorIndex(a) - colorIndex(b));
    const W = 1100, H = 220, L = 44, R = 10, T = 10, B = 26;
    const first = Math.floor(from / HOUR), last = Math.ceil(to / HOUR);
    const n = Math.max(1, last - first);
    let top = 1;
    for (const h of hours.hours) {
      let sum = 0;
      for (const s of h.shares) if (s.unit === unit) sum += s.used + s.borrowed;
      top = Math.max(top, sum, h.capacity[unit] || 0);
    }
    // Four grid steps of a round size.
    const step = top <= 1 ? 0.25 : Math.ceil(top / 4);
    top = step * 4;
    const x = (hour) => L + ((hour - first) / n) * (W - L - R);
    const y = (v) => T + (1 - v / top) * (H - T - B);
    const g = svg('svg', {viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img', 'aria-label': `${unit} GPUs per share`});
    for (let i = 0; i <= 4; i++) {
      const v = (top * i) / 4;
      g.append(svg('line', {x1: L, x2: W - R, y1: y(v), y2: y(v), class: 'grid'}),
        svg('text', {x: L - 6, y: y(v) + 4, 'text-anchor': 'end'}, Number.isInteger(v) ? v : v.toFixed(2)));
    }
    const tickEvery = Math.max(1, Math.ceil(n / 12));
    for (let hr = first; hr <= last; hr += tickEvery) {
      const d = new Date(hr * HOUR);
      const label = n > 48 ? d.toLocaleDateString([], {month: 'short', day: 'numeric'}) + ' ' + d.getHours() + 'h'
        : d.toLocaleTimeString([], {hour: '2-digit', minute: '2-digit'});
      g.append(svg('text', {x: x(hr), y: H - 8, 'text-anchor': 'middle'}, label));
    }
    const bw = Math.max(1, (W - L - R) / n - 1);
    for (const h of hours.hours) {
      const hr = h.start / HOUR;
      let base = 0;
      for (const share of shares) {
        const s = h.shares.find((z) => z.share === share && z.unit === unit);
        if (!s) continue;
        for (const [v, op, what] of [[s.used, 1, 'used'], [s.borrowed, 0.45, 'borrowed']]) {
          if (v <= 0) continue;
          const r = svg('rect', {x: x(hr) + 0.5, width: bw, y: y(base + v), height: y(base) - y(base + v),
            fill: colorOf(share), 'fill-opacity': op});
          r.append(svg('title', {}, `${share}, ${localTime(h.start)}: ${v.toFixed(2)} GPUs ${what} on average`));
          g.append(r);
          base += v;
        }
      }
      const cap = h.capacity[unit];
      if (cap) {
        g.append(svg('line', {x1: x(hr), x2: x(hr) + bw + 1, y1: y(cap), y2: y(cap), stroke: '#111', 'stroke-dasharray': '3 2'}));
      }
    }
    const legend = el('div', {class: 'legend'}, el('b', {}, unit),
      shares.map((s) => {
        const i = el('i');
        i.style.background = colorOf(s);
        return el('span', {}, i, s);
      }),
      el('span', {class: 'tip'}, 'dashed: capacity'));
    out.push(el('div', {class: 'card'}, legend, g));
  }
  return out;
}

function colorIndex(share) {
  const i = app.shareOrder.indexOf(share);
  return i >= 0 ? i : 1000 + (hashOf(share) % 1000);
}

// ---- Queue --------------------------------------------------------------------------

function standingCells(s) {
  if (!s) return [td('—', 'muted'), td('—', 'muted')];
  const start = s.start === 'now' ? 'now (GPUs are free)'
    : s.start === 'at' ? `${localTime(s.start_at)} (in ${duration(s.start_at - Date.now())})`
      : 'unknown (a running job ahead has no time limit)';
  return [
    td(`${s.in_share} of ${s.share_waiting} in share · ${s.in_queue} of ${s.queue_waiting} in queue`, null,
      {dataset: {field: 'position'}}),
    td(start, null, {dataset: {field: 'estimate'}}),
  ];
}

function queueRows(jobs) {
  return jobs.map(({job, standing}) => el('tr', {dataset: {job: job.id}},
    td(jobLink(job.id)),
    td(job.name),
    td(job.share),
    td(job.user),
    td(String(job.priority), 'num'),
    td(`${job.gpus} × ${job.unit}`, 'num'),
    td(badge(job.status)),
    td(duration(Date.now() - job.submitted_at), 'num'),
    ...standingCells(standing),
    td(job.reason || '—', job.reason ? null : 'muted')));
}

const QUEUE_HEAD = ['Job', 'Name', 'Share', 'User', ['Priority', 'num'], ['GPUs', 'num'], 'State',
  ['Waiting', 'num'], 'Position', 'Estimated start', 'Why it waits'];

function queuePage(root) {
  const body = el('div');
  root.append(el('h1', {}, 'Queue'), body);
  return {
    async load() {
      const q = await api('queue/standing?limit=20');
      const parts = [
        el('p', {class: 'muted'}, `${q.waiting} job(s) waiting. The front of the queue in the order the scheduler considers them, then each share's (at most 20 each).`),
        el('h2', {}, 'Front of the queue'),
        table(QUEUE_HEAD, queueRows(q.front), {attrs: {id: 'queue-front'}, empty: 'Nothing waits.'}),
      ];
      for (const s of q.shares) {
        if (!s.jobs.length) continue;
        parts.push(el('h2', {}, `Share ${s.share}`),
          table(QUEUE_HEAD, queueRows(s.jobs), {attrs: {dataset: {share: s.share}}}));
      }
      fill(body, ...parts);
    },
  };
}

// ---- Nodes --------------------------------------------------------------------------

const CELL_TEXT = {free: 'free', used: 'used', held: 'held for a preemptor', draining: 'draining',
  unhealthy: 'unhealthy', down: 'down'};

function nodesPage(root) {
  const body = el('div');
  const open = new Set(); // nodes whose drain form is open
  const forms = new Map(); // their forms, kept across redraws with what was typed
  let focus = null; // the node whose form was just opened
  root.append(el('h1', {}, 'Nodes'), body);
  const view = {
    async load() {
      // A redraw would take the focus from a drain form being filled in: wait.
      const active = document.activeElement;
      if (active && active.closest && active.closest('form.drainform')) {
        setTimeout(changed, 1000);
        return;
      }
      const [nodes, shares] = await Promise.all([api('gpus'), app.shareOrder.length ? null : api('shares')]);
      if (shares) app.shareOrder = shares.map((s) => s.name);
      const seen = new Set();
      for (const n of nodes) for (const g of n.gpus) if (g.share) seen.add(g.share);
      const legend = el('div', {class: 'legend'},
        [['free', 'var(--free)'], ['held for a preemptor', 'var(--held)'], ['draining', 'var(--draining)'],
          ['unhealthy', 'var(--unhealthy)'], ['down', 'var(--down)']].map(([t, c]) => {
          const i = el('i');
          i.style.background = c;
          return el('span', {}, i, t);
        }),
        [...seen].sort((a, b) => colorIndex(a) - colorIndex(b)).map((s) => {
          const i = el('i');
          i.style.background = colorOf(s);
          return el('span', {}, i, `used by ${s}`);
        }));
      let free = 0, total = 0;
      const cards = nodes.map((n) => {
        const cells = n.gpus.map((g) => {
          total += 1;
          if (g.state === 'free') free += 1;
          const title = [`GPU ${g.index} (${g.unit}): ${CELL_TEXT[g.state] || g.state}`,
            g.job ? `job ${g.job} of share ${g.share}, user ${g.user}` : null,
            g.for_job ? `being stopped for job ${g.for_job}` : null].filter(Boolean).join('\n');
          const c = el(g.job ? 'a' : 'div', {class: `gpu ${g.state}`, title, href: g.job ? `#/job/${g.job}` : null,
            dataset: {node: n.name, gpu: g.index, state: g.state, job: g.job || ''}},
          el('b', {}, `${g.index}`), ` ${g.unit}`, el('br'),
          g.job ? `job ${g.job}` : CELL_TEXT[g.state],
          g.job ? el('br') : null, g.job ? (g.for_job ? `→ job ${g.for_job}` : g.share) : null);
          if (g.state === 'used') c.style.background = colorOf(g.share);
          if (g.state === 'used') c.style.color = '#fff';
          return c;
        });
        const drained = n.state === 'DRAINING' || n.state === 'DRAINED';
        let actions = null;
        if (canOperate()) {
          if (drained) {
            actions = el('button', {class: 'act', type: 'button', dataset: {action: 'resume', node: n.name},
              onclick: async (e) => {
                e.target.disabled = true;
                try {
                  await api(`nodes/${encodeURIComponent(n.name)}/resume`, {method: 'POST'});
                  refresh();
                } catch (err) { banner(`resume ${n.name}: ${err.message}`); e.target.disabled = false; }
              }}, 'Resume');
          } else if (open.has(n.name)) {
            if (!forms.has(n.name)) forms.set(n.name, drainForm(n.name));
            actions = forms.get(n.name);
          } else {
            actions = el('button', {class: 'act', type: 'button', dataset: {action: 'drain', node: n.name},
              onclick: () => { open.add(n.name); focus = n.name; refresh(); }}, 'Drain…');
          }
        }
        return el('div', {class: 'card node', dataset: {node: n.name, state: n.state}},
          el('h3', {}, n.name, el('span', {class: 'badge'}, n.state)),
          n.reason ? el('div', {class: 'reason', dataset: {field: 'reason'}}, n.reason) : null,
          el('div', {class: 'gpus'}, cells), actions);
      });
      fill(body, legend,
        el('p', {class: 'muted'}, `${nodes.length} node(s), ${free} of ${total} GPUs free.`),
        el('div', {class: 'nodes'}, cards));
      if (focus && forms.has(focus)) forms.get(focus).querySelector('input[type=text]').focus();
      focus = null;
    },
  };
  function close(name) {
    open.delete(name);
    forms.delete(name);
    if (document.activeElement) document.activeElement.blur();
    refresh();
  }
  function drainForm(name) {
    const reason = el('input', {type: 'text', placeholder: 'Reason (required)', dataset: {field: 'reason'}});
    const now = el('input', {type: 'checkbox'});
    return el('form', {class: 'drainform', dataset: {node: name}, onsubmit: async (e) => {
      e.preventDefault();
      if (!reason.value.trim()) { banner('A drain needs a reason.'); return; }
      try {
        await api(`nodes/${encodeURIComponent(name)}/drain`, {method: 'POST',
          json: {reason: reason.value.trim(), now: now.checked}});
        close(name);
      } catch (err) { banner(`drain ${name}: ${err.message}`); }
    }}, reason, el('label', {title: 'Stop its jobs now (they are requeued)'}, now, 'now'),
    el('button', {class: 'act primary', type: 'submit'}, 'Drain'),
    el('button', {class: 'act', type: 'button', onclick: () => close(name)}, 'Cancel'));
  }
  return view;
}

// ---- Job ----------------------------------------------------------------------------

function attemptEnd(a, byVictim) {
  if (!a.end) return a.started_at ? 'running' : 'starting';
  if (a.end.kind === 'exited') return `exited with code ${a.end.code}`;
  if (a.end.kind === 'lost') return 'lost (its node went down)';
  const p = byVictim.get(a.number);
  const by = {reclaim: 'a reclaim', in_share: 'an in-share preemption', cancel: 'a cancel', drain: 'a drain'}[a.end.stopped_by] || a.end.stopped_by;
  return el('span', {}, `stopped by ${by}`,
    p && p.for_job ? [' for ', jobLink(p.for_job.id, `job ${p.for_job.id}`), ` (${p.for_job.share})`] : null);
}

const STATE_COLOR = {SUBMITTED: '#fde68a', PENDING: '#fcd34d', RUNNABLE: '#fbbf24', SCHEDULED: '#86efac',
  STARTING: '#4ade80', RUNNING: '#16a34a', SUCCEEDED: '#3b82f6', FAILED: '#dc2626', CANCELLED: '#9ca3af'};

function timeline(job) {
  const W = 1100, H = 64, L = 10, R = 10;
  const t = job.transitions;
  const start = job.submitted_at;
  const terminal = ['SUCCEEDED', 'FAILED', 'CANCELLED'].includes(job.status);
  const end = terminal ? Math.max(start, ...t.map((x) => x.at)) : Date.now();
  const span = Math.max(1, end - start);
  const x = (ms) => L + ((ms - start) / span) * (W - L - R);
  const g = svg('svg', {viewBox: `0 0 ${W} ${H}`, class: 'chart', id: 'timeline'});
  let from = start, state = t.length ? t[0].from : job.status;
  const segs = [];
  for (const tr of t) {
    segs.push([from, tr.at, state]);
    from = tr.at;
    state = tr.to;
  }
  if (!terminal) segs.push([from, end, state]);
  for (const [a, b, s] of segs) {
    const r = svg('rect', {x: x(a), y: 8, width: Math.max(1, x(b) - x(a)), height: 22, fill: STATE_COLOR[s] || '#ccc'});
    r.append(svg('title', {}, `${s} from ${localTime(a)} for ${duration(b - a)}`));
    g.append(r);
  }
  for (const tr of t) {
    g.append(svg('line', {x1: x(tr.at), x2: x(tr.at), y1: 4, y2: 34, stroke: '#333'}));
  }
  g.append(svg('text', {x: L, y: 50}, localTime(start)),
    svg('text', {x: W - R, y: 50, 'text-anchor': 'end'}, terminal ? localTime(end) : 'now'));
  const legend = el('div', {class: 'legend'}, [...new Set(segs.map((s) => s[2]))].map((s) => {
    const i = el('i');
    i.style.background = STATE_COLOR[s] || '#ccc';
    return el('span', {}, i, s);
  }));
  return [legend, g];
}

function jobPage(root, id) {
  const head = el('div');
  const body = el('div');
  const logBox = el('pre', {class: 'log', id: 'log'});
  const logNote = el('span', {class: 'tip'});
  let stderr = false;
  let tail = null; // the output being followed: {attempt, abort}
  const MAX_LOG = 64 * 1024;
  root.append(head, body);

  async function follow(job) {
    const last = job.attempts[job.attempts.length - 1];
    if (!last || !last.allocation.length) {
      logNote.textContent = 'No output: the job has not run yet.';
      return;
    }
    if (tail && tail.attempt === last.number && tail.stderr === stderr) return;
    if (tail) tail.abort.abort();
    const abort = new AbortController();
    tail = {attempt: last.number, stderr, abort};
    logBox.textContent = '';
    logNote.textContent = `attempt ${last.number}, ${stderr ? 'stderr' : 'stdout'}${last.ended_at ? '' : ', following'}`;
    try {
      const r = await fetch(`/api/v1/jobs/${id}/logs?follow=1&attempt=${last.number}${stderr ? '&stderr=1' : ''}`,
        {headers: {Authorization: `Bearer ${app.token}`}, signal: abort.signal});
      if (!r.ok) {
        let m = `${r.status}`;
        try { m = (await r.json()).error.message; } catch (_) { /* not JSON */ }
        logNote.textContent = `Output unavailable: ${m}`;
        return;
      }
      const reader = r.body.getReader();
      const dec = new TextDecoder();
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        let text = logBox.textContent + dec.decode(value, {stream: true});
        if (text.length > MAX_LOG) text = '…' + text.slice(text.length - MAX_LOG);
        const atEnd = logBox.scrollTop + logBox.clientHeight >= logBox.scrollHeight - 4;
        logBox.textContent = text;
        if (atEnd) logBox.scrollTop = logBox.scrollHeight;
      }
      logNote.textContent = `attempt ${last.number}, ${stderr ? 'stderr' : 'stdout'}: complete`;
    } catch (e) {
      if (e.name !== 'AbortError') logNote.textContent = `Output interrupted: ${e.message}`;
    }
  }

  return {
    async load() {
      if (!/^\d+(_\d+)?$/.test(id || '')) {
        fill(head, el('h1', {}, 'Job'), el('p', {}, 'Give a job id (e.g. 42) in the box at the top.'));
        return;
      }
      let job;
      try {
        job = await api(`jobs/${id}`);
      } catch (e) {
        if (e.status === 404) {
          fill(head, el('h1', {}, `Job ${id}`), el('p', {}, e.message));
          return;
        }
        throw e;
      }
      const [explain, standing, pre] = await Promise.all([
        api(`jobs/${id}/explain`),
        job.status === 'RUNNABLE' ? api(`jobs/${id}/standing`) : null,
        api(`preemptions?job=${job.id}&limit=100`),
      ]);
      const s = job.spec;
      const ended = job.transitions.length ? job.transitions[job.transitions.length - 1].at : null;
      fill(head, el('h1', {}, `Job ${id} `, el('span', {class: 'muted'}, s.name), ' ', badge(job.status)),
        job.archived ? el('p', {class: 'muted', dataset: {field: 'archived'}},
          `Archived: this job ended ${ended ? localTime(ended) : ''} and has left the controllers' state; ` +
          'it is read from the history of the controller that answered. Its output stays on its node only while the agent keeps it.') : null,
        el('div', {class: 'card'}, el('dl', {class: 'kv'},
          el('dt', {}, 'Share'), el('dd', {}, `${s.share} (queue ${s.queue})`),
          el('dt', {}, 'User'), el('dd', {}, s.user),
          el('dt', {}, 'Asks for'), el('dd', {}, `${s.gpus_per_node} × ${s.unit} on ${s.nodes} node(s), priority ${s.priority}`),
          el('dt', {}, 'Command'), el('dd', {}, job.hidden.length
            ? el('span', {class: 'muted'}, `hidden: its command, environment and paths are shown only to ${s.user}, operators and admins`)
            : el('code', {}, s.command.join(' '))),
          el('dt', {}, 'Submitted'), el('dd', {}, `${localTime(job.submitted_at)} (${duration(Date.now() - job.submitted_at)} ago)`),
          el('dt', {}, 'Time limit'), el('dd', {}, s.time_limit_s ? duration(s.time_limit_s * 1000) : 'none'),
          el('dt', {}, 'Preemptions'), el('dd', {}, `${job.preemptions} (failures ${job.failures})`),
          job.stopping ? [el('dt', {}, 'Being stopped'), el('dd', {},
            `${job.stopping.reason}; killed at ${localTime(job.stopping.deadline)} unless it exits`)] : null,
          standing ? [el('dt', {}, 'Position'), el('dd', {dataset: {field: 'position'}},
            `${standing.in_share} of ${standing.share_waiting} in its share, ${standing.in_queue} of ${standing.queue_waiting} in its queue`),
          el('dt', {}, 'Estimated start'), el('dd', {}, standingCells(standing)[1].textContent)] : null)));
      const byVictim = new Map();
      for (const p of pre.preemptions) if (p.victim.id === job.id) byVictim.set(p.attempt, p);
      const took = pre.preemptions.filter((p) => p.for_job && p.for_job.id === job.id);
      const attempts = job.attempts.map((a) => el('tr', {},
        td(String(a.number), 'num'),
        td(a.allocation.map((n) => `${n.node}: GPU ${n.gpus.join(',')}`).join('; ')),
        td(a.borrowed ? 'on loan' : 'no'),
        td(localTime(a.scheduled_at)),
        td(localTime(a.started_at)),
        td(a.checkpointed_at ? localTime(a.checkpointed_at) : '—'),
        td(a.ended_at ? localTime(a.ended_at) : '—'),
        td(a.started_at ? duration((a.ended_at || Date.now()) - a.started_at) : '—', 'num'),
        td(attemptEnd(a, byVictim))));
      const trs = job.transitions.map((t) => el('tr', {},
        td(localTime(t.at)), td([badge(t.from), ' → ', badge(t.to)]), td(t.reason), td(t.nodes.join(', '))));
      const seg = el('span', {class: 'seg'},
        ['stdout', 'stderr'].map((k) => el('button', {type: 'button', class: (k === 'stderr') === stderr ? 'on' : null,
          onclick: () => { stderr = k === 'stderr'; refresh(); }}, k)));
      fill(body, 
        el('h2', {}, 'Why it is where it is'),
        el('div', {class: 'card'}, el('ul', {class: 'lines', id: 'explain'}, explain.lines.map((l) => el('li', {}, l)))),
        el('h2', {}, 'Timeline'), el('div', {class: 'card'}, timeline(job)),
        table(['When', 'Transition', 'Reason', 'Nodes'], trs),
        el('h2', {}, 'Attempts'),
        table([['#', 'num'], 'GPUs', 'Borrowed', 'Scheduled', 'Started', 'Last checkpoint', 'Ended', ['Ran', 'num'], 'End'], attempts,
          {empty: 'Not placed yet.'}),
        took.length ? [el('h2', {}, 'Preempted for this job'), table(['When', 'Kind', 'Taken from', ['GPUs', 'num']],
          took.map((p) => el('tr', {}, td(localTime(p.at)), td(kindText(p.kind)),
            td([jobLink(p.victim.id, `job ${p.victim.id}`), ` (${p.victim.share}, ${p.victim.user})`]),
            td(String(p.gpus), 'num'))))] : null,
        el('h2', {}, 'Output'),
        el('div', {class: 'controls'}, seg, logNote),
        logBox);
      follow(job);
    },
    dispose() {
      if (tail) tail.abort.abort();
    },
  };
}

function kindText(k) {
  return k === 'reclaim' ? 'reclaim' : k === 'in_share' ? 'in-share preemption' : k;
}

// ---- Preemptions --------------------------------------------------------------------

function preemptionsPage(root) {
  const body = el('div');
  root.append(el('h1', {}, 'Preemptions'), body);
  return {
    async load() {
      const [p, shares] = await Promise.all([api('preemptions?limit=500'), api('shares')]);
      app.shareOrder = shares.map((s) => s.name);
      const list = p.preemptions;
      const parts = [el('p', {class: 'muted'},
        `${p.total} reclaim(s) and in-share preemption(s)${p.total > list.length ? `; the latest ${list.length} shown` : ''}. A reclaim takes GPUs back from a share above its max for a share within its max; an in-share preemption stops a lower-priority job of the same share.`)];
      if (list.length) {
        // Timeline: one lane per share that lost GPUs; a mark per preemption, coloured
        // by the share that took them.
        const lanes = [...new Set(list.map((e) => e.victim.share))].sort((a, b) => colorIndex(a) - colorIndex(b));
        const W = 1100, L = 90, R = 14, lane = 28, H = lanes.length * lane + 30;
        const t0 = Math.min(...list.map((e) => e.at)), t1 = Math.max(Date.now(), ...list.map((e) => e.at));
        const span = Math.max(60000, t1 - t0);
        const x = (ms) => L + ((ms - t0) / span) * (W - L - R);
        const g = svg('svg', {viewBox: `0 0 ${W} ${H}`, class: 'chart', id: 'preemption-timeline'});
        lanes.forEach((s, i) => {
          g.append(svg('line', {x1: L, x2: W - R, y1: i * lane + 16, y2: i * lane + 16, class: 'grid'}),
            svg('text', {x: L - 8, y: i * lane + 20, 'text-anchor': 'end'}, s));
        });
        for (const e of list) {
          const i = lanes.indexOf(e.victim.share);
          const by = e.for_job ? e.for_job.share : '?';
          const shape = e.kind === 'reclaim'
            ? svg('circle', {cx: x(e.at), cy: i * lane + 16, r: 6, fill: colorOf(by), stroke: '#111'})
            : svg('rect', {x: x(e.at) - 5, y: i * lane + 11, width: 10, height: 10, fill: colorOf(by), stroke: '#111'});
          shape.append(svg('title', {}, `${localTime(e.at)}: ${kindText(e.kind)} — job ${e.victim.id} (${e.victim.share}) stopped for job ${e.for_job ? e.for_job.id : '?'} (${by}), ${e.gpus} GPU(s)`));
          g.append(shape);
        }
        g.append(svg('text', {x: L, y: H - 6}, localTime(t0)), svg('text', {x: W - R, y: H - 6, 'text-anchor': 'end'}, 'now'));
        parts.push(el('div', {class: 'card'},
          el('div', {class: 'legend'}, 'Lanes: the share GPUs were taken from; fill: the share that took them; ● reclaim, ■ in-share'), g));
        // Who took from whom: counts and GPU-hours lost, per pair of shares.
        const pairs = new Map();
        for (const e of list) {
          const k = `${e.victim.share}\u0000${e.for_job ? e.for_job.share : '?'}`;
          const v = pairs.get(k) || {n: 0, lost: 0};
          v.n += 1;
          v.lost += (e.ran_ms * e.gpus) / HOUR;
          pairs.set(k, v);
        }
        parts.push(el('h2', {}, 'Who took from whom'), table(['Taken from share', 'By share', ['Preemptions', 'num'], ['GPU-hours of run time lost', 'num']],
          [...pairs].map(([k, v]) => {
            const [a, b] = k.split('\u0000');
            return el('tr', {}, td(a), td(b), td(String(v.n), 'num'), td(gpuHours(v.lost), 'num'));
          })));
      }
      parts.push(el('h2', {}, 'Latest'), table(['When', 'Kind', 'Stopped', 'For', ['GPUs', 'num'], ['Had run', 'num']],
        list.slice(0, 200).map((e) => el('tr', {},
          td(localTime(e.at)), td(kindText(e.kind) + (e.ongoing ? ' (stopping)' : '')),
          td([jobLink(e.victim.id, `job ${e.victim.id}`), ` ${e.victim.name} (${e.victim.share}, ${e.victim.user}, attempt ${e.attempt})`]),
          td(e.for_job ? [jobLink(e.for_job.id, `job ${e.for_job.id}`), ` ${e.for_job.name} (${e.for_job.share}, ${e.for_job.user})`] : 'a job no longer known'),
          td(String(e.gpus), 'num'), td(duration(e.ran_ms), 'num'))),
      {empty: 'No preemptions yet.'}));
      fill(body, ...parts);
    },
  };
}

// ---- Report -------------------------------------------------------------------------

const FIGURES = [['used', 'Used'], ['borrowed', 'Borrowed'], ['lent', 'Lent'], ['reserved_idle', 'Reserved idle'],
  ['lost_reclaim', 'Lost: reclaim'], ['lost_in_share', 'Lost: in-share'], ['lost_drain', 'Lost: drain'],
  ['work_lost', 'Work lost']];

function toLocalInput(ms) {
  const d = new Date(ms);
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

function reportPage(root) {
  const secs = (ms) => Math.floor(ms / 1000) * 1000;
  let to = secs(Date.now());
  let from = to - 24 * HOUR;
  let by = 'share';
  let last = null;
  const fromIn = el('input', {type: 'datetime-local', step: 1, id: 'report-from'});
  const toIn = el('input', {type: 'datetime-local', step: 1, id: 'report-to'});
  const bySel = el('select', {id: 'report-by'}, ['share', 'user', 'unit'].map((b) => el('option', {value: b}, `by ${b}`)));
  const body = el('div');
  const csv = el('button', {type: 'button', class: 'act', id: 'report-csv', onclick: () => download()}, 'Download CSV');
  const preset = (label, span) => el('button', {type: 'button', onclick: () => {
    to = secs(Date.now());
    from = span ? to - span : 0;
    refresh();
  }}, label);
  root.append(el('h1', {}, 'Report'),
    el('form', {class: 'controls', onsubmit: (e) => {
      e.preventDefault();
      const f = new Date(fromIn.value).getTime(), t = new Date(toIn.value).getTime();
      if (!(t > f)) { banner('The end of the range must be after its start.'); return; }
      from = secs(f);
      to = secs(t);
      by = bySel.value;
      refresh();
    }},
    el('label', {}, 'From', fromIn), el('label', {}, 'to', toIn), bySel,
    el('button', {type: 'submit', class: 'act primary'}, 'Show'),
    preset('Last 24 hours', 24 * HOUR), preset('Last 7 days', 7 * 24 * HOUR), preset('Last 30 days', 30 * 24 * HOUR),
    preset('Since counting began', 0), csv),
    body);

  function keyOf(r) {
    return by === 'unit' ? [r.unit] : [by === 'share' ? r.share : r.user, r.unit];
  }

  function download() {
    if (!last) return;
    const head = [...(by === 'unit' ? ['unit'] : [by, 'unit']),
      ...FIGURES.map(([k]) => `${k}_gpu_hours`), ...FIGURES.map(([k]) => `${k}_percent_of_capacity`)];
    const q = (v) => (/[",\n]/.test(String(v)) ? `"${String(v).replace(/"/g, '""')}"` : String(v));
    const lines = [head.join(',')];
    for (const r of last.rows) {
      lines.push([...keyOf(r), ...FIGURES.map(([k]) => r.gpu_hours[k]), ...FIGURES.map(([k]) => r.percent_of_capacity[k])]
        .map(q).join(','));
    }
    const blob = new Blob([lines.join('\n') + '\n'], {type: 'text/csv'});
    const a = el('a', {href: URL.createObjectURL(blob),
      download: `tranche-report-${by}-${toLocalInput(last.from).replace(/:/g, '')}-${toLocalInput(last.to).replace(/:/g, '')}.csv`});
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 10000);
  }

  return {
    async load() {
      fromIn.value = toLocalInput(from);
      toIn.value = toLocalInput(to);
      bySel.value = by;
      const r = await api(`report?from=${from}&to=${to}&by=${by}`);
      last = r;
      const keys = by === 'unit' ? ['Unit'] : [by === 'share' ? 'Share' : 'User', 'Unit'];
      const cells = (r0, isTotal) => FIGURES.map(([k]) => {
        const v = r0.gpu_hours[k];
        const pc = r0.percent_of_capacity[k];
        return td([gpuHours(v), el('span', {class: 'muted'}, ` ${pc.toFixed(1)}%`)], 'num',
          {dataset: {field: k, value: isTotal ? null : String(v)}, title: `${v} GPU-hours, ${pc}% of capacity`});
      });
      const rows = r.rows.map((row) => el('tr', {dataset: {key: keyOf(row).join('/')}},
        keyOf(row).map((k) => td(k)), cells(row, false)));
      // A total per unit (percentages of that unit's capacity).
      const units = [...new Set(r.rows.map((x) => x.unit))];
      if (by !== 'unit') {
        for (const u of units) {
          const sum = {gpu_hours: {}, percent_of_capacity: {}};
          for (const [k] of FIGURES) {
            sum.gpu_hours[k] = r.rows.filter((x) => x.unit === u).reduce((a, x) => a + x.gpu_hours[k], 0);
            sum.percent_of_capacity[k] = r.rows.filter((x) => x.unit === u).reduce((a, x) => a + x.percent_of_capacity[k], 0);
          }
          rows.push(el('tr', {class: 'total', dataset: {total: u}}, td('Total'), td(u), cells(sum, true)));
        }
      }
      const caps = Object.entries(r.capacity_gpu_hours).map(([u, v]) => `${u}: ${gpuHours(v)} GPU-hours`).join(', ');
      fill(body, 
        el('p', {class: 'muted'}, r.counting_since
          ? `GPU-hours from ${localTime(Math.max(r.from, r.counting_since))} to ${localTime(r.to)} (whole hours that overlap the range), with percentages of each unit's capacity. Capacity: ${caps || 'none'}.`
          : 'Nothing counted yet.'),
        table([...keys, ...FIGURES.map(([, t]) => [t, 'num'])], rows,
          {attrs: {id: 'report', dataset: {from: r.from, to: r.to, by}}, empty: 'No GPU time in this range.'}));
    },
  };
}

// ---- start --------------------------------------------------------------------------

async function start() {
  takeToken();
  if (!app.token) {
    showLogin();
    return;
  }
  try {
    app.who = await api('whoami');
  } catch (e) {
    if (!(e instanceof ApiError && e.status === 401)) banner(e.message);
    return;
  }
  document.getElementById('who').textContent = `${app.who.name} (${app.who.role})`;
  document.getElementById('logout').hidden = false;
  route();
  if (app.following) {
    // A new token: the stream starts again with it.
    if (app.events) app.events.abort();
  } else {
    app.following = true;
    followEvents().finally(() => { app.following = false; });
  }
}

// Streams left open when the page goes would keep holding the browser's few
// connections to this origin (it tries to drain them for reuse): end them.
window.addEventListener('pagehide', () => {
  if (app.events) app.events.abort();
  if (app.view && app.view.dispose) app.view.dispose();
});
window.addEventListener('hashchange', () => {
  if (/^#token=/.test(location.hash)) {
    start();
  } else if (app.token) {
    route();
  }
});
document.getElementById('logout').addEventListener('click', () => logout('Logged out.'));
document.getElementById('jump').addEventListener('submit', (e) => {
  e.preventDefault();
  const v = document.getElementById('jump-id').value.trim();
  if (v) location.hash = `#/job/${encodeURIComponent(v)}`;
});
// Durations ("waiting 3m") age; the page reads again every 30 s even when nothing
// happens.
setInterval(() => { if (app.view && app.token) changed(); }, 30000);
start();
