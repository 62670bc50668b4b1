#!/usr/bin/env node
// A stand-in for dstrain's metrics HTTP server (metrics/monitor.h) for
// dashboard development: it serves the page from dashboard/ (and uPlot from
// node_modules) at the same paths as the embedded build, and the JSON API
// with synthetic, advancing training data of a job of --world ranks.
//
//   node dashboard/dev/mock_server.mjs [--port 9400] [--world 4] [--zero 2]
//        [--step-ms 500] [--first-step-ms 1500] [--token SECRET]
//
// Prints "mock: http://127.0.0.1:PORT/" once listening. Edit the page and
// reload: files are read from disk on every request.
//
// Test hook: POST /__mock/outage?seconds=N makes every /api/ request fail
// with 503 for N seconds (the page's "disconnected" banner).
import { readFile } from 'node:fs/promises';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const DASHBOARD = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const UPLOT = path.join(DASHBOARD, 'node_modules', 'uplot', 'dist');

const CONTENT_TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.json': 'application/json',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
};

function parseArgs(argv) {
  const opts = { port: 0, world: 4, zero: 2, stepMs: 500, firstStepMs: 1500, token: '', host: '127.0.0.1' };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const v = argv[i + 1];
    switch (a) {
      case '--port': opts.port = Number(v); i++; break;
      case '--host': opts.host = v; i++; break;
      case '--world': opts.world = Math.max(1, Number(v)); i++; break;
      case '--zero': opts.zero = Number(v); i++; break;
      case '--step-ms': opts.stepMs = Math.max(20, Number(v)); i++; break;
      case '--first-step-ms': opts.firstStepMs = Math.max(0, Number(v)); i++; break;
      case '--token': opts.token = v; i++; break;
      case '-h': case '--help':
        console.log('usage: node dashboard/dev/mock_server.mjs [--port N] [--world N] [--zero 0-3] ' +
                    '[--step-ms MS] [--first-step-ms MS] [--token T] [--host H]');
        process.exit(0);
        break;
      default:
        console.error(`mock: unknown argument ${a}`);
        process.exit(2);
    }
  }
  return opts;
}

const opts = parseArgs(process.argv.slice(2));
const JOB = 'mock-gpt';
const HISTORY_STEPS = 1000;
const START = Date.now();
const GIB = 1024 ** 3;
const COMM_OPS = ['allreduce', 'reduce', 'reduce_scatter', 'allgather', 'broadcast', 'barrier'];
const MEMORY = ['parameters', 'gradients', 'optimizer_state', 'activations', 'communication', 'offload'];

// Deterministic noise: the same (rank, step) always gives the same numbers.
function noise(rank, step, salt) {
  const x = Math.sin(rank * 127.1 + step * 311.7 + salt * 74.7) * 43758.5453;
  return x - Math.floor(x) - 0.5;
}

function identity(rank) {
  return {
    job: JOB, rank, local_rank: rank, world_size: opts.world,
    dp_rank: rank, tp_rank: 0, pp_rank: 0,
  };
}

function lrAt(step) {
  const warmup = 50;
  const total = 2000;
  const peak = 3e-4;
  if (step < warmup) return (peak * (step + 1)) / warmup;
  return 0.5 * peak * (1 + Math.cos((Math.PI * Math.min(step - warmup, total)) / total));
}

const gradCollective = opts.zero >= 2 ? 'reduce_scatter' : 'allreduce';
const gradTimer = opts.zero >= 2 ? 'backward_reduce_scatter' : 'backward_allreduce';
const PARAM_BYTES = 124e6 * 4;  // a GPT-2 small in fp32
// A peak that puts the nominal step at 42 % MFU.
const PEAK_FLOPS = (6 * 124e6 * 8 * 1024) / (opts.stepMs / 1000) / 0.42;

