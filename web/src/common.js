// SpotMonitor dashboard: shared helpers (window.SpotDash). Loaded after uPlot
// and before charts.js, panels.js and dashboard.js, which add to SpotDash.
(function () {
  'use strict';

  const SVG_NS = 'http://www.w3.org/2000/svg';

  // Mirrors the CSS variables of dashboard.css.
  const colors = {
    text: '#e6edf3', muted: '#8b97a6', faint: '#5c6773', grid: '#232b36', border: '#2a323d',
    panel: '#151b23', blue: '#58a6ff', teal: '#2dd4bf', green: '#3fb950', amber: '#f0b429',
    red: '#f85149', purple: '#b58cff', orange: '#fb8f44',
  };
  const poolColors = ['#2dd4bf', '#58a6ff', '#f0b429', '#fb8f44', '#ff7eb6', '#a3e635', '#b58cff'];

  function poolColor(i) { return poolColors[i % poolColors.length]; }

  // --- values from untrusted JSON ---
  function num(x) { return typeof x === 'number' && isFinite(x) ? x : null; }
  function arr(x) { return Array.isArray(x) ? x : []; }
  function obj(x) { return x !== null && typeof x === 'object' && !Array.isArray(x) ? x : {}; }
  function str(x) { return typeof x === 'string' ? x : x == null ? '' : String(x); }
  // Numbers (null for anything else), so charts never see strings or NaN.
  function nums(x) { return arr(x).map(num); }
  function last(a) { return a.length ? a[a.length - 1] : null; }
  function lastNum(a) {
    for (let i = a.length - 1; i >= 0; i--) if (num(a[i]) !== null) return a[i];
    return null;
  }
  function countNums(a) {
    let n = 0;
    for (let i = 0; i < a.length; i++) if (a[i] !== null && a[i] !== undefined) n++;
    return n;
  }
  function maxOf(a, init) {
    let m = init;
    for (let i = 0; i < a.length; i++) if (a[i] !== null && a[i] > m) m = a[i];
    return m;
  }

  // --- formatting ---
  function fixed(x, d) { return num(x) === null ? '\u2013' : x.toFixed(d); }
  function usd(x) {
    if (num(x) === null) return '\u2013';
    const a = Math.abs(x);
    return (x < 0 ? '-$' : '$') + (a >= 1000 ? Math.round(a).toLocaleString('en-US') : a.toFixed(2));
  }
  function pct(x, d) { return num(x) === null ? '\u2013' : (x * 100).toFixed(d === undefined ? 1 : d) + '%'; }
  function int(x) { return num(x) === null ? '\u2013' : Math.round(x).toLocaleString('en-US'); }
  function hours(s) {
    if (num(s) === null) return '\u2013';
    const h = s / 3600;
    return (h >= 100 ? h.toFixed(0) : h >= 10 ? h.toFixed(1) : h.toFixed(2)) + ' h';
  }
  function small(v) {
    if (v === null || v === undefined) return '\u2013';
    if (v === 0) return '0';
    const a = Math.abs(v);
    return a >= 1e-4 && a < 1e4 ? String(+v.toPrecision(3)) : v.toExponential(1);
  }
  // A round number >= x: 1, 2, 2.5 or 5 times a power of ten.
  function niceCeil(x) {
    if (!(x > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(x)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= x - 1e-12) return m * p;
    return 10 * p;
  }
  // Wall time of the replayed market at simulated second t_s ("" if unknown).
  function marketTime(job, t_s) {
    const start = num(job.market_start_unix_s);
    if (!start || num(t_s) === null) return '';
    const d = new Date((start + t_s) * 1000);
    const p = (n) => String(n).padStart(2, '0');
    const month = d.toLocaleString('en-US', { month: 'short', timeZone: 'UTC' });
    return month + ' ' + d.getUTCDate() + ' ' + p(d.getUTCHours()) + ':' + p(d.getUTCMinutes()) + ' UTC';
  }
  function shortId(id) {
    id = str(id);
    return id.length > 15 ? id.slice(0, 8) + '\u2026' + id.slice(-5) : id;
  }

  // --- DOM ---
  function el(tag, attrs, children) {
    const e = document.createElement(tag);
    setAttrs(e, attrs);
    for (const c of arr(children)) if (c !== null && c !== undefined) e.append(c);
    return e;
  }
  function svg(tag, attrs, children) {
    const e = document.createElementNS(SVG_NS, tag);
    setAttrs(e, attrs);
    for (const c of arr(children)) if (c !== null && c !== undefined) e.append(c);
    return e;
  }
  function setAttrs(e, attrs) {
    for (const k in attrs || {}) {
      const v = attrs[k];
      if (v === null || v === undefined || v === false) continue;
      if (k === 'text') e.textContent = v;
      else e.setAttribute(k, v);
    }
  }
  // An SVG <title>: the browser shows it as the hover tooltip of its parent.
  function tooltip(text) { return svg('title', { text: text }); }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }
  function section(id) { return document.getElementById(id); }
  function setPoints(id, n) { section(id).dataset.points = String(n); }
  // Replaces the content of `body` with a short grey note.
  function showEmpty(body, text) {
    clear(body);
    body.append(el('div', { class: 'empty', text: text }));
  }

  // Tick values in hours for a time axis of `domainH` hours drawn `px` wide.
  function timeTicks(domainH, px) {
    const steps = [1 / 12, 0.25, 0.5, 1, 2, 3, 4, 6, 12, 24, 48, 96, 168];
    const want = Math.max(2, Math.floor(px / 80));
    let step = steps[steps.length - 1];
    for (const s of steps) {
      if (domainH / s <= want) { step = s; break; }
    }
    const ticks = [];
    for (let v = 0; v <= domainH + 1e-9; v += step) ticks.push(+v.toFixed(4));
    return ticks;
  }
  function tickLabel(h) { return (Number.isInteger(h) ? h : +h.toFixed(2)) + ' h'; }

  // The simulated-time domain, in seconds, that every time panel shares so
  // that they line up: the start to the latest of now, the deadline and data.
  function timeDomain(d) {
    let end = Math.max(num(d.job.now_s) || 0, (num(d.job.deadline_hours) || 0) * 3600);
    const lastOf = (a) => { const v = lastNum(a); if (v !== null && v > end) end = v; };
    for (const p of d.pools) lastOf(p.t_s);
    lastOf(d.progress.t_s);
    lastOf(d.cost.t_s);
    for (const i of d.instances) {
      if (i.ended_s !== null && i.ended_s > end) end = i.ended_s;
    }
    const u = d.utilization;
    if (u.t_s.length) end = Math.max(end, lastNum(u.t_s) + (u.bucket_s || 0));
    return end > 0 ? end : 3600;
  }

  window.SpotDash = {
    colors, poolColor, num, arr, obj, str, nums, last, lastNum, countNums, maxOf,
    fixed, usd, pct, int, hours, small, niceCeil, marketTime, shortId,
    el, svg, tooltip, clear, section, setPoints, showEmpty, timeTicks, tickLabel, timeDomain,
    panels: {},  // id -> function(data, ctx) returning the number of points drawn
  };
})();
