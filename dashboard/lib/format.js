// Number formatting for the dashboard: SI units, bytes, durations.

const DASH = '\u2014';

export function isNum(v) {
  return typeof v === 'number' && Number.isFinite(v);
}

// 1234567 -> "1.23 M"; unit appended ("1.23 Mtok/s").
export function si(v, unit = '', digits = 3) {
  if (!isNum(v)) return DASH;
  const a = Math.abs(v);
  const prefixes = [[1e15, 'P'], [1e12, 'T'], [1e9, 'G'], [1e6, 'M'], [1e3, 'k']];
  for (const [scale, p] of prefixes) {
    if (a >= scale) return `${(v / scale).toPrecision(digits)} ${p}${unit}`;
  }
  if (a === 0) return `0${unit ? ' ' + unit : ''}`;
  return `${Number(v.toPrecision(digits))}${unit ? ' ' + unit : ''}`;
}

// Binary bytes: 1536 -> "1.50 KiB".
export function bytes(v) {
  if (!isNum(v)) return DASH;
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let i = 0;
  let x = Math.abs(v);
  while (x >= 1024 && i < units.length - 1) {
    x /= 1024;
    i++;
  }
  const s = i === 0 ? String(Math.round(x)) : x.toPrecision(3);
  return `${v < 0 ? '-' : ''}${s} ${units[i]}`;
}

export function bytesPerSecond(v) {
  return isNum(v) ? `${bytes(v)}/s` : DASH;
}

// Seconds -> "12.3 ms", "1.20 s", "850 µs".
export function duration(v) {
  if (!isNum(v)) return DASH;
  const a = Math.abs(v);
  if (a === 0) return '0 s';
  if (a < 1e-3) return `${(v * 1e6).toPrecision(3)} \u00b5s`;
  if (a < 1) return `${(v * 1e3).toPrecision(3)} ms`;
  if (a < 120) return `${v.toPrecision(3)} s`;
  const m = Math.floor(a / 60);
  return `${v < 0 ? '-' : ''}${m} min ${Math.round(a - m * 60)} s`;
}

export function fixed(v, digits = 4) {
  if (!isNum(v)) return DASH;
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(2);
  return v.toFixed(digits);
}

export function percent(v) {
  return isNum(v) ? `${(v * 100).toFixed(1)} %` : DASH;
}

export function integer(v) {
  return isNum(v) ? Math.round(v).toLocaleString('en-US') : DASH;
}

export { DASH };
