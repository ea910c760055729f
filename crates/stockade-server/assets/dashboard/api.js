// Requests to Stockade's API from the dashboard.
//
// The API token is handed to the server once, at sign-in; the session then
// lives in an HttpOnly cookie that no script (this one included) can read.
// Every request goes to this origin with that cookie and the CSRF header.

export const CSRF = { 'X-Stockade-CSRF': '1' };

/** An error answer of the API, with its message, code and field errors. */
export class ApiError extends Error {
  constructor(status, body) {
    const detail = body && body.error ? body.error : null;
    super(detail && detail.message ? detail.message : `The server answered ${status}.`);
    this.status = status;
    this.code = detail ? detail.code : undefined;
    this.fields = (detail && detail.details && Array.isArray(detail.details.fields)) ? detail.details.fields : [];
  }
}

/** True when the server has no such route at all (a feature it lacks). */
export function routeMissing(e) {
  return e instanceof ApiError && e.status === 404 && /^No route for /.test(e.message);
}

let unauthorized = () => {};
/** What to do when the session has ended (the API answers 401). */
export function onUnauthorized(fn) { unauthorized = fn; }

function failure(e) {
  return new ApiError(0, { error: { message: `The server did not answer (${e.message}).` } });
}

/**
 * `fetch`, tried again (twice, after a pause) when the request never got an
 * answer and may be repeated safely: a browser on the Docker host drops
 * connections it is setting up whenever Docker adds or removes a network
 * interface, which happens each time a sandbox starts or stops.
 */
async function fetchRetried(path, init, repeatable) {
  for (let attempt = 0; ; attempt++) {
    try {
      return await fetch(path, init);
    } catch (e) {
      if (e.name === 'AbortError') throw e;
      if (!repeatable || attempt >= 2) throw failure(e);
      await new Promise((resolve) => { setTimeout(resolve, 250 * (attempt + 1)); });
      if (init.signal && init.signal.aborted) throw e;
    }
  }
}

/** Methods whose request may be sent twice without harm. */
const REPEATABLE = new Set(['GET', 'HEAD', 'PUT']);

async function errorOf(resp) {
  const text = await resp.text().catch(() => '');
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch (_) { json = null; }
  const err = new ApiError(resp.status, json && json.error ? json : { error: { message: text.trim() || `The server answered ${resp.status}.` } });
  if (resp.status === 401) unauthorized(err);
  return err;
}

/**
 * One API request. `body` is JSON unless `opts.raw` is set (then it is sent
 * as it is: a File, Blob or string). Answers the parsed JSON (null when
 * empty), or the Response itself with `opts.response`. GET, HEAD and PUT
 * are sent again when the connection failed; so is any request marked
 * `opts.repeatable` (one that changes nothing the second time).
 */
export async function api(method, path, body, opts = {}) {
  const headers = { ...CSRF, ...(opts.headers || {}) };
  let payload;
  if (body !== undefined && opts.raw) payload = body;
  else if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    payload = JSON.stringify(body);
  }
  const resp = await fetchRetried(path, { method, headers, credentials: 'same-origin', body: payload, signal: opts.signal },
    REPEATABLE.has(method) || opts.repeatable);
  if (!resp.ok) throw await errorOf(resp);
  if (opts.response) return resp;
  const text = await resp.text();
  if (!text) return null;
  try { return JSON.parse(text); } catch (_) { return text; }
}

/**
 * Opens a Server-Sent Events stream and calls `onEvent({event, data, id})`
 * for each event until it ends or `signal` aborts it. An error answer
 * throws ApiError before any event.
 */
export async function sse(path, { method = 'GET', body, signal, onEvent, onOpen }) {
  const headers = { ...CSRF, Accept: 'text/event-stream' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const resp = await fetchRetried(path, {
    method, headers, credentials: 'same-origin', signal,
    body: body === undefined ? undefined : JSON.stringify(body),
  }, method === 'GET');
  if (!resp.ok) throw await errorOf(resp);
  if (onOpen) onOpen();
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  let ev = { event: 'message', data: [], id: null };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) {
      let line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      if (line.endsWith('\r')) line = line.slice(0, -1);
      if (line === '') {
        if (ev.data.length) onEvent({ event: ev.event, data: ev.data.join('\n'), id: ev.id });
        ev = { event: 'message', data: [], id: null };
      } else if (!line.startsWith(':')) {
        const i = line.indexOf(':');
        const field = i < 0 ? line : line.slice(0, i);
        let val = i < 0 ? '' : line.slice(i + 1);
        if (val.startsWith(' ')) val = val.slice(1);
        if (field === 'event') ev.event = val;
        else if (field === 'data') ev.data.push(val);
        else if (field === 'id') ev.id = val;
      }
    }
  }
}

/** The text of a stream event whose data may be JSON (`"…"`, `{data}` or `{text}`). */
export function eventText(data) {
  try {
    const v = JSON.parse(data);
    if (typeof v === 'string') return v;
    if (v && typeof v.data === 'string') return v.data;
    if (v && typeof v.text === 'string') return v.text;
  } catch (_) { /* plain text */ }
  return data;
}

/** `/api/v1/sandbox/{id}{rest}`, with the id escaped. */
export function sandboxPath(id, rest = '') {
  return `/api/v1/sandbox/${encodeURIComponent(id)}${rest}`;
}

/** The URL of a file operation on `path` inside a sandbox. */
export function filesUrl(id, path, rest = '', extra = '') {
  return sandboxPath(id, `/files${rest}?path=${encodeURIComponent(path)}${extra}`);
}

/** `/api/v1/shared-volumes/{volume}{rest}`, with the volume's name or id escaped. */
export function volumePath(volume, rest = '') {
  return `/api/v1/shared-volumes/${encodeURIComponent(volume)}${rest}`;
}

/** The URL of a file operation (`rest`: '', `/content`, `/mkdir`) on `path` of a shared volume. */
export function volumeFilesUrl(volume, path, rest = '', extra = '') {
  return volumePath(volume, `/files${rest}?path=${encodeURIComponent(path)}${extra}`);
}