function sampleAt(rank, step) {
  const slow = rank === opts.world - 1 ? 1.18 : 1.0;  // the last rank is the straggler
  const stepSeconds = (opts.stepMs / 1000) * slow * (1 + 0.08 * noise(rank, step, 1));
  const tokensPerStep = 8 * 1024;
  const fwd = stepSeconds * 0.3;
  const inner = stepSeconds * 0.42;
  const comm = opts.world > 1 ? stepSeconds * 0.16 : 0;
  const opt = stepSeconds * 0.08;
  const timers = {
    forward: fwd, backward: inner + comm, backward_inner: inner, step: opt,
    forward_microstep: fwd / 2, backward_microstep: (inner + comm) / 2,
    backward_inner_microstep: inner / 2, step_microstep: opt,
  };
  if (opts.world > 1) {
    timers[gradTimer] = comm;
    timers[`${gradTimer}_microstep`] = comm / 2;
  }
  const commOut = {};
  for (const op of COMM_OPS) commOut[op] = { count: 0, bytes: 0, seconds: 0, bus_bandwidth: 0 };
  if (opts.world > 1) {
    const n = opts.world;
    const shard = PARAM_BYTES / (opts.zero >= 2 ? n : 1);
    commOut[gradCollective] = {
      count: step * 4, bytes: Math.round(step * shard * (opts.zero >= 2 ? n : 1)),
      seconds: step * comm, bus_bandwidth: (PARAM_BYTES * 2 * (n - 1)) / n / comm,
    };
    if (opts.zero >= 1) {
      commOut.allgather = {
        count: step * 4, bytes: Math.round(step * PARAM_BYTES), seconds: step * comm * 0.8,
        bus_bandwidth: (PARAM_BYTES * (n - 1)) / n / (comm * 0.8),
      };
    }
    commOut.broadcast = { count: 1, bytes: PARAM_BYTES, seconds: 0.2, bus_bandwidth: 0 };
    commOut.barrier = { count: 2, bytes: 0, seconds: 0.01, bus_bandwidth: 0 };
  }
  const shardDiv = (stage) => (opts.zero >= stage ? opts.world : 1);
  const memory = {
    parameters: PARAM_BYTES / (opts.zero >= 3 ? opts.world : 1),
    gradients: PARAM_BYTES / shardDiv(2),
    optimizer_state: (2 * PARAM_BYTES) / shardDiv(1),
    activations: 0.9 * GIB * (1 + 0.05 * noise(rank, step, 2)),
    communication: opts.world > 1 ? 64 * 1024 ** 2 : 0,
    offload: 0,
  };
  const memOut = {};
  for (const c of MEMORY) {
    const cur = Math.round(memory[c]);
    memOut[c] = { current_bytes: cur, peak_bytes: Math.round(cur * (c === 'activations' ? 1.3 : 1)) };
  }
  const loss = 1.6 + 9.2 * Math.exp(-step / 120) + 0.08 * noise(0, step, 3);
  const achieved = (6 * 124e6 * tokensPerStep) / stepSeconds;
  return {
    step,
    samples_total: step * 8,
    tokens_total: step * tokensPerStep,
    loss,
    lr: lrAt(step),
    grad_norm: 0.4 + 3 * Math.exp(-step / 80) + 0.05 * noise(rank, step, 4),
    loss_scale: 65536,
    skipped_steps_total: Math.min(3, Math.floor(step / 100)),
    step_seconds: stepSeconds,
    tokens_per_second: tokensPerStep / stepSeconds,
    samples_per_second: 8 / stepSeconds,
    mfu: achieved / PEAK_FLOPS,
    achieved_flops_per_second: achieved,
    timers,
    comm: commOut,
    memory: memOut,
    // A GPU job: everything but the host copies lives on the device.
    device_memory: {
      current_bytes: Math.round(0.92 * Object.values(memory).reduce((a, b) => a + b, 0)),
      peak_bytes: Math.round(0.92 * 1.3 * Object.values(memory).reduce((a, b) => a + b, 0)),
    },
    process_rss_bytes: Math.round(3.2 * GIB + rank * 0.05 * GIB),
    // The last rank is a straggler by communication.slow_node_tolerance.
    compute_seconds: stepSeconds * (rank === opts.world - 1 && opts.world > 1 ? 0.8 : 0.6),
    straggler: rank === opts.world - 1 && opts.world > 1,
    straggler_slower_by: rank === opts.world - 1 && opts.world > 1 ? 0.35 : 0,
    unix_time: (START + opts.firstStepMs + step * opts.stepMs) / 1000,
  };
}

// Steps taken so far (0 before the first step).
function currentStep() {
  const t = Date.now() - START - opts.firstStepMs;
  return t < 0 ? 0 : 1 + Math.floor(t / opts.stepMs);
}

let outageUntil = 0;

function sendJson(res, status, body) {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Cache-Control': 'no-store' });
  res.end(text);
}

