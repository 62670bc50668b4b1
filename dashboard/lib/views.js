// The five charts: what each plots and how, from the step history
// (lib/history.js) or the job's rank table (/api/v1/ranks).
/* global uPlot */
import {
  BYTE_INCRS, ChartPanel, PADDING, axis, color, fromZero, legendValue, stack, stepAxis, theme,
} from './charts.js';
import * as fmt from './format.js';

export const MEMORY_CATEGORIES = [
  'parameters', 'gradients', 'optimizer_state', 'activations', 'communication', 'offload',
];
export const COMM_OPS = [
  'allreduce', 'reduce', 'reduce_scatter', 'allgather', 'broadcast', 'barrier', 'send', 'recv',
];

function stepSeries() {
  return { label: 'step', value: legendValue(String) };
}

function line(label, name, scale, format, extra = {}) {
  return {
    label,
    scale,
    stroke: color(name),
    width: 1.5,
    value: legendValue(format),
    ...extra,
  };
}

// ---------------------------------------------------------------------------
// loss and learning rate (two axes)
// ---------------------------------------------------------------------------
export class LossChart {
  constructor(id) {
    this.panel = new ChartPanel(id);
  }

  update(history) {
    const steps = history.column((s) => s.step);
    const data = [steps, history.column((s) => s.loss), history.column((s) => s.lr)];
    this.panel.setEmpty(steps.length === 0);
    this.panel.render('loss', (width, height) => {
      const t = theme();
      return {
        width, height, padding: PADDING,
        scales: { x: { time: false }, loss: {}, lr: { range: fromZero } },
        axes: [
          stepAxis(t),
          axis(t, { scale: 'loss', label: 'loss', format: (v) => fmt.fixed(v, 3) }),
          axis(t, { scale: 'lr', side: 1, label: 'learning rate', grid: false, format: (v) => v.toExponential(1) }),
        ],
        series: [
          stepSeries(),
          line('loss', 'loss', 'loss', (v) => fmt.fixed(v, 4)),
          line('learning rate', 'lr', 'lr', (v) => v.toExponential(3), { dash: [6, 4] }),
        ],
      };
    }, data);
  }
}

// ---------------------------------------------------------------------------
// throughput: tokens/s and step time
// ---------------------------------------------------------------------------
export class ThroughputChart {
  constructor(id) {
    this.panel = new ChartPanel(id);
  }

  update(history) {
    const steps = history.column((s) => s.step);
    const data = [
      steps,
      history.column((s) => s.tokens_per_second),
      history.column((s) => s.step_seconds),
    ];
    this.panel.setEmpty(steps.length === 0);
    this.panel.render('throughput', (width, height) => {
      const t = theme();
      return {
        width, height, padding: PADDING,
        scales: { x: { time: false }, tps: { range: fromZero }, sec: { range: fromZero } },
        axes: [
          stepAxis(t),
          axis(t, { scale: 'tps', label: 'tokens/s', format: (v) => fmt.si(v) }),
          axis(t, { scale: 'sec', side: 1, label: 'step time', grid: false, format: fmt.duration }),
        ],
        series: [
          stepSeries(),
          line('tokens/s', 'tokens_per_second', 'tps', (v) => fmt.si(v, 'tok/s'), {
            fill: 'rgba(54,179,126,0.12)',
          }),
          line('step time', 'step_seconds', 'sec', fmt.duration, { dash: [6, 4] }),
        ],
      };
    }, data);
  }
}

// ---------------------------------------------------------------------------
// wall-clock breakdown: stacked time per step
// ---------------------------------------------------------------------------

// The parts of a step, bottom of the stack first, from the timers the engine
// reports: forward, backward_inner (or backward), the gradient collective
// (backward_allreduce for ZeRO 0/1, backward_reduce_scatter for 2/3), step.
export function breakdownParts(timers) {
  const has = (name) => timers && typeof timers[name] === 'number';
  const parts = [];
  if (has('forward')) parts.push('forward');
  if (has('backward_inner')) parts.push('backward_inner');
  else if (has('backward')) parts.push('backward');
  if (has('backward_reduce_scatter')) parts.push('backward_reduce_scatter');
  else if (has('backward_allreduce')) parts.push('backward_allreduce');
  if (has('step')) parts.push('step');
  return parts;
}

export class BreakdownChart {
  constructor(id) {
    this.panel = new ChartPanel(id, { height: 240 });
  }

  update(history) {
    const latest = history.latest;
    const parts = latest ? breakdownParts(latest.timers) : [];
    const names = [...parts, 'other'];
    const steps = history.column((s) => s.step);
    const raw = parts.map((p) => history.column((s) => (s.timers ? s.timers[p] : null)));
    // "other": the rest of the step's wall clock (data loading, bookkeeping).
    raw.push(history.column((s, i) => {
      const sum = raw.reduce((acc, col) => acc + (col[i] ?? 0), 0);
      return typeof s.step_seconds === 'number' ? Math.max(0, s.step_seconds - sum) : null;
    }));
    const cumulative = stack(raw);
    // Drawn top of the stack first, each part filled down to zero over the
    // previous one: stacked areas without band clipping.
    const order = names.map((_, k) => k).reverse();
    this.panel.raw = raw;
    this.panel.setEmpty(steps.length === 0);
    const data = [steps, ...order.map((k) => cumulative[k])];
    this.panel.render(names.join(','), (width, height) => {
      const t = theme();
      return {
        width, height, padding: PADDING,
        scales: { x: { time: false }, sec: { range: fromZero } },
        axes: [stepAxis(t), axis(t, { scale: 'sec', label: 'time per step', format: fmt.duration })],
        series: [
          stepSeries(),
          ...order.map((k) => ({
            label: names[k] === 'step' ? 'optimizer step' : names[k],
            scale: 'sec',
            stroke: color(names[k]),
            fill: color(names[k]),
            width: 1,
            points: { show: false },
            value: legendValue(fmt.duration, () => this.panel.raw[k]),
          })),
        ],
      };
    }, data);
  }
}

