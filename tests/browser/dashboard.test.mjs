#!/usr/bin/env node
// Headless-browser test of the dashboard against a live metrics server (the
// real `dstrain train` with monitor.http on, or dashboard/dev/mock_server.mjs).
//
//   node tests/browser/dashboard.test.mjs URL SCREENSHOT.png [--outage] [--timeout-ms N]
//        [--color-scheme dark|light] [--expect-timeline] [--expect-stragglers N]
//        [--expect-device-memory]
//
// Loads URL in Debian's /usr/bin/chromium (playwright-core from
// dashboard/node_modules; no downloaded browsers), waits until #current-step
// shows a step number, then until the step and the charts' data advance;
// checks every chart has a drawn canvas, the rank table has a row per
// reporting rank (and, with two or more, exactly one highlighted slowest rank),
// the header is filled, no banner is shown and the page threw no errors; saves
// a full-page screenshot. --outage (mock server only) then makes the API fail
// for a few seconds and checks the "disconnected" banner appears and clears.
// --expect-timeline (a pipeline rank) checks the pipeline panel shows the
// stage's last step with forward, backward and waiting bars.
// --expect-stragglers N: N rows carry the engine's straggler mark (default 0).
// --expect-device-memory: every reporting row shows device bytes (else a dash:
// CPU ranks).
// Exit status 0 = pass, 1 = a check failed, 2 = usage, 3 = overall timeout.
import { mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';
const CHARTS = ['chart-loss', 'chart-throughput', 'chart-breakdown', 'chart-memory', 'chart-comm'];

function usage(message) {
  if (message) console.error(`dashboard.test: ${message}`);
  console.error('usage: node tests/browser/dashboard.test.mjs URL SCREENSHOT.png [--outage] [--timeout-ms N] [--color-scheme dark|light]');
  process.exit(2);
}

const args = process.argv.slice(2);
const positional = [];
let outage = false;
let expectTimeline = false;
let expectStragglers = 0;
let expectDeviceMemory = false;
let totalMs = 150000;
let colorScheme = 'dark';
for (let i = 0; i < args.length; i++) {
  if (args[i] === '--outage') outage = true;
  else if (args[i] === '--expect-timeline') expectTimeline = true;
  else if (args[i] === '--expect-stragglers') expectStragglers = Number(args[++i]);
  else if (args[i] === '--expect-device-memory') expectDeviceMemory = true;
  else if (args[i] === '--color-scheme') colorScheme = args[++i];
  else if (args[i] === '--timeout-ms') totalMs = Number(args[++i]);
  else if (args[i].startsWith('--')) usage(`unknown option ${args[i]}`);
  else positional.push(args[i]);
}
if (positional.length !== 2 || !Number.isFinite(totalMs) || !['dark', 'light'].includes(colorScheme)) usage();
const [url, screenshot] = positional;

// Step budget: the first step of a real run may need a while on a busy machine.
const FIRST_STEP_MS = Math.min(90000, totalMs * 0.5);
const ADVANCE_MS = Math.min(60000, totalMs * 0.35);

const watchdog = setTimeout(() => {
  console.error(`dashboard.test: FAIL: gave up after ${totalMs} ms`);
  process.exit(3);
}, totalMs);

const require = createRequire(path.join(ROOT, 'dashboard', 'package.json'));
let chromium;
try {
  ({ chromium } = require('playwright-core'));
} catch (e) {
  console.error(`dashboard.test: playwright-core is missing (${e.message}); run npm ci --prefix dashboard`);
  process.exit(2);
}

class CheckError extends Error {}
function check(condition, message) {
  if (!condition) throw new CheckError(message);
}

// page.waitForFunction with a readable failure.
async function waitFor(page, what, fn, arg, timeout) {
  try {
    await page.waitForFunction(fn, arg, { timeout, polling: 200 });
  } catch (e) {
    const dump = await page.evaluate(() => ({
      step: document.querySelector('#current-step')?.textContent,
      status: document.querySelector('#status-text')?.textContent,
      banner: document.querySelector('#banner')?.hidden ? '' : document.querySelector('#banner')?.textContent.trim(),
    })).catch(() => ({}));
    throw new CheckError(`${what}: not within ${timeout} ms (${e.message.split('\n')[0]}); page: ${JSON.stringify(dump)}`);
  }
}

const browser = await chromium.launch({
  executablePath: CHROMIUM,
  args: ['--no-sandbox', '--headless=new'],
  timeout: 30000,
});
const pageErrors = [];
let expectNetworkErrors = false;
let status = 0;
try {
  const page = await browser.newPage({ viewport: { width: 1440, height: 1000 }, colorScheme });
  page.setDefaultTimeout(30000);
  page.on('pageerror', (e) => pageErrors.push(`uncaught: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    if (expectNetworkErrors && m.text().startsWith('Failed to load resource')) return;
    pageErrors.push(`console.error: ${m.text()}`);
  });

  const response = await page.goto(url, { waitUntil: 'load', timeout: 30000 });
  check(response && response.ok(), `GET ${url}: HTTP ${response && response.status()}`);
  await waitFor(page, 'the page script', () => window.dstrainDashboard && typeof window.uPlot === 'function', null, 15000);

  // 1. A step number appears.
  await waitFor(page, '#current-step shows a step number',
    () => /^\d+$/.test(document.querySelector('#current-step').textContent.trim()), null, FIRST_STEP_MS);
  const first = await page.evaluate(() => ({
    step: Number(document.querySelector('#current-step').textContent),
    lastX: window.dstrainDashboard.charts.loss.panel.plot.data[0].at(-1),
  }));

  // 2. It advances, and so do the charts.
  await waitFor(page, 'the step and the loss chart advance', (f) => {
    const step = Number(document.querySelector('#current-step').textContent);
    const plot = window.dstrainDashboard.charts.loss.panel.plot;
    return step > f.step && plot.data[0].length > 0 && plot.data[0].at(-1) > f.lastX;
  }, first, ADVANCE_MS);

  // 3. The rank table and the memory chart fill from /api/v1/ranks.
  await waitFor(page, 'a rank row with a step',
    () => [...document.querySelectorAll('#rank-table tbody tr[data-rank]')]
      .some((tr) => /^\d/.test(tr.cells[2].textContent)), null, ADVANCE_MS);
  await waitFor(page, 'the memory chart has a rank',
    () => window.dstrainDashboard.charts.memory.panel.length > 0, null, 15000);
  // The straggler mark needs the slow rank's own report, which under load can
  // come a poll or two after the first rank's (seen once in CI: 1 of 4 ranks).
  if (expectStragglers > 0) {
    await waitFor(page, `${expectStragglers} rank row(s) marked as stragglers`,
      (n) => document.querySelectorAll('#rank-table tr.straggler').length >= n,
      expectStragglers, ADVANCE_MS);
  }
  if (expectTimeline) {
    await waitFor(page, 'the pipeline panel shows forward, backward and waiting bars', () => {
      const panel = document.querySelector('#timeline-panel');
      const count = (sel) => document.querySelectorAll(`#timeline ${sel}`).length;
      return panel && !panel.hidden && count('.op-forward') > 0 && count('.op-backward') > 0 &&
        count('[data-lane="waiting"] .timeline-bar') > 0 &&
        /waiting for neighbours/.test(document.querySelector('#timeline-summary').textContent);
    }, null, ADVANCE_MS);
    console.log('dashboard.test: pipeline timeline drawn');
  }

  const report = await page.evaluate((ids) => {
    const d = window.dstrainDashboard;
    const charts = {};
    for (const id of ids) {
      const canvas = document.querySelector(`#${id} canvas`);
      const box = canvas ? canvas.getBoundingClientRect() : null;
      charts[id] = { canvas: !!canvas, width: box ? box.width : 0, height: box ? box.height : 0 };
    }
    const rows = [...document.querySelectorAll('#rank-table tbody tr[data-rank]')];
    const reporting = rows.filter((tr) => /^\d/.test(tr.cells[2].textContent));
    return {
      step: Number(document.querySelector('#current-step').textContent),
      charts,
      points: {
        loss: d.charts.loss.panel.length,
        throughput: d.charts.throughput.panel.length,
        breakdown: d.charts.breakdown.panel.length,
        comm: d.charts.comm.panel.length,
        memory: d.charts.memory.panel.length,
      },
      breakdownSeries: d.charts.breakdown.panel.plot.series.slice(1).map((s) => s.label),
      ranks: rows.length,
      reporting: reporting.length,
      slowest: document.querySelectorAll('#rank-table tr.slowest').length,
      // The "device mem" column of the rows with a step.
      deviceMemory: reporting.map((tr) => tr.cells[7].textContent),
      // Rows the engine marked as stragglers, and whether each says so.
      stragglers: [...document.querySelectorAll('#rank-table tr.straggler')]
        .map((tr) => ({ rank: tr.dataset.rank, badge: tr.querySelector('.badge.straggler')?.textContent ?? '' })),
      job: document.querySelector('#job').textContent,
      worldSize: document.querySelector('#world-size').textContent,
      bannerHidden: document.querySelector('#banner').hidden,
      status: document.querySelector('#status').dataset.state,
    };
  }, CHARTS);
  console.log(`dashboard.test: ${JSON.stringify(report)}`);

  for (const id of CHARTS) {
    const c = report.charts[id];
    check(c.canvas && c.width > 50 && c.height > 50, `#${id}: no drawn canvas (${JSON.stringify(c)})`);
  }
  for (const k of ['loss', 'throughput', 'breakdown', 'comm']) {
    check(report.points[k] >= 2, `${k} chart: ${report.points[k]} points after the step advanced`);
  }
  check(report.breakdownSeries.includes('forward') && report.breakdownSeries.includes('optimizer step'),
    `breakdown chart series ${report.breakdownSeries} lack forward / optimizer step`);
  check(report.ranks >= 1 && report.reporting >= 1, `rank table: ${report.ranks} rows, ${report.reporting} with a step`);
  check(report.reporting < 2 || report.slowest === 1,
    `rank table: ${report.slowest} rows highlighted as slowest among ${report.reporting}`);
  check(report.stragglers.length === expectStragglers &&
      report.stragglers.every((s) => /^straggler \+\d+%$/.test(s.badge)),
    `rank table: stragglers ${JSON.stringify(report.stragglers)}, expected ${expectStragglers}`);
  check(expectDeviceMemory
    ? report.deviceMemory.every((t) => /^\d/.test(t))
    : report.deviceMemory.every((t) => t === '\u2014'),
    `rank table: device memory ${JSON.stringify(report.deviceMemory)}, expected ${expectDeviceMemory ? 'bytes' : 'dashes (CPU ranks)'}`);
  check(report.job && report.job !== '\u2014', `header: job is "${report.job}"`);
  check(/^\d+$/.test(report.worldSize), `header: world size is "${report.worldSize}"`);
  check(report.bannerHidden, 'the disconnected banner shows while the server answers');
  check(report.status === 'live' || report.status === 'idle', `status pill is "${report.status}"`);
  check(pageErrors.length === 0, `page errors: ${pageErrors.join(' | ')}`);

  mkdirSync(path.dirname(path.resolve(screenshot)), { recursive: true });
  await page.screenshot({ path: screenshot, fullPage: true });
  console.log(`dashboard.test: screenshot ${screenshot}`);

  // 4. Optional: an API outage shows the banner, and it clears on recovery.
  if (outage) {
    expectNetworkErrors = true;
    const r = await page.request.post(new URL('__mock/outage?seconds=4', url).href);
    check(r.ok(), `POST __mock/outage: HTTP ${r.status()} (is this the mock server?)`);
    await waitFor(page, 'the disconnected banner appears',
      () => !document.querySelector('#banner').hidden && document.querySelector('#status').dataset.state === 'down',
      null, 15000);
    await waitFor(page, 'the banner clears after the outage',
      () => document.querySelector('#banner').hidden, null, 40000);
    expectNetworkErrors = false;
    check(pageErrors.length === 0, `page errors: ${pageErrors.join(' | ')}`);
    console.log('dashboard.test: outage banner shown and cleared');
  }
  console.log('dashboard.test: PASS');
} catch (e) {
  status = 1;
  console.error(`dashboard.test: FAIL: ${e instanceof CheckError ? e.message : e.stack || e}`);
  if (pageErrors.length) console.error(`dashboard.test: page errors: ${pageErrors.join(' | ')}`);
} finally {
  await browser.close().catch(() => {});
  clearTimeout(watchdog);
}
process.exit(status);
