// SpotMonitor dashboard: the panels drawn by hand: the fleet timeline and the
// cost per epoch (SVG), and the utilization heatmap (canvas). The fleet and
// the heatmap use the time domain every time panel shares and a label column
// of width LABEL_W.
(function () {
  'use strict';
  const D = window.SpotDash;
  const C = D.colors;
  const LABEL_W = 190;
  const RIGHT_PAD = 16;
  const AXIS_H = 24;

  function widthOf(body) { return Math.max(320, Math.floor(body.clientWidth || 800)); }

  // Maps simulated seconds onto [LABEL_W, width - RIGHT_PAD].
  function timeScale(ctx, width) {
    const span = width - LABEL_W - RIGHT_PAD;
    return (t) => LABEL_W + (Math.max(0, Math.min(t, ctx.domainS)) / ctx.domainS) * span;
  }

  // Grid lines and hour labels under `top`..`bottom`.
  function timeAxis(g, ctx, width, top, bottom) {
    const x = timeScale(ctx, width);
    const domainH = ctx.domainS / 3600;
    for (const h of D.timeTicks(domainH, width - LABEL_W - RIGHT_PAD)) {
      const px = Math.round(x(h * 3600)) + 0.5;
      g.append(D.svg('line', { class: 'gridline', x1: px, x2: px, y1: top, y2: bottom }));
      g.append(D.svg('text', { x: px, y: bottom + 15, 'text-anchor': 'middle', text: D.tickLabel(h) }));
    }
    g.append(D.svg('line', { class: 'axisline', x1: LABEL_W, x2: width - RIGHT_PAD, y1: bottom + 0.5, y2: bottom + 0.5 }));
  }

  function vline(g, cls, px, top, bottom, label) {
    g.append(D.svg('line', { class: cls, x1: px, x2: px, y1: top - 4, y2: bottom }));
    if (label) {
      g.append(D.svg('text', { class: cls === 'deadline-line' ? 'deadline-text' : '', x: px + 4, y: top + 6, text: label }));
    }
  }

  // --- fleet: one row per instance, launch to end (or now) ---
  const ROW_H = 28;
  const BAR_H = 14;

  D.panels.fleet = function (d, ctx) {
    const body = D.section('fleet').querySelector('.body');
    const insts = d.instances.slice().sort((a, b) => (a.launched_s || 0) - (b.launched_s || 0));
    if (!insts.length) {
      D.showEmpty(body, 'No instances launched yet');
      return 0;
    }
    const width = widthOf(body);
    const top = 16;
    const height = top + insts.length * ROW_H + AXIS_H;
    const bottom = top + insts.length * ROW_H;
    const x = timeScale(ctx, width);
    const now = D.num(d.job.now_s) !== null ? d.job.now_s : ctx.domainS;
    const root = D.svg('svg', { width: width, height: height, viewBox: '0 0 ' + width + ' ' + height, role: 'img' });
    const grid = D.svg('g');
    root.append(grid);
    timeAxis(grid, ctx, width, top, bottom);

    const rowOf = new Map();
    let points = 0;
    insts.forEach((inst, i) => {
      const y = top + i * ROW_H;
      rowOf.set(inst.id, y);
      const g = D.svg('g', { class: 'fleet-row', 'data-instance': inst.id });
      if (i % 2 === 0) g.append(D.svg('rect', { class: 'stripe', x: 0, y: y, width: width, height: ROW_H, 'fill-opacity': 0.35 }));
      g.append(D.svg('text', { class: 'label', x: 4, y: y + 13, text: D.shortId(inst.id) }));
      g.append(D.svg('text', { class: 'sublabel', x: 4, y: y + 25, text: inst.spot || inst.pool === 'on-demand' ? inst.pool : inst.pool + ' \u00b7 on-demand' }));
      const open = inst.ended_s === null;
      const end = open ? Math.max(now, inst.launched_s) : inst.ended_s;
      const x0 = x(inst.launched_s);
      const x1 = Math.max(x(end), x0 + 2);
      const cls = (inst.spot ? 'bar-spot' : 'bar-od') + (open ? ' bar-open' : '');
      const bar = D.svg('rect', { class: cls, x: x0, y: y + (ROW_H - BAR_H) / 2, width: x1 - x0, height: BAR_H, rx: 3 });
      bar.append(D.tooltip(describe(inst, d)));
      g.append(bar);
      points++;
      if (inst.end_reason && !open) {
        const tag = D.svg('text', { class: 'end-tag', x: x1 + 5, y: y + ROW_H / 2 + 4, text: inst.end_reason });
        if (inst.end_reason === 'preempted' || inst.end_reason === 'failed') tag.setAttribute('style', 'fill:' + C.red);
        if (x1 + 70 < width - RIGHT_PAD) g.append(tag);
      }
      root.append(g);
    });

    points += drawFleetMarks(root, d, x, rowOf);
    if (d.live) vline(root, 'now-line', Math.round(x(now)) + 0.5, top, bottom, '');
    const dl = D.num(d.job.deadline_hours);
    if (dl) vline(root, 'deadline-line', Math.round(x(dl * 3600)) + 0.5, top, bottom, 'deadline');
    D.clear(body);
    body.append(root);
    return points;
  };

  function describe(inst, d) {
    const lines = [inst.id + ' \u00b7 ' + inst.pool + ' \u00b7 ' + (inst.spot ? 'spot' : 'on-demand')];
    lines.push('launched ' + D.hours(inst.launched_s) + wallOf(d, inst.launched_s));
    if (inst.ended_s === null) lines.push('running');
    else lines.push('ended ' + D.hours(inst.ended_s) + wallOf(d, inst.ended_s) + (inst.end_reason ? ': ' + inst.end_reason : ''));
    if (inst.ended_s !== null) lines.push('ran ' + D.hours(inst.ended_s - inst.launched_s));
    return lines.join('\n');
  }
  function wallOf(d, t) {
    const w = D.marketTime(d.job, t);
    return w ? ' (' + w + ')' : '';
  }

  // Notices as amber diamonds, preemptions as red bars, on their instance's row.
  function drawFleetMarks(root, d, x, rowOf) {
    let n = 0;
    const preempted = new Set();
    const marks = D.svg('g', { class: 'marks' });
    for (const e of d.events) {
      const y = rowOf.get(e.instance);
      if (y === undefined || e.t_s === null) continue;
      const cy = y + ROW_H / 2;
      const px = x(e.t_s);
      const title = D.tooltip(e.kind + ' at ' + D.hours(e.t_s) + wallOf(d, e.t_s) + '\n' + e.instance + (e.detail ? '\n' + e.detail : ''));
      if (e.kind === 'notice') {
        const s = 5.5;
        const m = D.svg('path', { class: 'mark-notice', d: `M${px} ${cy - s}L${px + s} ${cy}L${px} ${cy + s}L${px - s} ${cy}Z` }, [title]);
        marks.append(m);
        n++;
      } else if (e.kind === 'preempt' || e.kind === 'preempted') {
        marks.append(D.svg('rect', { class: 'mark-preempt', x: px - 1.5, y: cy - 10, width: 3, height: 20, rx: 1 }, [title]));
        preempted.add(e.instance);
        n++;
      }
    }
    for (const inst of d.instances) {
      if (inst.end_reason !== 'preempted' || inst.ended_s === null || preempted.has(inst.id)) continue;
      const cy = rowOf.get(inst.id) + ROW_H / 2;
      marks.append(D.svg('rect', { class: 'mark-preempt', x: x(inst.ended_s) - 1.5, y: cy - 10, width: 3, height: 20, rx: 1 },
        [D.tooltip('preempted at ' + D.hours(inst.ended_s) + '\n' + inst.id)]));
      n++;
    }
    root.append(marks);
    return n;
  }

  // --- epochs: cost per epoch as bars, test accuracy as a line ---
  D.panels.epochs = function (d, ctx) {
    const body = D.section('epochs').querySelector('.body');
    const eps = d.epochs;
    if (!eps.length) {
      D.showEmpty(body, 'No epoch started yet');
      return 0;
    }
    const width = widthOf(body);
    const height = 240;
    const left = 56;
    const right = 52;
    const top = 22;
    const bottom = height - 44;
    const usdStep = D.niceCeil((Math.max(D.maxOf(eps.map((e) => e.usd), 0), 0.01) * 1.1) / 4);
    const maxUsd = usdStep * 4;
    const band = (width - left - right) / eps.length;
    const barW = Math.min(96, band * 0.62);
    const y = (v) => bottom - (v / maxUsd) * (bottom - top);
    const accs = eps.map((e) => e.test_accuracy).filter((v) => v !== null);
    // The accuracy axis spans 1 - accSpan .. 100% in 4 round steps.
    const accSpan = accs.length ? [0.2, 0.4, 0.8, 1].find((s) => 1 - s <= Math.min(...accs) - 0.02) || 1 : 1;
    const accLo = 1 - accSpan;
    const ya = (v) => bottom - ((v - accLo) / (1 - accLo || 1)) * (bottom - top);
    const root = D.svg('svg', { width: width, height: height, viewBox: '0 0 ' + width + ' ' + height, role: 'img' });

    for (let i = 0; i <= 4; i++) {
      const v = usdStep * i;
      const py = Math.round(y(v)) + 0.5;
      root.append(D.svg('line', { class: 'gridline', x1: left, x2: width - right, y1: py, y2: py }));
      root.append(D.svg('text', { x: left - 8, y: py + 4, 'text-anchor': 'end', text: D.usd(v) }));
      if (accs.length) {
        const a = accLo + ((1 - accLo) / 4) * i;
        root.append(D.svg('text', { x: width - right + 8, y: py + 4, style: 'fill:' + C.green, text: D.pct(a, 0) }));
      }
    }
    const accPts = [];
    eps.forEach((e, i) => {
      const cx = left + band * (i + 0.5);
      const open = e.end_s === null;
      const usd = e.usd === null ? 0 : e.usd;
      const h = Math.max(1, bottom - y(usd));
      const dur = (open ? D.num(d.job.now_s) : e.end_s) - e.start_s;
      const title = 'Epoch ' + e.epoch + (open ? ' (running)' : '') + '\n' + D.hours(e.start_s) + ' \u2192 ' +
        (open ? 'now' : D.hours(e.end_s)) + (isFinite(dur) ? ' (' + D.hours(dur) + ')' : '') + '\ncost ' + D.usd(e.usd) +
        (e.test_accuracy !== null ? '\ntest accuracy ' + D.pct(e.test_accuracy, 2) : '');
      root.append(D.svg('rect', { class: 'epoch-bar' + (open ? ' open' : ''), x: cx - barW / 2, y: bottom - h, width: barW, height: h, rx: 3 },
        [D.tooltip(title)]));
      root.append(D.svg('text', { class: 'epoch-value', x: cx, y: bottom - h - 6, 'text-anchor': 'middle', text: D.usd(e.usd) + (open ? ' so far' : '') }));
      root.append(D.svg('text', { x: cx, y: bottom + 16, 'text-anchor': 'middle', text: 'epoch ' + e.epoch + (isFinite(dur) ? ' \u00b7 ' + D.hours(dur) : '') }));
      root.append(D.svg('text', { class: 'epoch-acc', x: cx, y: bottom + 32, 'text-anchor': 'middle',
        text: e.test_accuracy !== null ? 'acc ' + D.pct(e.test_accuracy, 1) : open ? 'running' : 'no eval' }));
      if (e.test_accuracy !== null) accPts.push([cx, ya(e.test_accuracy), title]);
    });
    if (accPts.length > 1) root.append(D.svg('path', { class: 'acc-line', d: 'M' + accPts.map((p) => p[0] + ' ' + p[1]).join('L') }));
    for (const p of accPts) root.append(D.svg('circle', { class: 'acc-dot', cx: p[0], cy: p[1], r: 4.5 }, [D.tooltip(p[2])]));
    D.clear(body);
    body.append(root);
    return eps.length;
  };

  // --- utilization: worker x time heatmap ---
  const HEAT_ROW = 22;
  const STOPS = [[0, [38, 49, 79]], [0.25, [44, 95, 138]], [0.5, [33, 145, 140]], [0.75, [94, 201, 98]], [1, [253, 231, 37]]];
  function heatColor(v) {
    v = Math.max(0, Math.min(1, v));
    for (let i = 1; i < STOPS.length; i++) {
      if (v <= STOPS[i][0]) {
        const [a, ca] = STOPS[i - 1];
        const [b, cb] = STOPS[i];
        const f = (v - a) / (b - a);
        return 'rgb(' + ca.map((c, k) => Math.round(c + (cb[k] - c) * f)).join(',') + ')';
      }
    }
    return 'rgb(253,231,37)';
  }

  const heat = { canvas: null, tip: null, cells: [], d: null };

  D.panels.utilization = function (d, ctx) {
    const body = D.section('utilization').querySelector('.body');
    const u = d.utilization;
    const workers = u.workers;
    if (!workers.length || !u.t_s.length) {
      heat.canvas = null;
      D.showEmpty(body, 'No utilization data yet');
      return 0;
    }
    if (!heat.canvas || !body.contains(heat.canvas)) {
      D.clear(body);
      const wrap = D.el('div', { class: 'heat' });
      heat.canvas = D.el('canvas');
      heat.tip = D.el('div', { class: 'tip', hidden: 'hidden' });
      wrap.append(heat.canvas, heat.tip);
      body.append(wrap);
      heat.canvas.addEventListener('mousemove', onHeatMove);
      heat.canvas.addEventListener('mouseleave', () => { heat.tip.hidden = true; });
    }
    const width = widthOf(body);
    const top = 6;
    const bottom = top + workers.length * HEAT_ROW;
    const height = bottom + AXIS_H;
    const ratio = window.devicePixelRatio || 1;
    const cv = heat.canvas;
    cv.width = Math.round(width * ratio);
    cv.height = Math.round(height * ratio);
    cv.style.height = height + 'px';
    const g = cv.getContext('2d');
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    g.clearRect(0, 0, width, height);
    const x = timeScale(ctx, width);
    const bucket = u.bucket_s || (u.t_s.length > 1 ? u.t_s[1] - u.t_s[0] : 60);
    heat.cells = [];
    heat.d = d;
    let points = 0;

    g.font = '11px system-ui, sans-serif';
    for (const h of D.timeTicks(ctx.domainS / 3600, width - LABEL_W - RIGHT_PAD)) {
      const px = Math.round(x(h * 3600)) + 0.5;
      g.fillStyle = C.grid;
      g.fillRect(px - 0.5, top, 1, bottom - top);
      g.fillStyle = C.muted;
      g.textAlign = 'center';
      g.fillText(D.tickLabel(h), px, bottom + 16);
    }
    workers.forEach((w, r) => {
      const y = top + r * HEAT_ROW;
      g.textAlign = 'left';
      g.fillStyle = C.text;
      g.font = '12px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace';
      g.fillText(D.shortId(w.id), 4, y + 15);
      g.font = '11px system-ui, sans-serif';
      g.fillStyle = C.muted;
      g.textAlign = 'right';
      g.fillText(w.pool, LABEL_W - 10, y + 15);
      g.fillStyle = 'rgba(255,255,255,0.025)';
      g.fillRect(LABEL_W, y + 1, width - LABEL_W - RIGHT_PAD, HEAT_ROW - 3);
      for (let i = 0; i < u.t_s.length; i++) {
        const v = w.busy[i];
        const t = u.t_s[i];
        if (v === null || v === undefined || t === null) continue;
        const x0 = x(t);
        const x1 = x(t + bucket);
        g.fillStyle = heatColor(v);
        g.fillRect(x0, y + 1, Math.max(1, x1 - x0 - 0.5), HEAT_ROW - 3);
        heat.cells.push([x0, x1, y, w, t, v]);
        points++;
      }
    });
    return points;
  };

  function onHeatMove(ev) {
    const rect = heat.canvas.getBoundingClientRect();
    const mx = ev.clientX - rect.left;
    const my = ev.clientY - rect.top;
    const cell = heat.cells.find((c) => mx >= c[0] && mx < c[1] && my >= c[2] && my < c[2] + HEAT_ROW);
    if (!cell) { heat.tip.hidden = true; return; }
    const [, , , w, t, v] = cell;
    const bucket = heat.d.utilization.bucket_s || 0;
    heat.tip.textContent = D.shortId(w.id) + ' \u00b7 ' + w.pool + ' \u00b7 ' + D.hours(t) + '\u2013' + D.hours(t + bucket) + ': ' + D.pct(v, 0) + ' busy';
    heat.tip.hidden = false;
    heat.tip.style.left = Math.min(mx + 12, rect.width - heat.tip.offsetWidth - 4) + 'px';
    heat.tip.style.top = my + 14 + 'px';
  }
})();
