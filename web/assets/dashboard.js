import { attachStream } from '/assets/stream.js';

// The dashboard follows the farm's live feed (GET /v1/live, server-sent
// events): each message is the whole farm, and the tables are redrawn from
// it. Each ready VM has a small live thumbnail drawn from its frame stream
// at THUMB_FPS; a thumbnail's canvas and stream outlive the redraws and end
// with the VM.
const THUMB_FPS = 1;

const live = document.getElementById('live');
const thumbs = new Map(); // vm id -> { canvas, stream }
let state = null;
window.deskfarm = { get state() { return state; }, thumbs };

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k.startsWith('data-') || k === 'class' || k === 'href' || k === 'colspan') e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) e.append(c instanceof Node ? c : String(c));
  return e;
}

// span formats a duration in ms for people: "3m12s" (never negative).
function span(ms) {
  let s = Math.max(0, Math.round(ms / 1000));
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  return (h ? `${h}h` : '') + (h || m ? `${m}m` : '') + `${s}s`;
}

function thumb(vm) {
  let t = thumbs.get(vm.id);
  if (!t) {
    const canvas = el('canvas', { class: 'thumb', 'data-thumb': vm.id, width: 160, height: 100 });
    t = { canvas, stream: attachStream(canvas, vm.id, THUMB_FPS) };
    thumbs.set(vm.id, t);
  }
  return t.canvas;
}

function dropThumbs(keep) {
  for (const [id, t] of thumbs) {
    if (keep.has(id)) continue;
    t.stream.close();
    thumbs.delete(id);
  }
}

function render() {
  const now = Date.now();
  const vmBody = document.querySelector('#vms tbody');
  const ready = new Set();
  const rows = state.vms.map((vm) => {
    let pic = '';
    if (vm.state === 'ready') {
      ready.add(vm.id);
      pic = el('a', { href: `/vms/${encodeURIComponent(vm.id)}` }, thumb(vm));
    }
    const last = vm.last_action
      ? [vm.last_action, ' ', el('span', { class: 'status' }, `${span(now - Date.parse(vm.last_action_at))} ago`)]
      : ['-'];
    return el('tr', { 'data-vm': vm.id },
      el('td', {}, pic),
      el('td', {}, el('a', { href: `/vms/${encodeURIComponent(vm.id)}` }, vm.id)),
      el('td', { class: `state-${vm.state}` }, vm.state),
      el('td', {}, vm.image), el('td', {}, vm.accel),
      el('td', { 'data-since': vm.created_at }, span(now - Date.parse(vm.created_at))),
      el('td', {}, vm.episode || (vm.pool ? `${vm.pool} (warm)` : '-')),
      el('td', {}, ...last),
      el('td', {}, vm.human ? el('span', { class: 'human' }, 'human') : 'agent'));
  });
  vmBody.replaceChildren(...(rows.length ? rows : [el('tr', {}, el('td', { colspan: 9 }, 'no VMs'))]));
  dropThumbs(ready);

  const human = new Map(state.vms.map((vm) => [vm.id, vm.human]));
  const epRows = state.episodes.map((ep) => el('tr', { 'data-episode': ep.id },
    el('td', {}, ep.id),
    el('td', {}, el('a', { href: `/vms/${encodeURIComponent(ep.vm)}` }, ep.vm)),
    el('td', {}, ep.pool),
    el('td', {}, human.get(ep.vm) ? el('span', { class: 'human' }, 'human') : 'agent'),
    el('td', { 'data-since': ep.created_at }, `${span(now - Date.parse(ep.created_at))} ago`),
    el('td', { 'data-until': ep.expires_at }, span(Date.parse(ep.expires_at) - now))));
  document.querySelector('#episodes tbody').replaceChildren(
    ...(epRows.length ? epRows : [el('tr', {}, el('td', { colspan: 6 }, 'no episodes'))]));

  const poolRows = state.pools.map((p) => el('tr', { 'data-pool': p.name },
    el('td', {}, p.name), el('td', {}, p.image),
    el('td', { class: 'warm' }, p.warm), el('td', { class: 'leased' }, p.leased),
    el('td', {}, p.booting), el('td', {}, p.ending),
    el('td', {}, `${p.min_warm} / ${p.max}`),
    el('td', {}, p.last_error || '')));
  document.querySelector('#pools tbody').replaceChildren(
    ...(poolRows.length ? poolRows : [el('tr', {}, el('td', { colspan: 8 }, 'no pools'))]));
}

// Uptimes and expiries count on between messages.
setInterval(() => {
  const now = Date.now();
  for (const td of document.querySelectorAll('td[data-until]')) td.textContent = span(Date.parse(td.dataset.until) - now);
  for (const td of document.querySelectorAll('#vms td[data-since]')) td.textContent = span(now - Date.parse(td.dataset.since));
}, 1000);

const feed = new EventSource('/v1/live');
feed.onopen = () => { document.body.dataset.live = 'open'; };
feed.addEventListener('farm', (ev) => {
  state = JSON.parse(ev.data);
  render();
  live.textContent = `live, as of ${new Date(state.at).toLocaleTimeString()}`;
});
// EventSource reconnects by itself; say so meanwhile.
feed.onerror = () => { document.body.dataset.live = 'reconnecting'; live.textContent = 'reconnecting…'; };
