// The rank table (one row per rank from /api/v1/ranks, the slowest rank
// highlighted) and the communication table (one row per op of this rank).
import { color } from './charts.js';
import * as fmt from './format.js';
import { COMM_OPS, MEMORY_CATEGORIES } from './views.js';

function cell(text, className) {
  const td = document.createElement('td');
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

function memoryTotal(sample) {
  if (!sample || !sample.memory) return null;
  return MEMORY_CATEGORIES.reduce((acc, c) => acc + (sample.memory[c]?.current_bytes ?? 0), 0);
}

// A small stacked bar of the rank's memory by category, scaled to `max`.
function memoryCell(sample, max) {
  const td = document.createElement('td');
  td.className = 'num';
  const total = memoryTotal(sample);
  if (total == null) {
    td.textContent = fmt.DASH;
    return td;
  }
  const label = document.createElement('span');
  label.textContent = fmt.bytes(total);
  const bar = document.createElement('span');
  bar.className = 'membar';
  bar.setAttribute('aria-hidden', 'true');
  const parts = [];
  for (const c of MEMORY_CATEGORIES) {
    const v = sample.memory[c]?.current_bytes ?? 0;
    if (v <= 0) continue;
    const seg = document.createElement('span');
    seg.style.width = `${max > 0 ? (100 * v) / max : 0}%`;
    seg.style.background = color(c);
    bar.append(seg);
    parts.push(`${c.replace('_', ' ')} ${fmt.bytes(v)} (peak ${fmt.bytes(sample.memory[c]?.peak_bytes)})`);
  }
  td.title = parts.join('\n');
  const wrap = document.createElement('div');
  wrap.className = 'memory-cell';
  wrap.append(bar, label);
  td.append(wrap);
  return td;
}

// The bytes in the rank's device memory (dstrain.device "cuda"), the peak in
// the tooltip; a dash for a rank that trains on the CPU.
function deviceMemoryCell(sample) {
  const d = sample?.device_memory;
  if (!d || !(d.current_bytes > 0 || d.peak_bytes > 0)) {
    const td = cell(fmt.DASH, 'num');
    td.title = sample ? 'trains on the CPU' : '';
    return td;
  }
  const td = cell(fmt.bytes(d.current_bytes), 'num');
  td.title = `on the device now ${fmt.bytes(d.current_bytes)}, peak ${fmt.bytes(d.peak_bytes)}`;
  return td;
}

// ranks: the "ranks" array of /api/v1/ranks. Returns the slowest rank or null.
export function renderRankTable(table, ranks) {
  const tbody = table.tBodies[0];
  const rows = (ranks || []).filter((r) => r && r.identity)
    .sort((a, b) => a.identity.rank - b.identity.rank);
  const reporting = rows.filter((r) => r.sample && typeof r.sample.step_seconds === 'number');
  let slowest = null;
  if (reporting.length > 1) {
    slowest = reporting.reduce((a, b) => (b.sample.step_seconds > a.sample.step_seconds ? b : a));
  }
  const maxMemory = Math.max(0, ...rows.map((r) => memoryTotal(r.sample) ?? 0));
  const fragment = document.createDocumentFragment();
  for (const r of rows) {
    const id = r.identity;
    const s = r.sample;
    const tr = document.createElement('tr');
    tr.dataset.rank = String(id.rank);
    const rankCell = cell(String(id.rank), 'num');
    if (r === slowest) {
      tr.classList.add('slowest');
      const badge = document.createElement('span');
      badge.className = 'badge';
      badge.textContent = 'slowest';
      rankCell.append(' ', badge);
    }
    // communication.slow_node_tolerance: the engine's own verdict.
    if (s && s.straggler) {
      tr.classList.add('straggler');
      const badge = document.createElement('span');
      badge.className = 'badge straggler';
      const pct = typeof s.straggler_slower_by === 'number'
        ? ` +${Math.round(s.straggler_slower_by * 100)}%` : '';
      badge.textContent = `straggler${pct}`;
      badge.title = 'slower than the median compute time by more than slow_node_tolerance';
      rankCell.append(' ', badge);
    }
    tr.append(
      rankCell,
      cell(`${id.dp_rank ?? fmt.DASH} / ${id.tp_rank ?? fmt.DASH} / ${id.pp_rank ?? fmt.DASH}`, 'num'),
      cell(s ? fmt.integer(s.step) : 'no step yet', 'num'),
      cell(s ? fmt.fixed(s.loss, 4) : fmt.DASH, 'num'),
      cell(s ? fmt.si(s.tokens_per_second) : fmt.DASH, 'num'),
      cell(s ? fmt.duration(s.step_seconds) : fmt.DASH, 'num'),
      memoryCell(s, maxMemory),
      deviceMemoryCell(s),
      cell(s ? fmt.bytes(s.process_rss_bytes) : fmt.DASH, 'num'),
      cell(typeof r.age_seconds === 'number' ? fmt.duration(r.age_seconds) : fmt.DASH, 'num'),
    );
    fragment.append(tr);
  }
  if (rows.length === 0) {
    const tr = document.createElement('tr');
    const td = cell('no ranks reported yet');
    td.colSpan = table.tHead.rows[0].cells.length;
    td.className = 'muted';
    tr.append(td);
    fragment.append(tr);
  }
  tbody.replaceChildren(fragment);
  return slowest;
}

// This rank's collectives since the start, one row per op it has run.
export function renderCommTable(table, sample) {
  const tbody = table.tBodies[0];
  const fragment = document.createDocumentFragment();
  for (const op of COMM_OPS) {
    const c = sample?.comm?.[op];
    if (!c || !(c.count > 0)) continue;
    const tr = document.createElement('tr');
    const name = cell(op);
    const swatch = document.createElement('span');
    swatch.className = 'swatch';
    swatch.style.background = color(op);
    swatch.setAttribute('aria-hidden', 'true');
    name.prepend(swatch);
    tr.append(
      name,
      cell(fmt.integer(c.count), 'num'),
      cell(fmt.bytes(c.bytes), 'num'),
      cell(fmt.duration(c.seconds), 'num'),
      cell(fmt.bytesPerSecond(c.bus_bandwidth), 'num'),
    );
    fragment.append(tr);
  }
  if (!fragment.childNodes.length) {
    const tr = document.createElement('tr');
    const td = cell(sample ? 'no collectives yet' : 'waiting for the first step…', 'muted');
    td.colSpan = 5;
    tr.append(td);
    fragment.append(tr);
  }
  tbody.replaceChildren(fragment);
}
