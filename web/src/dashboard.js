// SpotMonitor dashboard: loads the data (polling in live mode, inlined in
// snapshot mode), fills the header and cards, and renders every panel.
//
// The data, version 1 (times are simulated seconds since the job's start):
//   live, generated_unix_s,
//   job {id, state, message, policy, instance_type, region, nodes, min_nodes,
//        compute_hours, deadline_hours, budget_usd|null, ondemand_price,
//        time_compression, now_s, market_start_unix_s},
//   summary {cost_usd, ondemand_usd, step, total_steps, epoch, epochs,
//            test_accuracy|null, preemptions, notices, launches, workers},
//   pools [{name, t_s[], price[], capacity[], risk|null}],
//   instances [{id, pool, spot, launched_s, ended_s|null, end_reason}],
//   events [{t_s, kind, instance, detail}],
//   progress {t_s[], hours[]}, cost {t_s[], usd[], ondemand_usd[]},
//   epochs [{epoch, start_s, end_s|null, usd, test_accuracy|null, ongoing}],
//   utilization {bucket_s, t_s[], workers [{id, pool, busy[] (null: not running)}]},
//   training {step[], loss[], lr[]}, evaluation {step[], test_accuracy[]}.
// Any part may be missing or empty.
//
// For tests and tools, after each render: every panel's <section> has
// data-points (points drawn), and <body> has data-updates (loads applied),
// data-step, data-state, data-live, data-polling and data-ready="1".
(function () {
  'use strict';
  const D = window.SpotDash;
  const PANELS = ['fleet', 'market', 'progress', 'cost', 'epochs', 'utilization', 'loss', 'accuracy'];
  const FETCH_TIMEOUT_MS = 15000;
  const MAX_BACKOFF = 8;

  const config = readJson('spot-config') || {};
  const pollMs = Math.max(50, D.num(config.poll_ms) || 1000);
  const body = document.body;
  // Lives as long as the page: charts keep closures over it.
  const ctx = { data: null, domainS: 3600 };
  let updates = 0;
  let failures = 0;

  function readJson(id) {
    const node = document.getElementById(id);
    return node ? JSON.parse(node.textContent) : null;
  }

  // --- normalizing untrusted data ---
  function normalize(raw) {
    const r = D.obj(raw);
    const job = D.obj(r.job);
    const cost = D.obj(r.cost);
    const util = D.obj(r.utilization);
    const train = D.obj(r.training);
    const evalu = D.obj(r.evaluation);
    const progress = D.obj(r.progress);
    return {
      live: r.live === true,
      generated_unix_s: D.num(r.generated_unix_s),
      job: job,
      summary: D.obj(r.summary),
      pools: D.arr(r.pools).map((p, i) => {
        p = D.obj(p);
        return { name: D.str(p.name) || 'pool ' + (i + 1), t_s: D.nums(p.t_s), price: D.nums(p.price),
          capacity: D.nums(p.capacity), risk: D.num(p.risk) };
      }),
      instances: D.arr(r.instances).map((x) => {
        x = D.obj(x);
        return { id: D.str(x.id), pool: D.str(x.pool), spot: x.spot !== false, launched_s: D.num(x.launched_s) || 0,
          ended_s: D.num(x.ended_s), end_reason: D.str(x.end_reason) };
      }),
      events: D.arr(r.events).map((e) => {
        e = D.obj(e);
        return { t_s: D.num(e.t_s), kind: D.str(e.kind), instance: D.str(e.instance), detail: D.str(e.detail) };
      }),
      progress: { t_s: D.nums(progress.t_s), hours: D.nums(progress.hours) },
      cost: { t_s: D.nums(cost.t_s), usd: D.nums(cost.usd), ondemand_usd: D.nums(cost.ondemand_usd) },
      epochs: D.arr(r.epochs).map((e, i) => {
        e = D.obj(e);
        // An epoch in progress has "ongoing": true or no end.
        return { epoch: D.num(e.epoch) === null ? i + 1 : e.epoch, start_s: D.num(e.start_s) || 0,
          end_s: e.ongoing === true ? null : D.num(e.end_s), usd: D.num(e.usd), test_accuracy: D.num(e.test_accuracy) };
      }),
      utilization: { bucket_s: D.num(util.bucket_s), t_s: D.nums(util.t_s),
        workers: D.arr(util.workers).map((w) => {
          w = D.obj(w);
          return { id: D.str(w.id), pool: D.str(w.pool), busy: D.nums(w.busy) };
        }) },
      training: { step: D.nums(train.step), loss: D.nums(train.loss), lr: D.nums(train.lr) },
      evaluation: { step: D.nums(evalu.step), test_accuracy: D.nums(evalu.test_accuracy) },
    };
  }

  // --- header, cards, footer ---
  function text(id, value) { document.getElementById(id).textContent = value; }
  function meta(parts) {
    const node = document.getElementById('job-meta');
    D.clear(node);
    for (const [label, value] of parts) {
      if (value === '' || value === null) continue;
      node.append(D.el('span', {}, [label ? label + ' ' : '', D.el('b', { text: value })]));
    }
  }

  function renderHeader(d) {
    const j = d.job;
    text('job-id', D.str(j.id) || config.title || 'SpotTrain job');
    const state = D.str(j.state) || 'UNKNOWN';
    const badge = document.getElementById('job-state');
    badge.textContent = state;
    badge.className = 'badge ' + state.toLowerCase();
    const nodes = D.num(j.nodes);
    const minNodes = D.num(j.min_nodes);
    meta([
      ['policy', D.str(j.policy)],
      ['', D.str(j.instance_type) + (nodes !== null ? ' \u00d7 ' + nodes : '') + (minNodes !== null && minNodes !== nodes ? ' (min ' + minNodes + ')' : '')],
      ['region', D.str(j.region)],
      ['simulated now', D.num(j.now_s) !== null ? D.hours(j.now_s) : ''],
      ['market', D.marketTime(j, 0)],
      ['time compression', D.num(j.time_compression) ? j.time_compression + '\u00d7' : ''],
    ]);
    const msg = document.getElementById('job-message');
    msg.textContent = D.str(j.message);
    msg.hidden = !msg.textContent;
    const live = document.getElementById('live');
    const polling = !!config.data_url && d.live;
    live.className = 'live' + (polling ? ' on' : '');
    live.textContent = config.data_url ? (d.live ? 'live' : 'final') : 'snapshot';
    live.title = polling ? 'refreshing every ' + (pollMs / 1000).toFixed(1) + ' s' : '';
    const gen = d.generated_unix_s;
    text('updated', (gen ? 'data of ' + new Date(gen * 1000).toISOString().replace('T', ' ').slice(0, 19) + ' UTC \u00b7 ' : '') + 'update ' + updates);
  }

  function card(id, value, unit, lines, cls) {
    const c = document.getElementById('card-' + id);
    const v = c.querySelector('.card-value');
    D.clear(v);
    v.append(value);
    if (unit) v.append(D.el('small', { text: unit }));
    v.className = 'card-value' + (cls ? ' ' + cls : '');
    const sub = c.querySelector('.card-sub');
    D.clear(sub);
    for (const l of lines) if (l) sub.append(D.el('div', {}, l));
    return c;
  }
  const b = (t) => D.el('b', { text: t });

  function fractionDone(d) {
    const need = D.num(d.job.compute_hours);
    const done = D.lastNum(d.progress.hours);
    if (need && done !== null) return Math.min(1, done / need);
    const s = d.summary;
    if (D.num(s.total_steps) && D.num(s.step) !== null) return Math.min(1, s.step / s.total_steps);
    return null;
  }

  function renderCards(d) {
    const s = d.summary;
    const j = d.job;
    const frac = fractionDone(d);
    const cost = D.num(s.cost_usd) !== null ? s.cost_usd : D.lastNum(d.cost.usd);
    const odJob = D.num(s.ondemand_usd);
    const odSame = odJob !== null && frac ? odJob * frac : null;
    const saved = odSame ? 1 - cost / odSame : null;
    const budget = D.num(j.budget_usd);
    const costCard = card('cost', D.usd(cost), '', [
      saved !== null ? [D.el('b', { class: saved >= 0 ? 'good' : 'bad', text: (saved >= 0 ? 'saved ' : 'overspent ') + D.pct(Math.abs(saved), 0) }),
        ' vs ', b(D.usd(odSame)), ' on demand'] : null,
      odJob !== null ? ['whole job on demand ', b(D.usd(odJob))] : null,
      budget !== null && cost !== null ? ['budget ', b(D.usd(budget)), ' \u00b7 ' + D.pct(cost / budget, 0) + ' used'] : null,
    ], budget !== null && cost > budget ? 'bad' : '');
    costCard.title = 'Spent so far, against what on-demand instances would have cost for the same work (the compute done so far).';

    const c = card('progress', frac === null ? '\u2013' : D.pct(frac, 1), '', [
      ['step ', b(D.int(s.step) + ' / ' + D.int(s.total_steps)), D.num(s.epochs) ? ' \u00b7 epoch ' + D.int(s.epoch) + ' / ' + D.int(s.epochs) : ''],
      D.num(j.compute_hours) ? [b(D.fixed(D.lastNum(d.progress.hours), 2) + ' / ' + D.fixed(j.compute_hours, 2)), ' compute hours'] : null,
    ]);
    c.querySelector('.bar-fill').style.width = ((frac || 0) * 100).toFixed(2) + '%';

    renderDeadline(d, frac);

    card('preemptions', D.int(s.preemptions), '', [
      [b(D.int(s.notices)), ' notices \u00b7 ', b(D.int(s.launches)), ' launches'],
      [b(D.int(s.workers)), ' workers running'],
    ], s.preemptions > 0 ? 'warn' : '');

    const evalStep = D.lastNum(d.evaluation.step);
    const lastEpoch = d.epochs.filter((e) => e.test_accuracy !== null).pop();
    card('accuracy', D.num(s.test_accuracy) === null ? '\u2013' : D.pct(s.test_accuracy, 1), '', [
      evalStep !== null ? ['at step ', b(D.int(evalStep))] : ['no evaluation yet'],
      lastEpoch ? ['after epoch ' + lastEpoch.epoch + ': ', b(D.pct(lastEpoch.test_accuracy, 1))] : null,
    ], D.num(s.test_accuracy) !== null ? 'good' : '');
  }

  function renderDeadline(d, frac) {
    const j = d.job;
    const dl = D.num(j.deadline_hours);
    const now = D.num(j.now_s);
    if (!dl || now === null) return card('deadline', '\u2013', '', ['no deadline']);
    const dlS = dl * 3600;
    const state = D.str(j.state);
    if (state === 'FAILED' || state === 'CANCELLED') {
      return card('deadline', '\u2013', '', [['job ' + state.toLowerCase() + ' at ', b(D.hours(now)), ' of ' + D.hours(dlS)]]);
    }
    const done = state === 'SUCCEEDED' || (frac !== null && frac >= 1 - 1e-9);
    if (done) {
      const met = now <= dlS + 1e-6;
      return card('deadline', met ? 'met' : 'missed', '', [['finished at ', b(D.hours(now)), ' of ' + D.hours(dlS)]], met ? 'good' : 'bad');
    }
    if (now > dlS) return card('deadline', 'missed', '', [['deadline ' + D.hours(dlS) + ', now ', b(D.hours(now))]], 'bad');
    const eta = projectFinish(d);
    const onTime = eta !== null && eta <= dlS;
    return card('deadline', D.hours(dlS - now).replace(' h', ''), 'h left', [
      ['deadline at ', b(D.hours(dlS)), ' simulated'],
      eta !== null ? [D.el('b', { class: onTime ? 'good' : 'bad', text: onTime ? 'on track' : 'at risk' }), ' \u00b7 projected finish ' + D.hours(eta)]
        : d.live ? ['projecting\u2026'] : null,
    ], eta !== null && !onTime ? 'warn' : '');
  }

  // When the job would finish at its rate over the last simulated hour.
  function projectFinish(d) {
    const t = d.progress.t_s;
    const h = d.progress.hours;
    const need = D.num(d.job.compute_hours);
    if (!need || t.length < 2 || t.length !== h.length) return null;
    const iLast = t.length - 1;
    let i0 = iLast;
    while (i0 > 0 && t[iLast] - t[i0] < 3600) i0--;
    const rate = (h[iLast] - h[i0]) / (t[iLast] - t[i0]);
    if (!(rate > 0)) return null;
    return t[iLast] + (need - h[iLast]) / rate;
  }

  // --- rendering ---
  function showError(message) {
    const e = document.getElementById('error');
    e.textContent = message;
    e.hidden = !message;
  }

  function render(d) {
    ctx.data = d;
    ctx.domainS = D.timeDomain(d);
    const problems = [];
    for (const id of PANELS) {
      let n = 0;
      try {
        n = D.panels[id](d, ctx);
      } catch (err) {
        problems.push(id + ': ' + err.message);
        window.__errors.push('panel ' + id + ': ' + (err.stack || err.message));
      }
      D.setPoints(id, n);
    }
    return problems;
  }

  function apply(raw) {
    const d = normalize(raw);
    updates++;
    let problems;
    try {
      renderHeader(d);
      renderCards(d);
      problems = render(d);
    } catch (err) {
      problems = ['page: ' + err.message];
      window.__errors.push('render: ' + (err.stack || err.message));
    }
    body.dataset.updates = String(updates);
    body.dataset.step = String(D.num(d.summary.step) === null ? '' : d.summary.step);
    body.dataset.state = D.str(d.job.state);
    body.dataset.live = d.live ? '1' : '0';
    body.dataset.ready = '1';
    return { data: d, problems: problems };
  }

  // --- live mode ---
  async function fetchData() {
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), FETCH_TIMEOUT_MS);
    try {
      const res = await fetch(config.data_url, { cache: 'no-store', signal: abort.signal, headers: { Accept: 'application/json' } });
      if (!res.ok) throw new Error('HTTP ' + res.status + ' ' + res.statusText);
      return await res.json();
    } finally {
      clearTimeout(timer);
    }
  }

  async function poll() {
    let live = true;
    try {
      const result = apply(await fetchData());
      failures = 0;
      live = result.data.live;
      showError(result.problems.length ? 'Some panels failed to draw: ' + result.problems.join('; ') : '');
    } catch (err) {
      failures++;
      const since = ctx.data ? ' Showing the data of update ' + updates + '.' : '';
      showError('Cannot load ' + config.data_url + ': ' + (err.name === 'AbortError' ? 'timed out' : err.message) + '.' + since + ' Retrying\u2026');
    }
    body.dataset.polling = live ? '1' : '0';
    if (live) setTimeout(poll, pollMs * Math.min(2 ** failures, MAX_BACKOFF));
  }

  let resizeQueued = false;
  window.addEventListener('resize', () => {
    if (resizeQueued) return;
    resizeQueued = true;
    requestAnimationFrame(() => {
      resizeQueued = false;
      D.resizeCharts();
      if (!ctx.data) return;
      for (const id of ['fleet', 'epochs', 'utilization']) {
        try { D.panels[id](ctx.data, ctx); } catch (err) { window.__errors.push('resize ' + id + ': ' + err.message); }
      }
    });
  });

  if (config.data_url) {
    body.dataset.polling = '1';
    poll();
  } else {
    body.dataset.polling = '0';
    let snapshot = null;
    try {
      snapshot = readJson('spot-snapshot');
    } catch (err) {
      showError('The data in this page is not valid JSON: ' + err.message);
    }
    if (snapshot) {
      const result = apply(snapshot);
      if (result.problems.length) showError('Some panels failed to draw: ' + result.problems.join('; '));
    } else {
      if (!document.getElementById('error').textContent) showError('This page holds no data.');
      body.dataset.ready = '1';
    }
  }
})();
