import { attachStream } from '/assets/stream.js';
import { el, fetchTrajectories, fill, trajectoryURL } from '/assets/trajlist.js';

// The dashboard follows the farm's live feed (GET /v1/live, server-sent
// events): each message is the whole farm, and the tables are redrawn from
// it. Each ready VM has a small live thumbnail drawn from its frame stream
// at THUMB_FPS; a thumbnail's canvas and stream outlive the redraws and end
// with the VM.
const THUMB_FPS = 1;
// The dashboard lists the newest RECENT trajectories (all at /trajectories).
const RECENT = 10;

const live = document.getElementById('live');
const thumbs = new Map(); // vm id -> { canvas, stream }
let state = null;
window.deskfarm = { get state() { return state; }, thumbs };

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
    el('td', { 'data-until': ep.expires_at }, span(Date.parse(ep.expires_at) - now)),
    el('td', {}, trajectoryCell(ep))));
  document.querySelector('#episodes tbody').replaceChildren(
    ...(epRows.length ? epRows : [el('tr', {}, el('td', { colspan: 7 }, 'no episodes'))]));
  refreshTrajectories(state.episodes);

  const poolRows = state.pools.map((p) => el('tr', { 'data-pool': p.name },
    el('td', {}, p.name), el('td', {}, p.image),
    el('td', { class: 'warm' }, p.warm), el('td', { class: 'leased' }, p.leased),
    el('td', {}, p.booting), el('td', {}, p.ending),
    el('td', {}, `${p.min_warm} / ${p.max}`),
    el('td', {}, p.last_error || '')));
  document.querySelector('#pools tbody').replaceChildren(
    ...(poolRows.length ? poolRows : [el('tr', {}, el('td', { colspan: 8 }, 'no pools'))]));
}

// The trajectories are read again when the set of episodes changes (one
// began recording, or ended and so finished its trajectory).
let episodeSet = null;
let recorded = new Set(); // trajectory ids, as of the last read
function refreshTrajectories(episodes) {
  const key = episodes.map((ep) => ep.id).sort().join(' ');
  if (key === episodeSet) return;
  episodeSet = key;
  fetchTrajectories().then((list) => {
    const box = document.getElementById('recent');
    box.hidden = !list;
    if (!list) return;
    const ts = list.trajectories || [];
    fill(document.querySelector('#trajectories tbody'), ts.slice(0, RECENT));
    const ids = new Set(ts.map((t) => t.id));
    const news = [...ids].some((i) => !recorded.has(i));
    recorded = ids;
    if (news) render();
  }).catch(() => {});
}

// trajectoryCell links an episode to its trajectory (its id is the
// episode's), when it has one.
function trajectoryCell(ep) {
  const url = ep.trajectory_url || (recorded.has(ep.id) ? trajectoryURL(ep.id) : '');
  if (!url) return '-';
  return el('a', { href: url }, ep.recording ? 'recording' : 'view');
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
