// The JSON API of the metrics server (metrics/monitor.h), fetched relative to
// the page so a reverse proxy under a path prefix works. A bearer token, when
// the server wants one, comes from the URL fragment: #token=SECRET.

const TIMEOUT_MS = 5000;

export class ApiError extends Error {
  constructor(message, status = 0) {
    super(message);
    this.status = status;
  }
}

// Options from the URL fragment, e.g. #token=abc&last=2000&interval=2000.
export function fragmentOptions() {
  const params = new URLSearchParams(window.location.hash.replace(/^#/, ''));
  const int = (name, fallback, min, max) => {
    const v = Number.parseInt(params.get(name) ?? '', 10);
    return Number.isFinite(v) ? Math.min(max, Math.max(min, v)) : fallback;
  };
  return {
    token: params.get('token') || '',
    last: int('last', 600, 10, 100000),           // steps kept in the charts
    intervalMs: int('interval', 1000, 250, 60000), // poll period
  };
}

export async function getJson(path, token) {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), TIMEOUT_MS);
  const headers = { Accept: 'application/json' };
  if (token) headers.Authorization = `Bearer ${token}`;
  let response;
  try {
    response = await fetch(path, { headers, cache: 'no-store', signal: controller.signal });
  } catch (e) {
    throw new ApiError(e.name === 'AbortError' ? `${path}: no answer in ${TIMEOUT_MS / 1000} s`
                                               : `${path}: ${e.message || 'network error'}`);
  } finally {
    clearTimeout(timer);
  }
  if (response.status === 401 || response.status === 403) {
    throw new ApiError(`${path}: HTTP ${response.status} (the server wants a bearer token: ` +
                       'open the page as …/#token=YOUR_TOKEN)', response.status);
  }
  if (!response.ok) throw new ApiError(`${path}: HTTP ${response.status}`, response.status);
  try {
    return await response.json();
  } catch (e) {
    throw new ApiError(`${path}: not JSON (${e.message})`, response.status);
  }
}
