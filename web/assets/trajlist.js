// The recorded trajectories (GET /v1/trajectories), as the list page, the
// dashboard and a VM's page show them: one row per trajectory, newest
// first, its id linking to its page (/trajectories/{id}).

export function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k.startsWith('data-') || k === 'class' || k === 'href' || k === 'colspan' || k === 'title') e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) e.append(c instanceof Node ? c : String(c));
  return e;
}

// bytes formats a size for people: "12.3 MB".
export function bytes(n) {
  const units = ['B', 'kB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) { n /= 1000; i++; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

// seconds formats a duration in seconds: "3m12s".
export function seconds(s) {
  s = Math.max(0, Math.round(s));
  const m = Math.floor(s / 60);
  return m ? `${m}m${s - m * 60}s` : `${s}s`;
}

export function trajectoryURL(id) { return `/trajectories/${encodeURIComponent(id)}`; }

// fetchTrajectories returns GET /v1/trajectories, or null when the farm
// keeps none (the route answers an error: not recording here).
export async function fetchTrajectories() {
  const r = await fetch('/v1/trajectories', { headers: { Accept: 'application/json' } });
  if (!r.ok) return null;
  return r.json();
}

// The columns of a trajectory row.
export const header = ['trajectory', 'state', 'VM', 'episode', 'pool', 'started', 'steps', 'video', 'size', 'result'];

// row is one trajectory's table row.
export function row(t) {
  let state = t.state;
  if (t.stopped) state += ` (${t.stopped})`;
  else if (t.end_reason) state += ` (${t.end_reason})`;
  return el('tr', { 'data-trajectory': t.id },
    el('td', {}, el('a', { href: trajectoryURL(t.id) }, t.id)),
    el('td', { class: `state-${t.state}` }, state),
    el('td', {}, t.vm || '-'), el('td', {}, t.episode || '-'), el('td', {}, t.pool || '-'),
    el('td', {}, new Date(t.started_at).toLocaleString()),
    el('td', { class: 'steps' }, t.steps),
    el('td', {}, t.video ? (t.video_seconds ? seconds(t.video_seconds) : 'yes') : '-'),
    el('td', {}, bytes(t.bytes || 0)),
    el('td', {}, t.result !== undefined && t.result !== null ? t.result : '-'));
}

// fill draws trajectories into a table's body (empty says so).
export function fill(tbody, list) {
  const rows = list.map(row);
  tbody.replaceChildren(...(rows.length ? rows : [el('tr', {}, el('td', { colspan: header.length }, 'no trajectories'))]));
}
