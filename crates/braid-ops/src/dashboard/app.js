// The braid dashboard: listens to /events (server-sent events) and draws, in SVG, one line
// per path for received and sent throughput, RTT and loss over the last 5 minutes, plus
// tables of path states, totals, data caps, energy, and (on a server) sessions and limits.
// No library: everything the page needs is served by braid itself.
'use strict';
(function () {
  const WINDOW_S = 300;
  const COLORS = ['#2b7bb9', '#e8743b', '#19a979', '#945ecf', '#ed4a7b', '#13a4b4', '#bf399e', '#6c8893'];
  const CHARTS = [
    { id: 'rx', value: (p) => p.rx_bps / 1e6 },
    { id: 'tx', value: (p) => p.tx_bps / 1e6 },
    { id: 'rtt', value: (p) => p.srtt_ms, min: (p) => p.min_rtt_ms },
    { id: 'loss', value: (p) => (p.loss == null ? null : p.loss * 100) },
  ];
  const SVG = 'http://www.w3.org/2000/svg';
  let samples = [];
  let status = null;
  const colors = {};

  function color(name) {
    if (!(name in colors)) colors[name] = COLORS[Object.keys(colors).length % COLORS.length];
    return colors[name];
  }

  function el(tag, attrs, parent, text) {
    const e = tag.startsWith('svg:') ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text != null) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }

  function clear(e) {
    while (e.firstChild) e.removeChild(e.firstChild);
    return e;
  }

  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  function num(v) {
    if (v == null) return '–';
    if (v >= 100) return v.toFixed(0);
    if (v >= 10) return v.toFixed(1);
    return v.toFixed(2);
  }

  function bytes(b) {
    if (b == null) return '–';
    const u = ['B', 'kB', 'MB', 'GB', 'TB'];
    let i = 0;
    while (b >= 1000 && i < u.length - 1) { b /= 1000; i++; }
    return num(b) + ' ' + u[i];
  }

  function bps(b) {
    if (b == null) return '–';
    if (b >= 1e9) return num(b / 1e9) + ' Gbit/s';
    if (b >= 1e6) return num(b / 1e6) + ' Mbit/s';
    return num(b / 1e3) + ' kbit/s';
  }

  function duration(s) {
    s = Math.floor(s);
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
    return (h ? h + ' h ' : '') + (h || m ? m + ' min ' : '') + (s % 60) + ' s';
  }

  // Every series name seen in the window, in a stable order.
  function seriesNames() {
    const names = new Set();
    for (const s of samples) for (const n in s.series) names.add(n);
    return Array.from(names).sort();
  }

  function drawChart(chart, names) {
    const svg = clear(document.getElementById('chart-' + chart.id));
    const W = 560, H = 190, L = 44, R = 10, T = 8, B = 20;
    svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
    const tEnd = samples.length ? samples[samples.length - 1].t : 0;
    const tStart = tEnd - WINDOW_S;
    let max = 0;
    const lines = [];
    for (const name of names) {
      for (const [kind, f] of [['value', chart.value], ['min', chart.min]]) {
        if (!f) continue;
        const pts = [];
        for (const s of samples) {
          if (s.t < tStart) continue;
          const p = s.series[name];
          const v = p ? f(p) : null;
          pts.push(v == null || !isFinite(v) ? null : [s.t, v]);
          if (v != null && isFinite(v)) max = Math.max(max, v);
        }
        lines.push({ name, kind, pts });
      }
    }
    const ymax = niceMax(max * 1.05);
    const x = (t) => L + ((t - tStart) / WINDOW_S) * (W - L - R);
    const y = (v) => T + (1 - v / ymax) * (H - T - B);
    for (let i = 0; i <= 4; i++) {
      const v = (ymax * i) / 4;
      el('svg:line', { x1: L, x2: W - R, y1: y(v), y2: y(v), class: 'grid' }, svg);
      el('svg:text', { x: L - 4, y: y(v) + 3, class: 'ylabel' }, svg, num(v));
    }
    for (let s = 0; s <= WINDOW_S; s += 60) {
      const label = s === WINDOW_S ? 'now' : '−' + (WINDOW_S - s) / 60 + ' min';
      el('svg:text', { x: x(tStart + s), y: H - 5, class: 'xlabel' }, svg, label);
    }
    for (const ln of lines) {
      let d = '', pen = false, n = 0, last = null;
      for (const pt of ln.pts) {
        if (!pt) { pen = false; continue; }
        d += (pen ? 'L' : 'M') + x(pt[0]).toFixed(1) + ' ' + y(pt[1]).toFixed(1);
        pen = true;
        n++;
        last = pt[1];
      }
      const attrs = {
        d: d || 'M0 0',
        stroke: color(ln.name),
        class: 'series ' + ln.kind,
        'data-points': n,
        'data-last': last == null ? '' : last.toPrecision(4),
      };
      if (ln.kind === 'value') attrs['data-path'] = ln.name;
      else attrs['data-min-of'] = ln.name;
      el('svg:path', attrs, svg);
    }
  }

  function table(id, head, rows) {
    const t = clear(document.getElementById(id));
    const tr = el('tr', {}, t);
    head.forEach((h) => el('th', {}, tr, h));
    if (!rows.length) {
      el('td', { colspan: head.length, class: 'empty' }, el('tr', {}, t), 'none');
      return;
    }
    for (const r of rows) {
      const row = el('tr', {}, t);
      for (const c of r) {
        const td = el('td', {}, row);
        if (c instanceof Node) td.appendChild(c);
        else td.textContent = c;
      }
    }
  }

  function badge(state) {
    return el('span', { class: 'state state-' + (state || 'down') }, null, state || 'down');
  }

  function usage(used, max) {
    const f = document.createDocumentFragment();
    el('span', {}, f, used + ' / ' + max);
    const frac = max > 0 ? Math.min(1, used / max) : 0;
    const bar = el('span', { class: 'bar' + (frac > 0.9 ? ' hot' : '') }, f);
    el('span', { style: 'width:' + (frac * 100).toFixed(0) + '%' }, bar);
    return f;
  }

  function named(name) {
    const f = document.createDocumentFragment();
    el('span', { class: 'swatch', style: 'background:' + color(name) }, f);
    el('span', {}, f, name);
    return f;
  }

  // Paths of the status with their series names (a server's: SESSION/PATH).
  function statusPaths() {
    if (!status) return [];
    if (status.role === 'agent') return status.paths.map((p) => [p.name, p]);
    const out = [];
    for (const s of status.sessions) for (const p of s.paths) out.push([s.id.slice(0, 8) + '/' + p.name, p]);
    return out;
  }

  function renderTables() {
    if (!status) return;
    const agent = status.role === 'agent';
    document.getElementById('role').textContent = status.role;
    let summary = 'up ' + duration(status.uptime_s);
    if (agent) {
      summary += status.session
        ? ' · session ' + status.session.id + ' with ' + status.session.server + ' for ' +
          duration(status.session.age_s) + ' · ' + status.session.scheduler + ', ' + status.session.cc
        : ' · no session';
    } else {
      summary += ' · listening on ' + status.listen + ' · ' + status.sessions.length + ' session(s)';
    }
    document.getElementById('summary').textContent = summary;

    const last = samples.length ? samples[samples.length - 1].series : {};
    const rows = statusPaths().map(([name, p]) => {
      const now = last[name] || {};
      const cap = p.cap_bytes != null ? usage(bytes(p.cap_used_bytes || 0), bytes(p.cap_bytes)) : '–';
      return [
        named(name), badge(p.state), bps(now.rx_bps), bps(now.tx_bps),
        p.srtt_ms == null ? '–' : num(p.srtt_ms) + ' ms',
        p.min_rtt_ms == null ? '–' : num(p.min_rtt_ms) + ' ms',
        num(p.loss_rate * 100) + ' %', bytes(p.bytes_received), bytes(p.bytes_sent), cap,
        p.energy_j == null ? '–' : num(p.energy_j) + ' J',
      ];
    });
    table('paths', ['path', 'state', 'receiving', 'sending', 'srtt', 'min RTT', 'loss (session)',
      'received', 'sent', 'data cap', 'energy'], rows);

    const tot = clear(document.getElementById('totals'));
    const item = (label, v) => { const d = el('div', {}, tot); el('b', {}, d, v); el('div', { class: 'empty' }, d, label); };
    item('received', bytes(status.totals.bytes_received));
    item('sent', bytes(status.totals.bytes_sent));
    if (status.totals.energy_j != null) item('energy', num(status.totals.energy_j) + ' J');
    if (agent) {
      item('connections', String(status.streams.length));
      item('UDP flows', String(status.flows.length));
    } else {
      item('handshakes accepted', String(status.handshakes_accepted));
      item('handshakes refused', String(status.handshakes_refused));
    }

    document.getElementById('agent-only').hidden = !agent;
    document.getElementById('server-only').hidden = agent;
    if (agent) {
      const conns = status.streams.map((s) => [s.proxy, s.client, s.destination, bytes(s.bytes_up), bytes(s.bytes_down), duration(s.age_s)])
        .concat(status.flows.map((f) => ['udp ' + f.flow, f.client, f.destination, bytes(f.bytes_up), bytes(f.bytes_down), duration(f.age_s)]));
      table('conns', ['kind', 'client', 'destination', 'up', 'down', 'age'], conns);
    } else {
      const l = status.limits;
      table('limits', ['limit', 'use'], [
        ['sessions', usage(l.sessions.used, l.sessions.max)],
        ['streams per session (busiest)', usage(l.streams_per_session.used, l.streams_per_session.max)],
        ['buffered bytes per session (fullest)', usage(l.buffered_bytes_per_session.used, l.buffered_bytes_per_session.max)],
        ['UDP flows per session (busiest)', usage(l.udp_flows_per_session.used, l.udp_flows_per_session.max)],
      ]);
      table('sessions', ['session', 'agent key', 'age', 'paths', 'streams', 'received', 'sent'],
        status.sessions.map((s) => [s.id, s.agent_key_fingerprint, duration(s.age_s), String(s.paths.length),
          String(s.open_streams), bytes(s.totals.bytes_received), bytes(s.totals.bytes_sent)]));
    }
  }

  function render() {
    const names = seriesNames();
    const legend = clear(document.getElementById('legend'));
    names.forEach((n) => el('span', {}, legend).appendChild(named(n)));
    CHARTS.forEach((c) => drawChart(c, names));
    renderTables();
    if (samples.length) document.body.setAttribute('data-updated', samples[samples.length - 1].t.toFixed(1));
  }

  function live(on) {
    const e = document.getElementById('live');
    e.className = on ? 'on' : 'off';
    e.textContent = on ? 'live' : 'reconnecting…';
  }

  const token = new URLSearchParams(location.search).get('token');
  const events = new EventSource('events' + (token ? '?token=' + encodeURIComponent(token) : ''));
  events.addEventListener('history', (e) => {
    const h = JSON.parse(e.data);
    samples = h.samples;
    status = h.status;
    live(true);
    render();
  });
  events.addEventListener('tick', (e) => {
    const x = JSON.parse(e.data);
    samples.push(x.sample);
    const cut = x.sample.t - WINDOW_S - 1;
    while (samples.length && (samples[0].t < cut || samples[0].t > x.sample.t)) samples.shift();
    status = x.status;
    live(true);
    render();
  });
  events.onerror = () => live(false);
})();
