// The live pages of scalpel serve, shadow proxy and load --dashboard.
// Polls live/snapshot once a second and redraws: tables from the JSON (textContent only,
// never markup from data), charts as the SVG the server drew with the report's code.
'use strict';
(function () {
  const body = document.body;
  const content = document.getElementById('content');
  const statusEl = document.getElementById('live-status');
  const resultEl = document.getElementById('live-result');
  const tokenForm = document.getElementById('live-token');
  const tokenInput = document.getElementById('live-token-input');
  const TOKEN_KEY = 'scalpel-admin-token';
  let token = sessionStorage.getItem(TOKEN_KEY) || '';
  let interval = 1000;
  let lastOk = 0;
  let finished = false;
  const shown = new Map(); // section id -> serialized HTML, to touch only what changed

  // ---------- small DOM helpers ----------
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'text') node.textContent = String(v);
      else if (k === 'class') node.className = v;
      else if (k === 'color') node.style.borderTopColor = v;
      else node.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }
  const num = (v) => typeof v === 'number' && isFinite(v);
  const dash = '–';
  function fmtMs(v) {
    if (!num(v)) return dash;
    if (v < 1) return v.toFixed(3);
    if (v < 10) return v.toFixed(2);
    if (v < 100) return v.toFixed(1);
    return Math.round(v).toLocaleString('en-US');
  }
  function fmtRate(v) {
    if (!num(v)) return dash;
    return v >= 100 ? Math.round(v).toLocaleString('en-US') : v.toFixed(1);
  }
  function fmtCount(v) { return num(v) ? v.toLocaleString('en-US') : dash; }
  function fmtPct(v) {
    if (!num(v)) return dash;
    if (v === 100) return '100%';
    return (v >= 99 ? v.toFixed(2) : v.toFixed(1)) + '%';
  }
  function fmtBytes(v) {
    if (!num(v)) return dash;
    return (v / 1048576).toFixed(1) + ' MiB';
  }
  function fmtDur(s) {
    if (!num(s)) return dash;
    if (s < 60) return (Number.isInteger(s) ? s : s.toFixed(1)) + ' s';
    const m = Math.floor(s / 60);
    const rest = Math.floor(s % 60);
    if (m < 60) return m + ' min' + (rest ? ' ' + rest + ' s' : '');
    return Math.floor(m / 60) + ' h' + (m % 60 ? ' ' + (m % 60) + ' min' : '');
  }
  function fmtTime(ms) { return num(ms) ? new Date(ms).toLocaleTimeString() : dash; }

  // A table: caption, columns [{label, key|get, fmt, text}], rows, and a per-row attribute hook.
  function table(caption, columns, rows, rowAttrs, className) {
    if (!rows || rows.length === 0) {
      return el('p', { class: 'empty', text: caption + ': none yet.' });
    }
    const head = el('tr', null, columns.map((c) => el('th', { scope: 'col', class: c.text ? 'text' : null, text: c.label })));
    const lines = rows.map((r) => {
      const cells = columns.map((c, i) => {
        const raw = c.get ? c.get(r) : r[c.key];
        const value = c.fmt ? c.fmt(raw, r) : (raw === undefined || raw === null ? dash : raw);
        const tag = i === 0 ? 'th' : 'td';
        const cls = c.cls || (c.text ? 'text' : null);
        return value instanceof Node
          ? el(tag, { scope: i === 0 ? 'row' : null, class: cls }, value)
          : el(tag, { scope: i === 0 ? 'row' : null, class: cls, text: value });
      });
      return el('tr', rowAttrs ? rowAttrs(r) : null, cells);
    });
    return el('div', { class: 'table-wrap' },
      el('table', { class: className || null }, el('caption', { text: caption }), el('thead', null, head), el('tbody', null, lines)));
  }
  function card(name, figure, label, note, color, figureClass) {
    return el('div', { class: 'card', color: color },
      el('div', { class: 'card-name', text: name }),
      el('div', { class: 'card-figure' + (figureClass ? ' ' + figureClass : ''), text: figure }),
      el('div', { class: 'card-label', text: label }),
      note ? el('div', { class: 'card-note', text: note }) : null);
  }
  function section(title, ...children) {
    return el('section', null, title ? el('h2', { text: title }) : null, children);
  }
  // The charts whose id starts with `prefix`, in a two-column grid.
  function charts(snap, prefix) {
    const list = (snap.charts || []).filter((c) => c.id.startsWith(prefix));
    if (list.length === 0) return null;
    const grid = el('div', { class: 'grid' });
    for (const c of list) {
      const box = el('div', { class: 'chart-box', 'data-chart': c.id });
      box.innerHTML = c.svg; // drawn by the server from numbers, text escaped there
      grid.append(box);
    }
    return grid;
  }
  const palette = ['#4e79a7', '#e15759', '#59a14f', '#f28e2b', '#b07aa1', '#76b7b2', '#edc948', '#9c755f'];
  const color = (i) => palette[i % palette.length];
  function badge(state) { return el('span', { class: 'badge ' + state, text: state }); }

  // ---------- scalpel serve ----------
  function renderServe(d, snap) {
    const out = [];
    const apps = d.apps || [];
    out.push(['cards', el('section', { class: 'cards' }, apps.map((a, i) => card(
      a.name,
      a.ready + ' / ' + a.workers.length,
      'workers ready · ' + a.balance,
      [num(a.rps) ? fmtRate(a.rps) + ' req/s' : null,
        num(a.cpu_percent) ? 'CPU ' + a.cpu_percent.toFixed(0) + '%' : null,
        num(a.pss_bytes) ? 'PSS ' + fmtBytes(a.pss_bytes) : (num(a.rss_bytes) ? 'RSS ' + fmtBytes(a.rss_bytes) : null)]
        .filter(Boolean).join(' · '),
      color(i), a.ready < a.workers.length ? 'bad' : 'good')))]);
    for (const a of apps) {
      out.push(['app-' + a.name, section('Workers of ' + a.name, table(
        a.name + ': ' + a.ready + ' of ' + a.workers.length + ' in rotation',
        [
          { label: 'worker', key: 'index' },
          { label: 'state', key: 'state', fmt: (v) => badge(v), cls: 'text' },
          { label: 'pid', key: 'pid' },
          { label: 'port', key: 'port' },
          { label: 'uptime', key: 'uptime_s', fmt: fmtDur },
          { label: 'restarts', key: 'restarts' },
          { label: 'last restart', text: true, get: (w) => w.last_restart ? w.last_restart.reason + ' (' + fmtDur(w.last_restart.ago_s) + ' ago)' : dash },
          { label: 'in flight', key: 'in_flight' },
          { label: 'CPU %', key: 'cpu_percent', fmt: (v) => num(v) ? v.toFixed(1) : dash },
          { label: 'memory', get: (w) => num(w.pss_bytes) ? w.pss_bytes : w.rss_bytes, fmt: fmtBytes },
        ],
        a.workers,
        (w) => ({ 'data-worker': a.name + '/' + w.index, 'data-pid': w.pid, 'data-state': w.state })))]);
    }
    const routes = d.routes || [];
    if (routes.length) {
      const rows = [];
      for (const r of routes) for (const arm of r.arms) rows.push(Object.assign({ prefix: r.prefix }, arm));
      out.push(['routes', section('Routes and A/B arms',
        el('p', { class: 'note', text: 'Rate, latency and errors over the last ' + fmtDur(d.window_s || 10) + '; the charts cover the last ' + fmtDur(d.history_s || 300) + '. Latency is per app (an arm), from the balancer receiving a request to the end of the response.' }),
        table('Per route and arm', [
          { label: 'route', key: 'prefix', text: true },
          { label: 'app', key: 'app', text: true },
          { label: 'weight', key: 'weight' },
          { label: 'req/s', key: 'rps', fmt: fmtRate },
          { label: 'p50 ms', key: 'p50_ms', fmt: fmtMs },
          { label: 'p90 ms', key: 'p90_ms', fmt: fmtMs },
          { label: 'p99 ms', key: 'p99_ms', fmt: fmtMs },
          { label: 'errors/s', key: 'errors_per_s', fmt: fmtRate },
          { label: 'requests', key: 'requests', fmt: fmtCount },
        ], rows),
        charts(snap, 'route-'))]);
    }
    for (const m of d.mirrors || []) {
      out.push(['mirror-' + m.route, section('Mirror of ' + m.prefix + ' to ' + m.mirror,
        el('div', { class: 'cards' },
          card('consistency', m.compared > 0 ? fmtPct(m.consistency_percent) : 'no pairs yet',
            fmtCount(m.compared) + ' compared', fmtCount(m.mismatched) + ' mismatched · ' + fmtCount(m.skipped) + ' skipped · ' + fmtCount(m.errors) + ' errors',
            color(1), m.compared > 0 && m.mismatched === 0 ? 'good' : (m.mismatched > 0 ? 'bad' : null))),
        diffTable('Newest differences', m.newest_differences),
        fieldTable(m.endpoints))]);
    }
    return out;
  }

  function diffTable(caption, diffs) {
    return table(caption, [
      { label: 'time', key: 'at_ms', fmt: fmtTime },
      { label: 'endpoint', key: 'endpoint', text: true },
      { label: 'request', text: true, get: (x) => x.method + ' ' + x.target },
      { label: 'fields that differ (primary → candidate)', text: true, cls: 'paths', get: (x) => (x.fields || []).map(field).join('; ') },
    ], diffs, (x) => ({ 'data-diff': (x.fields || []).map((f) => f.path).join(' ') }));
  }
  function field(f) {
    const values = f.primary !== undefined || f.candidate !== undefined
      ? ': ' + (f.primary === undefined ? '(absent)' : f.primary) + ' → ' + (f.candidate === undefined ? '(absent)' : f.candidate)
      : '';
    return f.path + ' (' + f.kind + ')' + values;
  }
  function fieldTable(endpoints) {
    const rows = [];
    for (const ep of endpoints || []) for (const f of ep.fields || []) rows.push(Object.assign({ endpoint: ep.endpoint }, f));
    return table('Fields that differ, by count', [
      { label: 'endpoint', key: 'endpoint', text: true },
      { label: 'field path', key: 'path', text: true, cls: 'paths' },
      { label: 'kind', key: 'kind', text: true },
      { label: 'requests', key: 'count', fmt: fmtCount },
    ], rows);
  }

  // ---------- scalpel shadow proxy ----------
  function renderShadow(d, snap) {
    const out = [];
    const good = d.compared > 0 && d.mismatched === 0;
    out.push(['cards', el('section', { class: 'cards' },
      card('consistency', d.compared > 0 ? fmtPct(d.consistency_percent) : 'no pairs yet', fmtCount(d.compared) + ' compared',
        fmtCount(d.matched) + ' matched · ' + fmtCount(d.mismatched) + ' mismatched', color(0), good ? 'good' : (d.mismatched > 0 ? 'bad' : null)),
      card('mirrored', fmtCount(d.mirrored), 'of ' + fmtCount(d.requests) + ' requests',
        fmtCount(d.sampled_out) + ' sampled out · ' + fmtCount(d.not_mirrored_method) + ' not mirrored (method)', color(1)),
      card('skipped', fmtCount(d.skipped), 'chosen, not compared',
        Object.entries(d.skipped_by_reason || {}).map(([k, v]) => k + ' ' + v).join(' · ') || 'none', color(3), d.skipped > 0 ? 'bad' : null),
      card('errors', fmtCount(d.errors), 'a side did not answer',
        'mirror in flight ' + fmtCount(d.mirror_in_flight) + ' · queue ' + fmtCount(d.queue_depth), color(2), d.errors > 0 ? 'bad' : null))]);
    out.push(['endpoints', section('Endpoints', table('Consistency and latency per endpoint (compared pairs; latency to the last body byte)', [
      { label: 'endpoint', key: 'endpoint', text: true },
      { label: 'compared', key: 'compared', fmt: fmtCount },
      { label: 'consistency', key: 'consistency_percent', fmt: (v, r) => r.compared > 0 ? fmtPct(v) : dash },
      { label: 'mismatched', key: 'mismatched', fmt: fmtCount },
      { label: 'errors', key: 'errors', fmt: fmtCount },
      { label: 'primary p50 ms', get: (r) => r.primary_ms && r.primary_ms.p50, fmt: fmtMs },
      { label: 'candidate p50 ms', get: (r) => r.candidate_ms && r.candidate_ms.p50, fmt: fmtMs },
      { label: 'primary p99 ms', get: (r) => r.primary_ms && r.primary_ms.p99, fmt: fmtMs },
      { label: 'candidate p99 ms', get: (r) => r.candidate_ms && r.candidate_ms.p99, fmt: fmtMs },
    ], d.endpoints, (r) => ({ 'data-endpoint': r.endpoint })), charts(snap, 'shadow-'))]);
    out.push(['diffs', section('Newest differences', diffTable('Most recent first', d.newest_differences), fieldTable(d.endpoints))]);
    return out;
  }

  // ---------- scalpel load --dashboard ----------
  function renderLoad(d, snap) {
    const out = [];
    const targets = d.targets || [];
    const step = d.step || {};
    out.push(['cards', el('section', { class: 'cards' }, targets.map((t, i) => card(
      t.name,
      fmtRate(t.achieved_rps) + ' req/s',
      num(t.offered_rps) ? 'achieved of ' + fmtRate(t.offered_rps) + ' offered' : 'achieved (closed model)',
      ['p50 ' + fmtMs(t.p50_ms) + ' ms', 'p99 ' + fmtMs(t.p99_ms) + ' ms',
        fmtCount(t.errors) + ' errors',
        num(t.cpu_percent) ? 'CPU ' + t.cpu_percent.toFixed(0) + '%' : null,
        num(t.rss_bytes) ? 'RSS ' + fmtBytes(t.rss_bytes) : null].filter(Boolean).join(' · '),
      color(i))))]);
    const label = d.state === 'finished' ? 'finished' : ('step ' + ((step.index || 0) + 1) + ' of ' + (step.count || 1) +
      (num(step.offered_rps) ? ' at ' + fmtRate(step.offered_rps) + ' req/s offered' : '') + (step.target ? ' · now loading ' + step.target : ''));
    out.push(['progress', el('div', { class: 'steps' },
      el('label', { for: 'load-steps', text: label }),
      el('progress', { id: 'load-steps', max: step.count || 1, value: d.state === 'finished' ? (step.count || 1) : (step.index || 0) }),
      el('span', { class: 'note', text: (d.model || '') + (d.slo ? ' · SLO ' + d.slo : '') + ' · ' + fmtDur(d.elapsed_s) + ' elapsed' + (num(d.left_s) ? ' · ' + fmtDur(d.left_s) + ' left' : '') }))]);
    out.push(['charts', section('Over time', el('p', { class: 'note', text: 'One point a second. Latency percentiles cover each last second, from coarse buckets (within 3.2%); the report at the end has the exact HdrHistogram figures.' }), charts(snap, 'load-'))]);
    if (d.state === 'finished' && !finished) {
      finished = true;
      // The server now answers `/` with the same report as --html: show it.
      setTimeout(() => location.reload(), 300);
    }
    return out;
  }

  const renderers = { serve: renderServe, shadow: renderShadow, load: renderLoad };

  function render(snap) {
    const fn = renderers[snap.kind];
    if (!fn) return;
    const parts = fn(snap.data || {}, snap);
    const seen = new Set();
    let previous = null;
    for (const [id, node] of parts) {
      seen.add(id);
      node.dataset.section = id;
      const html = node.outerHTML;
      let current = content.querySelector(':scope > [data-section="' + CSS.escape(id) + '"]');
      if (!current) {
        if (previous) previous.after(node); else content.prepend(node);
        current = node;
      } else if (shown.get(id) !== html) {
        current.replaceWith(node);
        current = node;
      }
      shown.set(id, html);
      previous = current;
    }
    for (const child of Array.from(content.children)) {
      if (!seen.has(child.dataset.section)) { shown.delete(child.dataset.section); child.remove(); }
    }
  }

  // ---------- polling, token, actions ----------
  function authHeaders() { return token ? { Authorization: 'Bearer ' + token } : {}; }
  function needToken() {
    tokenForm.hidden = false;
    statusEl.textContent = 'waiting for the admin token';
  }
  async function poll() {
    try {
      const res = await fetch('live/snapshot', { cache: 'no-store', headers: authHeaders() });
      if (res.status === 401) {
        needToken();
      } else if (!res.ok) {
        throw new Error('HTTP ' + res.status);
      } else {
        const snap = await res.json();
        interval = Math.min(1000, snap.interval_ms || 1000);
        render(snap);
        lastOk = Date.now();
        statusEl.className = 'live-status';
        statusEl.textContent = 'live · updated ' + fmtTime(snap.at_ms);
      }
    } catch (e) {
      statusEl.className = 'live-status stale';
      statusEl.textContent = 'no answer from the server' + (lastOk ? ' since ' + fmtTime(lastOk) : '') + ' · retrying';
    }
    if (!finished) setTimeout(poll, interval);
  }

  tokenForm.addEventListener('submit', (ev) => {
    ev.preventDefault();
    token = tokenInput.value;
    sessionStorage.setItem(TOKEN_KEY, token);
    tokenForm.hidden = true;
    tokenInput.value = '';
  });

  const actionsBox = document.getElementById('live-actions');
  for (const a of JSON.parse(body.dataset.actions || '[]')) {
    const button = el('button', { type: 'button', text: a.label });
    button.addEventListener('click', async () => {
      button.disabled = true;
      resultEl.className = 'live-result';
      resultEl.textContent = a.label + '…';
      try {
        // Typed JSON: the admins refuse a state change in any type an HTML form can send.
        const res = await fetch(a.path, { method: a.method, cache: 'no-store', headers: { ...authHeaders(), 'Content-Type': 'application/json' }, body: a.method === 'GET' ? undefined : '{}' });
        let text = '';
        try { const j = await res.json(); text = j.error || (j.errors ? j.errors.join('; ') : ''); } catch (e) { text = ''; }
        if (res.status === 401) needToken();
        resultEl.className = 'live-result ' + (res.ok ? 'good' : 'bad');
        resultEl.textContent = a.label + ': ' + (res.ok ? 'done' : 'failed (HTTP ' + res.status + (text ? ': ' + text : '') + ')');
      } catch (e) {
        resultEl.className = 'live-result bad';
        resultEl.textContent = a.label + ': no answer from the server';
      }
      button.disabled = false;
    });
    actionsBox.append(button);
  }

  poll();
})();
