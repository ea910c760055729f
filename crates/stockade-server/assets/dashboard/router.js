// The dashboard's place in the URL: everything a view shows is in the
// hash, so reload, back/forward and a new tab keep it.
//
//   #/                                   the sandbox list
//   #/new?snapshot=ID | ?sandbox=ID      the create form (optionally with a source,
//   #/new?volume=NAME                    a shared volume to mount, or a template)
//   #/new?template=NAME
//   #/sandbox/ID/terminal | commands     the console, in one of its modes
//   #/sandbox/ID/notebook?python=CTX     … or as a notebook, with the ids of its
//                                        code contexts by language
//   #/sandbox/ID/files/workspace/src     the file browser at a path
//   #/sandbox/ID/details | logs | snapshots
//   #/snapshots  #/templates  #/volumes  #/admin/accounts  #/admin/teams
//   #/shared-volumes                     the account's shared volumes
//   #/shared-volumes/NAME/files/dir/sub  one of them (by name or id), its
//                                        files at a path (its root without /files)
//   #/webhooks  #/audit?accountId=ID&resourceId=ID
//
// `?show=terminated` on any of them lists terminated sandboxes.

export const SANDBOX_TABS = ['terminal', 'commands', 'notebook', 'files', 'details', 'logs', 'snapshots'];

/** The path that the hash segments after `…/files` stand for. */
function pathOf(parts) {
  const rest = parts.map((p) => { try { return decodeURIComponent(p); } catch (_) { return p; } });
  return `/${rest.filter((p, i) => p || i === rest.length - 1).join('/')}`.replace(/\/+$/, '') || '/';
}

/** A path as hash segments, each escaped: `/a b/c` is `/a%20b/c`, the root `/`. */
function pathHash(path) {
  return path === '/' ? '/' : path.split('/').map(encodeURIComponent).join('/');
}

/** The route a hash stands for. */
export function parse(hash) {
  let h = String(hash || '').replace(/^#/, '');
  let query = '';
  const q = h.indexOf('?');
  if (q >= 0) { query = h.slice(q + 1); h = h.slice(0, q); }
  const params = Object.fromEntries(new URLSearchParams(query));
  const parts = h.split('/').slice(1);
  const seg = (i) => { try { return decodeURIComponent(parts[i] || ''); } catch (_) { return parts[i] || ''; } };
  switch (seg(0)) {
    case 'new': return { page: 'new', params };
    case 'snapshots': return { page: 'snapshots', params };
    case 'templates': return { page: 'templates', params };
    case 'volumes': return { page: 'volumes', params };
    case 'shared-volumes': {
      const volume = seg(1);
      if (!volume) return { page: 'shared-volumes', params };
      return { page: 'shared-volumes', volume, path: seg(2) === 'files' && parts.length > 3 ? pathOf(parts.slice(3)) : '/', params };
    }
    case 'webhooks': return { page: 'webhooks', params };
    case 'audit': return { page: 'audit', params };
    case 'admin': return { page: 'admin', section: seg(1) === 'teams' ? 'teams' : 'accounts', params };
    case 'sandbox': {
      const id = seg(1);
      if (!id) return { page: 'home', params };
      const tab = SANDBOX_TABS.includes(seg(2)) ? seg(2) : null;
      const route = { page: 'sandbox', id, tab, params };
      if (tab === 'files' && parts.length > 3) route.path = pathOf(parts.slice(3));
      return route;
    }
    default: return { page: 'home', params };
  }
}

/** The hash of a route (the inverse of `parse`). */
export function format(route) {
  const params = { ...(route.params || {}) };
  for (const [k, v] of Object.entries(params)) if (v === undefined || v === null || v === '') delete params[k];
  const query = Object.keys(params).length ? `?${new URLSearchParams(params)}` : '';
  switch (route.page) {
    case 'new': return `#/new${query}`;
    case 'snapshots': return `#/snapshots${query}`;
    case 'templates': return `#/templates${query}`;
    case 'volumes': return `#/volumes${query}`;
    case 'shared-volumes': {
      if (!route.volume) return `#/shared-volumes${query}`;
      const files = route.path && route.path !== '/' ? `/files${pathHash(route.path)}` : '';
      return `#/shared-volumes/${encodeURIComponent(route.volume)}${files}${query}`;
    }
    case 'webhooks': return `#/webhooks${query}`;
    case 'audit': return `#/audit${query}`;
    case 'admin': return `#/admin/${route.section || 'accounts'}${query}`;
    case 'sandbox': {
      let h = `#/sandbox/${encodeURIComponent(route.id)}`;
      if (route.tab) h += `/${route.tab}`;
      if (route.tab === 'files' && route.path) h += pathHash(route.path);
      return h + query;
    }
    default: return `#/${query}`;
  }
}

let handler = () => {};
let current = parse(location.hash);

/** The route shown now. */
export function here() { return current; }

/** Calls `fn(route)` whenever the place changes (links, back/forward, `go`). */
export function onRoute(fn) {
  handler = fn;
  window.addEventListener('hashchange', () => {
    current = parse(location.hash);
    handler(current);
  });
}

/**
 * Goes to `route`: a new history entry, or with `replace` the current one
 * rewritten (for a place that only got more precise). The list filter
 * follows along unless the route sets its own.
 */
export function go(route, { replace = false } = {}) {
  const params = { ...(route.params || {}) };
  if (!('show' in params) && current.params && current.params.show) params.show = current.params.show;
  const next = { ...route, params };
  const hash = format(next);
  if (hash === location.hash || (hash === '#/' && !location.hash)) {
    current = parse(hash);
    handler(current);
    return;
  }
  if (replace) {
    history.replaceState(history.state, '', hash);
    current = parse(hash);
    handler(current);
  } else {
    location.hash = hash;
  }
}

/** Re-reads the hash (after sign-in) and shows it. */
export function reapply() {
  current = parse(location.hash);
  handler(current);
}
