// uPlot plumbing: a chart panel that rebuilds its plot only when the set of
// series changes (its "signature") and otherwise updates in place with
// setData; theme colours from CSS variables; stacking helpers.
/* global uPlot */

// Stable colours per series name, readable on dark and light backgrounds.
export const COLORS = {
  loss: '#4c9aff',
  lr: '#f5a623',
  tokens_per_second: '#36b37e',
  step_seconds: '#b07cf2',
  forward: '#4c9aff',
  backward: '#ff8b3d',
  backward_inner: '#ff8b3d',
  backward_allreduce: '#b07cf2',
  backward_reduce_scatter: '#b07cf2',
  step: '#36b37e',
  other: '#7a8594',
  parameters: '#4c9aff',
  gradients: '#ff8b3d',
  optimizer_state: '#36b37e',
  activations: '#f5c542',
  communication: '#b07cf2',
  offload: '#ef5da8',
  allreduce: '#4c9aff',
  reduce: '#ff8b3d',
  reduce_scatter: '#b07cf2',
  allgather: '#36b37e',
  broadcast: '#f5c542',
  barrier: '#ef5da8',
  send: '#2bc5c5',
  recv: '#e8c547',
};

export function color(name) {
  return COLORS[name] || '#9aa7b4';
}

function cssVar(name, fallback) {
  const v = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  return v || fallback;
}

export function theme() {
  return {
    fg: cssVar('--fg-muted', '#9aa7b4'),
    grid: cssVar('--grid', 'rgba(128,128,128,0.18)'),
    panel: cssVar('--bg-panel', '#171d25'),
  };
}

const FONT = '11px system-ui, -apple-system, "Segoe UI", sans-serif';
const LABEL_FONT = '12px system-ui, -apple-system, "Segoe UI", sans-serif';

// An axis in the theme; `format(v)` formats its tick values. Options left
// undefined keep uPlot's defaults (an explicit undefined side would not).
export function axis(t, { format, grid = true, size = 64, ...rest } = {}) {
  const out = {
    size,
    stroke: t.fg,
    font: FONT,
    labelFont: LABEL_FONT,
    labelSize: 18,
    grid: { show: grid, stroke: t.grid, width: 1 },
    ticks: { stroke: t.grid, width: 1 },
  };
  if (format) out.values = (u, vals) => vals.map((v) => (v == null ? '' : format(v)));
  for (const [k, v] of Object.entries(rest)) if (v !== undefined) out[k] = v;
  return out;
}

// Tick increments for byte axes: 1, 2, 4, ... 512 times 1, Ki, Mi, Gi, Ti.
export const BYTE_INCRS = [];
for (let p = 0; p <= 40; p += 10) {
  for (let m = 1; m < 1024; m *= 2) BYTE_INCRS.push(m * 2 ** p);
}

// Padding around every plot: room for the top tick label.
export const PADDING = [14, 8, 0, 8];

// The legend shows the hovered point, else the newest one.
export function legendValue(format, column) {
  return (u, v, si, idx) => {
    const col = column ? column(si) : u.data[si];
    const i = idx == null ? (col ? col.length - 1 : -1) : idx;
    const value = i >= 0 && col ? col[i] : null;
    return value == null ? '\u2014' : format(value);
  };
}

// The x axis over optimizer steps.
export function stepAxis(t) {
  return axis(t, { label: 'step', size: 40, format: (v) => String(Math.round(v)) });
}

// A y range starting at zero (throughput, times, bytes).
export function fromZero(u, min, max) {
  return [0, max > 0 ? max * 1.08 : 1];
}

// Cumulative sums of `columns` (bottom of the stack first); nulls count as 0
// unless the whole row is null.
export function stack(columns) {
  const n = columns.length ? columns[0].length : 0;
  const out = columns.map(() => new Array(n).fill(null));
  for (let i = 0; i < n; i++) {
    let acc = 0;
    let any = false;
    for (let k = 0; k < columns.length; k++) {
      const v = columns[k][i];
      if (v != null) {
        acc += v;
        any = true;
      }
      out[k][i] = any ? acc : null;
    }
  }
  return out;
}

export class ChartPanel {
  // id: the element the plot goes into; emptyId: an element shown while
  // there is nothing to plot.
  constructor(id, { height = 220, emptyText = 'waiting for the first step…' } = {}) {
    this.el = document.getElementById(id);
    this.height = height;
    this.plot = null;
    this.signature = null;
    this.raw = [];  // unstacked columns, for legends of stacked charts
    this.empty = document.createElement('p');
    this.empty.className = 'chart-empty';
    this.empty.textContent = emptyText;
    this.el.append(this.empty);
    this.observer = new ResizeObserver(() => this.resize());
    this.observer.observe(this.el);
  }

  width() {
    return Math.max(240, Math.floor(this.el.clientWidth));
  }

  resize() {
    if (!this.plot) return;
    const w = this.width();
    if (Math.abs(w - this.plot.width) > 1) this.plot.setSize({ width: w, height: this.height });
  }

  setEmpty(isEmpty, text) {
    if (text) this.empty.textContent = text;
    this.empty.hidden = !isEmpty;
    this.el.classList.toggle('is-empty', isEmpty);
  }

  // makeOptions(width, height) -> uPlot options; called when `signature`
  // differs from the current plot's (or there is no plot yet).
  render(signature, makeOptions, data) {
    if (!this.plot || signature !== this.signature) {
      if (this.plot) this.plot.destroy();
      this.plot = new uPlot(makeOptions(this.width(), this.height), data, this.el);
      this.signature = signature;
    } else {
      this.plot.setData(data);
    }
  }

  // Number of x values currently plotted.
  get length() {
    return this.plot ? this.plot.data[0].length : 0;
  }
}
