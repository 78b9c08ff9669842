// SpotMonitor dashboard: the line charts, drawn with uPlot. Each chart keeps
// its uPlot instance across updates and only calls setData, unless the set of
// series changed (e.g. a new pool), when it is built again.
(function () {
  'use strict';
  const D = window.SpotDash;
  const C = D.colors;
  const dpr = () => window.devicePixelRatio || 1;

  // --- a chart that survives updates ---
  class Chart {
    // `host` is the element the plot goes into; `height` its plot height.
    constructor(host, height) {
      this.host = host;
      this.height = height;
      this.plot = null;
      this.key = '';
      this.marks = [];  // vertical lines: {x, color, dash, label}
    }
    // `key` names the series layout; `makeOpts` builds uPlot options for it.
    update(key, makeOpts, data) {
      if (!data[0].length) {
        this.destroy();
        D.showEmpty(this.host, 'No data yet');
        return;
      }
      if (this.plot && key === this.key) {
        this.plot.setData(data);
        return;
      }
      this.destroy();
      D.clear(this.host);
      this.key = key;
      const opts = makeOpts();
      opts.width = this.width();
      opts.height = this.height;
      opts.hooks = opts.hooks || {};
      opts.hooks.draw = [(u) => { drawMarks(u, this.marks); showLatest(u); }];
      opts.hooks.setCursor = [showLatest];
      this.plot = new uPlot(opts, data, this.host);
    }
    width() { return Math.max(200, Math.floor(this.host.clientWidth || 600)); }
    resize() {
      if (this.plot) this.plot.setSize({ width: this.width(), height: this.height });
    }
    destroy() {
      if (this.plot) this.plot.destroy();
      this.plot = null;
      this.key = '';
    }
  }

  // While the cursor is off the plot, the legend shows the latest values
  // rather than blanks.
  function showLatest(u) {
    if (u.cursor.left >= 0) return;
    const ys = u.data[1] || [];
    let i = ys.length - 1;
    while (i > 0 && (ys[i] === null || ys[i] === undefined)) i--;
    if (i >= 0) u.setLegend({ idx: i }, false);
  }

  function drawMarks(u, marks) {
    const ctx = u.ctx;
    const { left, top, width, height } = u.bbox;
    let lastLabelX = -Infinity;
    let row = 0;
    for (const m of marks) {
      if (m.x === null || m.x === undefined) continue;
      const x = Math.round(u.valToPos(m.x, 'x', true)) + 0.5;
      if (x < left - 1 || x > left + width + 1) continue;
      ctx.save();
      ctx.strokeStyle = m.color;
      ctx.lineWidth = dpr();
      ctx.setLineDash((m.dash || []).map((v) => v * dpr()));
      ctx.beginPath();
      ctx.moveTo(x, top);
      ctx.lineTo(x, top + height);
      ctx.stroke();
      if (m.label) {
        ctx.fillStyle = m.color;
        ctx.font = 11 * dpr() + 'px system-ui, sans-serif';
        const w = ctx.measureText(m.label).width;
        const right = x + 4 * dpr() + w < left + width;
        ctx.textAlign = right ? 'left' : 'right';
        // Labels of lines close together go one under the other.
        row = Math.abs(x - lastLabelX) < w + 12 * dpr() ? row + 1 : 0;
        lastLabelX = x;
        ctx.fillText(m.label, right ? x + 4 * dpr() : x - 4 * dpr(), top + (12 + 14 * row) * dpr());
      }
      ctx.restore();
    }
  }

  // --- options shared by every chart ---
  function axis(extra) {
    return Object.assign({
      stroke: C.muted,
      font: '11px system-ui, sans-serif',
      labelFont: '11px system-ui, sans-serif',
      grid: { stroke: C.grid, width: 1 },
      ticks: { stroke: C.grid, width: 1, size: 4 },
    }, extra);
  }

  // Options of a chart over simulated time in hours, shared domain, synced cursor.
  // `ctx` lives as long as the page (dashboard.js updates it before each
  // render), so the closures here always see the latest domain and data.
  function timeOpts(ctx, series, axes, extra) {
    return Object.assign({
      scales: { x: { time: false, range: () => [0, ctx.domainS / 3600] } },
      cursor: { sync: { key: 'spot-time' }, points: { size: 6 } },
      legend: { live: true },
      series: [{
        label: 'time',
        value: (u, v) => (v == null ? '\u2013' : v.toFixed(2) + ' h' + wall(ctx.data, v)),
      }].concat(series),
      axes: [axis({ values: (u, vals) => vals.map((v) => +v.toFixed(2) + ' h'), space: 70, size: 30 })].concat(axes),
      padding: [8, 12, 0, 0],
    }, extra);
  }
  function wall(d, h) {
    const w = D.marketTime(d.job, h * 3600);
    return w ? ' (' + w + ')' : '';
  }

  function line(label, color, extra) {
    return Object.assign({ label: label, stroke: color, width: 1.75, spanGaps: false }, extra);
  }
  const stepped = () => uPlot.paths.stepped({ align: 1 });
  const toHours = (ts) => ts.map((t) => (t === null ? null : t / 3600));

  // Aligns series that may have different x values onto one x array.
  function align(tables) {
    if (tables.length === 0) return [[]];
    const x0 = tables[0][0];
    const same = tables.every((t) => t[0].length === x0.length && t[0].every((v, i) => v === x0[i]));
    if (same) return [x0].concat(tables.map((t) => t[1]));
    const clean = tables.map((t) => {
      const idx = [...t[0].keys()].filter((i) => t[0][i] !== null);
      idx.sort((a, b) => t[0][a] - t[0][b]);
      return [idx.map((i) => t[0][i]), idx.map((i) => (t[1][i] === undefined ? null : t[1][i]))];
    });
    return uPlot.join(clean);
  }
  function padTo(a, n) {
    const out = a.slice(0, n);
    while (out.length < n) out.push(null);
    return out;
  }

  const charts = {};
  function chart(id, sel, height) {
    const k = id + sel;
    if (!charts[k]) charts[k] = new Chart(D.section(id).querySelector(sel), height);
    return charts[k];
  }
  function timeMarks(d) {
    const m = [];
    const now = D.num(d.job.now_s);
    if (now !== null && d.live) m.push({ x: now / 3600, color: C.text, dash: [3, 3], label: 'now' });
    const dl = D.num(d.job.deadline_hours);
    if (dl) m.push({ x: dl, color: C.red, dash: [6, 4], label: 'deadline' });
    return m;
  }

  // --- market: price per pool vs on-demand, and capacity per pool ---
  D.panels.market = function (d, ctx) {
    const pools = d.pools;
    const price = align(pools.map((p) => [toHours(p.t_s), padTo(p.price, p.t_s.length)]));
    const cap = align(pools.map((p) => [toHours(p.t_s), padTo(p.capacity, p.t_s.length)]));
    const od = D.num(d.job.ondemand_price);
    const names = pools.map((p) => p.name).join('|');
    let points = 0;
    for (let i = 1; i < price.length; i++) points += D.countNums(price[i]);
    for (let i = 1; i < cap.length; i++) points += D.countNums(cap[i]);
    const anyPrice = points > 0 && price.slice(1).some((s) => D.countNums(s) > 0);
    if (od !== null && anyPrice) price.push(price[0].map(() => od));

    const priceChart = chart('market', '.chart-price', 200);
    priceChart.marks = timeMarks(d);
    priceChart.update('p:' + names + ':' + (od !== null && anyPrice), () => timeOpts(ctx,
      pools.map((p, i) => line(p.name, D.poolColor(i), {
        paths: stepped(), value: (u, v) => (v == null ? '\u2013' : '$' + v.toFixed(3) + '/h'),
      })).concat(od !== null && anyPrice ? [line('on-demand', C.purple, {
        dash: [6, 4], width: 1.5, value: (u, v) => (v == null ? '\u2013' : '$' + v.toFixed(2) + '/h'),
      })] : []),
      [axis({ values: (u, vals) => vals.map((v) => '$' + v.toFixed(2)), size: 56 })],
      { scales: { x: { time: false, range: () => [0, ctx.domainS / 3600] }, y: { range: (u, lo, hi) => [0, Math.max(hi * 1.08, 0.1)] } } }),
    anyPrice ? price : [[]]);

    const capChart = chart('market', '.chart-capacity', 110);
    capChart.marks = timeMarks(d);
    const anyCap = cap.slice(1).some((s) => D.countNums(s) > 0);
    capChart.update('c:' + names, () => timeOpts(ctx,
      pools.map((p, i) => line(p.name + ' capacity', D.poolColor(i), {
        paths: stepped(), fill: D.poolColor(i) + '14', value: (u, v) => (v == null ? '\u2013' : String(v)),
      })),
      [axis({ values: (u, vals) => vals.map((v) => (Number.isInteger(v) ? String(v) : '')), size: 56, label: 'capacity' })],
      { scales: { x: { time: false, range: () => [0, ctx.domainS / 3600] }, y: { range: (u, lo, hi) => [0, Math.max(hi + 1, 2)] } } }),
    anyCap ? cap : [[]]);

    renderPoolTable(d);
    return points;
  };

  function renderPoolTable(d) {
    const tbody = D.section('market').querySelector('table.pools tbody');
    D.clear(tbody);
    d.pools.forEach((p, i) => {
      const risk = D.num(p.risk);
      const cls = risk === null ? '' : risk < 0.1 ? 'good' : risk < 0.25 ? 'warn' : 'bad';
      const price = D.lastNum(p.price);
      tbody.append(D.el('tr', {}, [
        D.el('td', {}, [D.el('i', { class: 'sw', style: 'background:' + D.poolColor(i) }), p.name]),
        D.el('td', { class: 'num', text: price === null ? '\u2013' : '$' + price.toFixed(3) }),
        D.el('td', { class: 'num', text: D.int(D.lastNum(p.capacity)) }),
        D.el('td', { class: 'num ' + cls, text: D.pct(risk, 0) }),
      ]));
    });
    const od = D.num(d.job.ondemand_price);
    if (od !== null) {
      tbody.append(D.el('tr', {}, [
        D.el('td', {}, [D.el('i', { class: 'sw', style: 'background:' + C.purple }), 'on-demand']),
        D.el('td', { class: 'num', text: '$' + od.toFixed(3) }),
        D.el('td', { class: 'num', text: '\u221e' }),
        D.el('td', { class: 'num good', text: '0%' }),
      ]));
    }
  }

  // --- progress: compute hours done, the straight line needed, the deadline ---
  D.panels.progress = function (d, ctx) {
    const x = toHours(d.progress.t_s);
    const done = padTo(d.progress.hours, x.length);
    const need = D.num(d.job.compute_hours);
    const dl = D.num(d.job.deadline_hours);
    const points = D.countNums(done);
    const plan = need !== null && dl ? (h) => (h <= dl ? (need * h) / dl : null) : null;
    if (plan && x.length) {
      if (x[0] > 0) { x.unshift(0); done.unshift(null); }
      let at = x.findIndex((v) => v >= dl);
      if (at < 0) at = x.length;
      if (x[at] !== dl) { x.splice(at, 0, dl); done.splice(at, 0, null); }
    }
    const data = [x, done];
    if (plan) data.push(x.map(plan));
    const c = chart('progress', '.chart', 240);
    c.marks = timeMarks(d);
    const hv = (u, v) => (v == null ? '\u2013' : v.toFixed(2) + ' h');
    c.update('p:' + !!plan, () => timeOpts(ctx,
      [line('done', C.blue, { fill: 'rgba(88,166,255,0.12)', spanGaps: true, width: 2, value: hv })]
        .concat(plan ? [line('needed', C.muted, { dash: [5, 5], width: 1.25, value: hv })] : []),
      [axis({ values: (u, vals) => vals.map((v) => +v.toFixed(2) + ' h'), size: 56 })],
      { scales: { x: { time: false, range: () => [0, ctx.domainS / 3600] }, y: { range: (u, lo, hi) => [0, Math.max(hi, D.num(ctx.data.job.compute_hours) || 0) * 1.05 || 1] } } }),
    points ? data : [[]]);
    return points;
  };

  // --- cost: cumulative spend vs on-demand (and the budget) ---
  D.panels.cost = function (d, ctx) {
    const x = toHours(d.cost.t_s);
    const spent = padTo(d.cost.usd, x.length);
    const od = padTo(d.cost.ondemand_usd, x.length);
    const budget = D.num(d.job.budget_usd);
    const points = D.countNums(spent) + D.countNums(od);
    const data = [x, spent, od];
    if (budget !== null) data.push(x.map(() => budget));
    const c = chart('cost', '.chart', 240);
    c.marks = timeMarks(d);
    const money = (u, v) => (v == null ? '\u2013' : D.usd(v));
    c.update('c:' + (budget !== null), () => timeOpts(ctx,
      [line('spot (actual)', C.teal, { fill: 'rgba(45,212,191,0.12)', width: 2, value: money }),
        line('on-demand', C.purple, { dash: [6, 4], width: 1.5, value: money })]
        .concat(budget !== null ? [line('budget', C.red, { dash: [2, 4], width: 1.25, value: money })] : []),
      [axis({ values: (u, vals) => vals.map((v) => '$' + (v >= 100 ? v.toFixed(0) : +v.toFixed(2))), size: 56 })],
      { scales: { x: { time: false, range: () => [0, ctx.domainS / 3600] }, y: { range: (u, lo, hi) => [0, Math.max(hi * 1.05, 1)] } } }),
    points ? data : [[]]);
    return points;
  };

  // Options of a chart over training steps.
  function stepOpts(series, axes, scales) {
    return {
      scales: Object.assign({ x: { time: false } }, scales),
      cursor: { points: { size: 6 } },
      series: [{ label: 'step', value: (u, v) => (v == null ? '\u2013' : D.int(v)) }].concat(series),
      axes: [axis({ values: (u, vals) => vals.map((v) => D.int(v)), space: 60, size: 30 })].concat(axes),
      padding: [8, 12, 0, 0],
    };
  }

  // --- loss and learning rate by step ---
  D.panels.loss = function (d) {
    const t = d.training;
    const x = t.step;
    const loss = padTo(t.loss, x.length);
    const lr = padTo(t.lr, x.length);
    const hasLr = D.countNums(lr) > 0;
    const points = D.countNums(loss) + D.countNums(lr);
    const data = hasLr ? [x, loss, lr] : [x, loss];
    const c = chart('loss', '.chart', 240);
    c.update('l:' + hasLr, () => stepOpts(
      [line('loss', C.orange, { width: 1.5, value: (u, v) => D.small(v) })]
        .concat(hasLr ? [line('learning rate', C.blue, { scale: 'lr', width: 1.25, value: (u, v) => D.small(v) })] : []),
      [axis({ values: (u, vals) => vals.map(D.small), size: 50 })]
        .concat(hasLr ? [axis({ scale: 'lr', side: 1, grid: { show: false }, values: (u, vals) => vals.map(D.small), size: 56 })] : []),
      { y: { range: (u, lo, hi) => [Math.min(0, lo), hi * 1.05 || 1] }, lr: { range: (u, lo, hi) => [0, hi * 1.1 || 1] } }),
    points ? data : [[]]);
    return points;
  };

  // --- test accuracy by step ---
  D.panels.accuracy = function (d) {
    const e = d.evaluation;
    const x = e.step;
    const acc = padTo(e.test_accuracy, x.length).map((v) => (v == null ? null : v * 100));
    const points = D.countNums(acc);
    const c = chart('accuracy', '.chart', 240);
    c.update('a', () => stepOpts(
      [line('test accuracy', C.green, { width: 2, points: { show: true, size: 6, fill: C.green },
        value: (u, v) => (v == null ? '\u2013' : v.toFixed(2) + '%') })],
      [axis({ values: (u, vals) => vals.map((v) => +v.toFixed(1) + '%'), size: 56 })],
      { y: { range: (u, lo, hi) => [Math.max(0, Math.floor(lo / 5) * 5 - 5), Math.min(100, Math.ceil(hi / 5) * 5 + 2)] } }),
    points ? [x, acc] : [[]]);
    return points;
  };

  D.resizeCharts = function () {
    for (const k in charts) charts[k].resize();
  };
})();