// ---------------------------------------------------------------------------
// memory by category per rank: stacked bars
// ---------------------------------------------------------------------------
export class MemoryChart {
  constructor(id) {
    this.panel = new ChartPanel(id, { height: 240, emptyText: 'waiting for the ranks’ first step…' });
  }

  update(ranks) {
    const rows = (ranks || []).filter((r) => r && r.sample && r.identity)
      .sort((a, b) => a.identity.rank - b.identity.rank);
    const x = rows.map((r) => r.identity.rank);
    const cur = MEMORY_CATEGORIES.map((c) => rows.map((r) => r.sample.memory?.[c]?.current_bytes ?? 0));
    const peak = MEMORY_CATEGORIES.map((c) => rows.map((r) => r.sample.memory?.[c]?.peak_bytes ?? 0));
    const cumulative = stack(cur);
    const order = MEMORY_CATEGORIES.map((_, k) => k).reverse();
    this.panel.raw = { cur, peak };
    this.panel.setEmpty(rows.length === 0);
    const data = [x, ...order.map((k) => cumulative[k])];
    const signature = `memory:${x.join(',')}`;
    this.panel.render(signature, (width, height) => {
      const t = theme();
      const bars = uPlot.paths.bars({ size: [0.6, 90], align: 0 });
      const n = x.length;
      return {
        width, height, padding: PADDING,
        scales: {
          x: { time: false, range: () => (n ? [x[0] - 0.5, x[n - 1] + 0.5] : [0, 1]) },
          bytes: { range: fromZero },
        },
        axes: [
          axis(t, {
            label: 'rank', size: 40,
            splits: () => x,
            format: (v) => String(v),
            grid: false,
          }),
          axis(t, { scale: 'bytes', label: 'memory (current)', format: fmt.bytes, size: 72, incrs: BYTE_INCRS }),
        ],
        cursor: { points: { show: false } },
        series: [
          { label: 'rank', value: (u, v) => (v == null ? 'hover a bar' : String(v)) },
          ...order.map((k) => ({
            label: MEMORY_CATEGORIES[k].replace('_', ' '),
            scale: 'bytes',
            stroke: color(MEMORY_CATEGORIES[k]),
            fill: color(MEMORY_CATEGORIES[k]),
            width: 0,
            paths: bars,
            points: { show: false },
            value: (u, v, si, idx) => {
              const { cur: c, peak: p } = this.panel.raw;
              if (idx == null) return c[k].length ? `max ${fmt.bytes(Math.max(...c[k]))}` : fmt.DASH;
              return `${fmt.bytes(c[k][idx])} (peak ${fmt.bytes(p[k][idx])})`;
            },
          })),
        ],
      };
    }, data);
  }
}

// ---------------------------------------------------------------------------
// communication: bytes per step and bus bandwidth per op
// ---------------------------------------------------------------------------

// Ops this rank has run at least once (from the latest sample).
export function activeOps(sample) {
  if (!sample || !sample.comm) return [];
  return COMM_OPS.filter((op) => (sample.comm[op]?.count ?? 0) > 0);
}

export class CommChart {
  constructor(id) {
    this.panel = new ChartPanel(id, { height: 240 });
  }

  update(history) {
    const samples = history.samples;
    const steps = history.column((s) => s.step);
    const bytesPerStep = (op) => history.column((s, i) => {
      if (i === 0) return null;
      const prev = samples[i - 1];
      const db = (s.comm?.[op]?.bytes ?? 0) - (prev.comm?.[op]?.bytes ?? 0);
      const ds = s.step - prev.step;
      return ds > 0 && db >= 0 ? db / ds : null;
    });
    // Ops that moved data in the window (not the one-off setup broadcast).
    const candidates = activeOps(history.latest).map((op) => ({
      op,
      perStep: bytesPerStep(op),
      bandwidth: history.column((s) => s.comm?.[op]?.bus_bandwidth),
    }));
    const moving = candidates.filter((c) => c.perStep.some((v) => v > 0) || c.bandwidth.some((v) => v > 0));
    const ops = moving.map((c) => c.op);
    const perStep = moving.map((c) => c.perStep);
    const bandwidth = moving.map((c) => c.bandwidth);
    if (steps.length === 0) {
      this.panel.setEmpty(true);
    } else {
      this.panel.setEmpty(ops.length === 0, 'no collectives yet (one rank needs none)');
    }
    const data = [steps, ...perStep, ...bandwidth];
    this.panel.render(`comm:${ops.join(',')}`, (width, height) => {
      const t = theme();
      return {
        width, height, padding: PADDING,
        scales: { x: { time: false }, bytes: { range: fromZero }, bw: { range: fromZero } },
        axes: [
          stepAxis(t),
          axis(t, { scale: 'bytes', label: 'bytes per step', format: fmt.bytes, size: 72, incrs: BYTE_INCRS }),
          axis(t, { scale: 'bw', side: 1, label: 'bus bandwidth', grid: false, format: fmt.bytesPerSecond, size: 80, incrs: BYTE_INCRS }),
        ],
        series: [
          stepSeries(),
          ...ops.map((op) => line(`${op} bytes/step`, op, 'bytes', fmt.bytes)),
          ...ops.map((op) => line(`${op} bus bw`, op, 'bw', fmt.bytesPerSecond, { dash: [5, 4], width: 1 })),
        ],
      };
    }, data);
  }
}
