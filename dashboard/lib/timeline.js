// The pipeline timeline: what this rank's stage did during its last step
// (the snapshot's "timeline": op, micro_batch, chunk, start, end in seconds),
// drawn as bars on three lanes — compute (forward, backward, or a zero-bubble
// schedule's two backward halves), waiting for a
// neighbour (the receives: the bubble) and the rest of the step (reductions,
// clipping, the optimizer). Hidden on ranks without a pipeline.
import * as fmt from './format.js';

const LANES = [
  { name: 'compute', ops: ['forward', 'backward', 'backward_input', 'backward_weight'] },
  { name: 'waiting', ops: ['recv_activation', 'recv_gradient'] },
  { name: 'step', ops: ['zero_gradients', 'reduce_gradients', 'reduce_tied_gradients',
    'gather_gradients', 'clip_gradients', 'optimizer_step', 'record_step'] },
];

function laneOf(op) {
  return LANES.findIndex((lane) => lane.ops.includes(op));
}

function label(event) {
  const what = event.micro_batch >= 0 ? `${event.op} of micro-batch ${event.micro_batch}` : event.op;
  const chunk = event.chunk > 0 ? ` (chunk ${event.chunk})` : '';
  return `${what}${chunk}: ${fmt.duration(event.end - event.start)}`;
}

export function renderTimeline(panel, container, summary, events) {
  const list = Array.isArray(events) ? events : [];
  panel.hidden = list.length === 0;
  if (panel.hidden) return;
  const total = Math.max(...list.map((e) => e.end), 1e-9);
  let waiting = 0;
  const lanes = LANES.map((lane) => {
    const row = document.createElement('div');
    row.className = 'timeline-lane';
    row.dataset.lane = lane.name;
    const name = document.createElement('span');
    name.className = 'timeline-name';
    name.textContent = lane.name;
    row.appendChild(name);
    const track = document.createElement('div');
    track.className = 'timeline-track';
    row.appendChild(track);
    return { row, track };
  });
  for (const event of list) {
    const lane = laneOf(event.op);
    if (lane < 0) continue;  // sends are posted, not waited for
    if (lane === 1) waiting += event.end - event.start;
    const bar = document.createElement('div');
    bar.className = `timeline-bar op-${event.op}`;
    bar.style.left = `${(100 * event.start) / total}%`;
    bar.style.width = `${Math.max(0.2, (100 * (event.end - event.start)) / total)}%`;
    bar.title = label(event);
    lanes[lane].track.appendChild(bar);
  }
  container.replaceChildren(...lanes.map((l) => l.row));
  summary.textContent = `step ${fmt.duration(total)}, waiting for neighbours ` +
    `${fmt.duration(waiting)} (${fmt.percent(waiting / total)})`;
}