function api(url, req, res) {
  if (Date.now() < outageUntil) return sendJson(res, 503, { error: 'mock outage' });
  if (opts.token && req.headers.authorization !== `Bearer ${opts.token}`) {
    return sendJson(res, 401, { error: 'missing or wrong bearer token' });
  }
  const step = currentStep();
  switch (url.pathname) {
    case '/api/v1/snapshot':
      return sendJson(res, 200, { identity: identity(0), sample: step > 0 ? sampleAt(0, step) : null });
    case '/api/v1/history': {
      const first = Math.max(1, step - HISTORY_STEPS + 1);
      let steps = [];
      for (let s = first; s <= step; s++) steps.push(sampleAt(0, s));
      const last = Number.parseInt(url.searchParams.get('last') ?? '', 10);
      if (Number.isFinite(last) && last >= 0) steps = steps.slice(Math.max(0, steps.length - last));
      return sendJson(res, 200, { identity: identity(0), steps });
    }
    case '/api/v1/ranks': {
      // Rank 0's table: the other ranks publish every 5 steps.
      const ranks = [];
      for (let r = 0; r < opts.world; r++) {
        const published = r === 0 ? step : step - (step % 5);
        const sample = published > 0 ? sampleAt(r, published) : null;
        ranks.push({
          identity: identity(r), sample,
          age_seconds: sample ? Math.max(0, Date.now() / 1000 - sample.unix_time) : 0,
        });
      }
      return sendJson(res, 200, { ranks });
    }
    case '/api/v1/config':
      return sendJson(res, 200, {
        train_batch_size: 8 * opts.world,
        train_micro_batch_size_per_gpu: 4,
        gradient_accumulation_steps: 2,
        zero_optimization: { stage: opts.zero },
        optimizer: { type: 'AdamW', params: { lr: 3e-4 } },
        dstrain: { monitor: { enabled: true, job: JOB, http: { enabled: true, port: opts.port, token: opts.token ? '<redacted>' : '' } } },
      });
    default:
      return sendJson(res, 404, { error: `no such endpoint ${url.pathname}` });
  }
}

function metricsText() {
  const step = currentStep();
  const s = step > 0 ? sampleAt(0, step) : null;
  const labels = `job="${JOB}",rank="0",dp_rank="0",tp_rank="0",pp_rank="0"`;
  const lines = [
    '# TYPE dstrain_steps_total counter', `dstrain_steps_total{${labels}} ${step}`,
    '# TYPE dstrain_world_size gauge', `dstrain_world_size{${labels}} ${opts.world}`,
  ];
  if (s) lines.push('# TYPE dstrain_loss gauge', `dstrain_loss{${labels}} ${s.loss}`);
  return lines.join('\n') + '\n';
}

// The embedded build's paths: "/" and "/index.html" -> index.html,
// "/assets/uPlot.*" -> node_modules/uplot/dist, "/assets/<rel>" -> dashboard/<rel>.
function assetFile(pathname) {
  if (pathname === '/' || pathname === '/index.html') return path.join(DASHBOARD, 'index.html');
  if (!pathname.startsWith('/assets/')) return null;
  const rel = decodeURIComponent(pathname.slice('/assets/'.length));
  if (rel === 'uPlot.iife.min.js' || rel === 'uPlot.min.css') return path.join(UPLOT, rel);
  if (rel.split('/').some((p) => p === '..' || p === '' || p.startsWith('.'))) return null;
  if (/^(node_modules|dev|grafana|tools)\//.test(rel) || /^package(-lock)?\.json$/.test(rel)) return null;
  if (!CONTENT_TYPES[path.extname(rel)]) return null;
  return path.join(DASHBOARD, rel);
}

const server = http.createServer(async (req, res) => {
  const url = new URL(req.url, 'http://localhost');
  try {
    if (req.method === 'POST' && url.pathname === '/__mock/outage') {
      outageUntil = Date.now() + 1000 * Number(url.searchParams.get('seconds') ?? 5);
      return sendJson(res, 200, { outage_until: outageUntil });
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') return sendJson(res, 405, { error: 'GET only' });
    if (url.pathname.startsWith('/api/')) return api(url, req, res);
    if (url.pathname === '/metrics') {
      res.writeHead(200, { 'Content-Type': 'text/plain; version=0.0.4' });
      return res.end(metricsText());
    }
    const file = assetFile(url.pathname);
    if (!file) return sendJson(res, 404, { error: `no such asset ${url.pathname}` });
    const body = await readFile(file);
    res.writeHead(200, { 'Content-Type': CONTENT_TYPES[path.extname(file)], 'Cache-Control': 'no-store' });
    return res.end(body);
  } catch (e) {
    const status = e.code === 'ENOENT' ? 404 : 500;
    return sendJson(res, status, { error: String(e.message || e) });
  }
});

server.listen(opts.port, opts.host, () => {
  const { port } = server.address();
  console.log(`mock: http://${opts.host}:${port}/  (world ${opts.world}, ZeRO ${opts.zero}, a step every ${opts.stepMs} ms)`);
});

for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => server.close(() => process.exit(0)));
