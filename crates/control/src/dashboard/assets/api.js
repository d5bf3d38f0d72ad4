// The REST API as the page uses it: one path prefix, the bearer token, and every
// failure as an ApiError whose message is the server's own one-line `{"error"}` text.
//
// The token: `ferrobay up` prints the dashboard's URL with `#token=...`; the fragment
// never reaches a server (nor its logs). On load the page moves it into sessionStorage
// (this tab only, gone when it closes) and drops it from the address bar. Without one,
// and when the API answers 401, the page asks for it.

/** Prefix of every API call (`docs/api.md`). */
export const API = '/api/v1';

const TOKEN_KEY = 'ferrobay.api-token';

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.name = 'ApiError';
    /** HTTP status, or 0 when the server could not be reached. */
    this.status = status;
  }
}

/** Moves `#token=...` from the address bar into sessionStorage. */
export function adoptTokenFromUrl() {
  const params = new URLSearchParams(location.hash.replace(/^#/, ''));
  const t = params.get('token');
  if (t) {
    sessionStorage.setItem(TOKEN_KEY, t);
    params.delete('token');
    const rest = params.toString();
    history.replaceState(null, '', location.pathname + location.search + (rest ? `#${rest}` : ''));
  }
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(t) {
  if (t) sessionStorage.setItem(TOKEN_KEY, t);
  else sessionStorage.removeItem(TOKEN_KEY);
}

function headers(json) {
  const h = { Accept: 'application/json' };
  const t = token();
  if (t) h.Authorization = `Bearer ${t}`;
  if (json) h['Content-Type'] = 'application/json';
  return h;
}

async function send(url, init) {
  try {
    return await fetch(url, { cache: 'no-store', ...init });
  } catch (e) {
    throw new ApiError(0, `cannot reach the API (${e.message}): is the processor node running?`);
  }
}

/** One JSON call: `call('GET', '/volumes')`, `call('POST', '/volumes', {...})`. */
export async function call(method, path, body) {
  const json = body !== undefined;
  const resp = await send(API + path, {
    method,
    headers: headers(json),
    body: json ? JSON.stringify(body) : undefined,
  });
  const text = await resp.text();
  let value = null;
  try {
    value = text ? JSON.parse(text) : null;
  } catch {
    value = null;
  }
  if (!resp.ok) {
    const message = value && typeof value.error === 'string'
      ? value.error
      : `HTTP ${resp.status} ${resp.statusText}: ${text.slice(0, 200)}`;
    throw new ApiError(resp.status, message);
  }
  if (value === null && text) throw new ApiError(resp.status, `${path}: the answer is not JSON`);
  return value;
}

/** The Prometheus text of `/metrics`. */
export async function metricsText() {
  const resp = await send('/metrics', { headers: headers(false) });
  const text = await resp.text();
  if (!resp.ok) throw new ApiError(resp.status, `/metrics: HTTP ${resp.status}`);
  return text;
}

/** `encodeURIComponent` for one path segment. */
export const seg = encodeURIComponent;
