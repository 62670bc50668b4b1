// dstrain live dashboard: polls the metrics server's JSON API (metrics/monitor.h)
// and updates the header, charts and tables in place. No framework, no build step.
import { ApiError, fragmentOptions, getJson } from './lib/api.js';
import * as fmt from './lib/format.js';
import { History } from './lib/history.js';
import { renderCommTable, renderRankTable } from './lib/tables.js';
import { renderTimeline } from './lib/timeline.js';
import { BreakdownChart, CommChart, LossChart, MemoryChart, ThroughputChart } from './lib/views.js';

const MAX_BACKOFF_MS = 30000;
const IDLE_AFTER_SECONDS = 30;  // no new step for this long: "idle"

const $ = (id) => document.getElementById(id);

let options = fragmentOptions();
const history = new History(options.last);
const charts = {
  loss: new LossChart('chart-loss'),
  throughput: new ThroughputChart('chart-throughput'),
  breakdown: new BreakdownChart('chart-breakdown'),
  memory: new MemoryChart('chart-memory'),
  comm: new CommChart('chart-comm'),
};

const state = {
  identity: null,
  sample: null,
  timeline: null,
  ranks: [],
  config: null,
  failures: 0,
  polls: 0,
  lastOk: 0,
  timer: 0,
};

// For debugging in the console and for tests/browser/dashboard.test.mjs.
window.dstrainDashboard = { history, charts, state };

// ---------------------------------------------------------------------------
// rendering
// ---------------------------------------------------------------------------
function setText(id, text) {
  const el = $(id);
  if (el.textContent !== text) el.textContent = text;
}

function renderHeader() {
  const id = state.identity;
  const s = state.sample;
  setText('job', id ? id.job : fmt.DASH);
  setText('world-size', id ? String(id.world_size) : fmt.DASH);
  setText('this-rank', id ? `rank ${id.rank} (dp ${id.dp_rank}, tp ${id.tp_rank}, pp ${id.pp_rank})` : fmt.DASH);
  setText('current-step', s ? String(s.step) : fmt.DASH);
  setText('current-loss', s ? fmt.fixed(s.loss, 4) : fmt.DASH);
  setText('current-tps', s ? fmt.si(s.tokens_per_second) : fmt.DASH);
  setText('current-step-time', s ? fmt.duration(s.step_seconds) : fmt.DASH);
  setText('current-mfu', s ? (s.mfu > 0 ? fmt.percent(s.mfu) : 'n/a') : fmt.DASH);
  $('current-mfu').title = s && !(s.mfu > 0)
    ? 'MFU needs dstrain.monitor.peak_flops_per_second in the config' : '';
  setText('current-loss-scale', s ? fmt.si(s.loss_scale) : fmt.DASH);
  setText('current-skipped', s ? `${fmt.integer(s.skipped_steps_total)} skipped` : '');
  document.title = s ? `step ${s.step} · ${id ? id.job : ''} — dstrain` : 'dstrain dashboard';
}

function renderStatus() {
  const pill = $('status');
  const s = state.sample;
  let kind;
  let text;
  if (state.failures > 0) {
    kind = 'down';
    text = 'disconnected';
  } else if (!s) {
    kind = 'waiting';
    text = 'waiting for the first step';
  } else {
    const age = Date.now() / 1000 - s.unix_time;
    if (Number.isFinite(age) && age > IDLE_AFTER_SECONDS) {
      kind = 'idle';
      text = `idle: last step ${fmt.duration(age)} ago`;
    } else {
      kind = 'live';
      text = 'live';
    }
  }
  pill.dataset.state = kind;
  setText('status-text', text);
}

function renderConfig() {
  if (!state.config) return;
  const pre = $('config-json');
  if (!pre.textContent) pre.textContent = JSON.stringify(state.config, null, 2);
  const c = state.config;
  const zero = c.zero_optimization?.stage;
  const bits = [];
  if (typeof zero === 'number') bits.push(`ZeRO ${zero}`);
  if (c.train_batch_size) bits.push(`batch ${c.train_batch_size}`);
  if (c.fp16?.enabled) bits.push('fp16');
  if (c.bf16?.enabled) bits.push('bf16');
  setText('config-summary', bits.join(' · '));
}

function render() {
  renderHeader();
  renderStatus();
  charts.loss.update(history);
  charts.throughput.update(history);
  charts.breakdown.update(history);
  charts.comm.update(history);
  charts.memory.update(state.ranks);
  renderRankTable($('rank-table'), state.ranks);
  renderCommTable($('comm-table'), state.sample);
  renderTimeline($('timeline-panel'), $('timeline'), $('timeline-summary'), state.timeline);
  renderConfig();
}

function showBanner(error, retryMs) {
  const banner = $('banner');
  const unauthorized = error instanceof ApiError && (error.status === 401 || error.status === 403);
  setText('banner-title', unauthorized ? 'Not authorized' : 'Disconnected from the metrics server');
  setText('banner-detail', `${error.message}. Retrying in ${Math.round(retryMs / 1000)} s ` +
          `(attempt ${state.failures}).` +
          (state.lastOk ? ` Last answer ${fmt.duration((Date.now() - state.lastOk) / 1000)} ago.` : ''));
  banner.hidden = false;
  document.body.classList.add('disconnected');
}

function hideBanner() {
  $('banner').hidden = true;
  document.body.classList.remove('disconnected');
}

// ---------------------------------------------------------------------------
// polling
// ---------------------------------------------------------------------------
async function poll() {
  const token = options.token;
  const snapshot = await getJson('api/v1/snapshot', token);
  state.identity = snapshot.identity || null;
  state.sample = snapshot.sample || null;
  state.timeline = snapshot.timeline || null;
  const step = state.sample ? state.sample.step : -1;
  if (step >= 0 && step < history.lastStep) history.reset();  // a new run
  if (step > history.lastStep) {
    const want = history.wanted(step);
    const answer = await getJson(`api/v1/history?last=${want}`, token);
    history.merge(answer.identity || state.identity, answer.steps);
    // The history may already hold a newer step than the snapshot did.
    if (history.latest && history.latest.step > step) state.sample = history.latest;
  } else if (step < 0) {
    history.reset();
  }
  const ranks = await getJson('api/v1/ranks', token);
  state.ranks = Array.isArray(ranks.ranks) ? ranks.ranks : [];
  if (!state.config) {
    try {
      state.config = await getJson('api/v1/config', token);
    } catch {
      // optional: the page works without it
    }
  }
}

async function tick() {
  let delay = options.intervalMs;
  try {
    await poll();
    state.failures = 0;
    state.lastOk = Date.now();
    hideBanner();
  } catch (error) {
    state.failures += 1;
    delay = Math.min(MAX_BACKOFF_MS, options.intervalMs * 2 ** Math.min(state.failures, 6));
    showBanner(error instanceof Error ? error : new Error(String(error)), delay);
  }
  state.polls += 1;
  try {
    render();
  } catch (error) {
    console.error('dstrain dashboard: render failed', error);
  }
  clearTimeout(state.timer);
  state.timer = setTimeout(tick, delay);
}

$('retry').addEventListener('click', () => {
  clearTimeout(state.timer);
  tick();
});

window.addEventListener('hashchange', () => {
  options = fragmentOptions();
  history.limit = options.last;
  clearTimeout(state.timer);
  tick();
});

tick();
