import { attachStream } from '/assets/stream.js';
import { el, fetchTrajectories, trajectoryURL } from '/assets/trajlist.js';

const vm = document.body.dataset.vm;
const screen = document.getElementById('screen');
const overlay = document.getElementById('overlay');
const vncBox = document.getElementById('vnc');
const logList = document.getElementById('log');
const take = document.getElementById('take');
const giveback = document.getElementById('giveback');
const mode = document.getElementById('mode');
// The VM's routes, or an episode's (/episodes/ID: any agent of a cluster
// serves those).
const api = document.body.dataset.api || `/v1/vms/${encodeURIComponent(vm)}`;

const stats = attachStream(screen, vm, 0, api);
screen.addEventListener('resize', () => { overlay.width = screen.width; overlay.height = screen.height; });

// fps readout
let lastCount = 0;
setInterval(() => {
  document.getElementById('fps').textContent = `${stats.frames - lastCount} fps`;
  lastCount = stats.frames;
}, 1000);

// Action feed: the overlay shows the last few seconds, the log everything.
const recent = [];
let pointer = null;
function summary(e) {
  let s = `${new Date(e.time).toLocaleTimeString()} ${e.source} ${e.kind}`;
  if (e.x !== undefined) s += ` (${e.x}, ${e.y})`;
  if (e.button && e.button !== 'left') s += ` ${e.button}`;
  if (e.keys) s += ` ${e.keys.join('+')}`;
  if (e.text) s += ` "${e.text}"`;
  return s;
}
const feed = new EventSource(`${api}/activity`);
feed.onmessage = (m) => {
  const e = JSON.parse(m.data);
  e.seen = performance.now();
  if (e.x !== undefined) pointer = { x: e.x, y: e.y };
  if (pointer && e.x === undefined) { e.px = pointer.x; e.py = pointer.y; }
  recent.push(e);
  const li = document.createElement('li');
  li.className = e.source;
  li.dataset.kind = e.kind;
  li.textContent = summary(e);
  logList.prepend(li);
  while (logList.children.length > 200) logList.lastChild.remove();
  window.deskfarm.events.push(e);
};

const octx = overlay.getContext('2d');
function draw() {
  const now = performance.now();
  octx.clearRect(0, 0, overlay.width, overlay.height);
  while (recent.length && now - recent[0].seen > 4000) recent.shift();
  for (const e of recent) {
    const a = 1 - (now - e.seen) / 4000;
    octx.globalAlpha = Math.max(a, 0);
    const color = e.source === 'human' ? '#ffb84d' : '#ff3b6b';
    octx.strokeStyle = color; octx.fillStyle = color; octx.lineWidth = 3;
    if (e.x !== undefined) {
      const r = 14 + 20 * (1 - a);
      octx.beginPath(); octx.arc(e.x, e.y, r, 0, 2 * Math.PI); octx.stroke();
      if (e.from_x !== undefined) {
        octx.beginPath(); octx.moveTo(e.from_x, e.from_y); octx.lineTo(e.x, e.y); octx.stroke();
      }
    }
    const label = e.text ? `⌨ ${e.text}` : e.keys ? `⌨ ${e.keys.join('+')}` : '';
    if (label) {
      const x = (e.x ?? e.px ?? 20), y = (e.y ?? e.py ?? 40) + 40;
      octx.font = 'bold 22px sans-serif';
      const w = octx.measureText(label).width;
      octx.globalAlpha = Math.max(a, 0) * 0.8;
      octx.fillStyle = '#000'; octx.fillRect(x - 6, y - 24, w + 12, 32);
      octx.globalAlpha = Math.max(a, 0); octx.fillStyle = color; octx.fillText(label, x, y);
    }
  }
  octx.globalAlpha = 1;
  requestAnimationFrame(draw);
}
requestAnimationFrame(draw);

// Takeover: noVNC over deskfarm's own RFB server (one VNC connection per VM).
let rfb = null;
let token = '';
async function openVNC(tok, viewOnly) {
  const { default: RFB } = await import('/novnc/core/rfb.js');
  if (rfb) rfb.disconnect();
  const proto = location.protocol === 'https:' ? 'wss' : 'ws';
  const q = tok ? `?control_token=${encodeURIComponent(tok)}` : '';
  vncBox.hidden = false;
  screen.hidden = true;
  overlay.hidden = true;
  rfb = new RFB(vncBox, `${proto}://${location.host}${api}/vnc${q}`, { wsProtocols: ['binary'] });
  rfb.viewOnly = viewOnly;
  rfb.scaleViewport = true;
  rfb.focusOnClick = true;
  return new Promise((resolve, reject) => {
    rfb.addEventListener('connect', () => resolve(rfb), { once: true });
    rfb.addEventListener('disconnect', (e) => reject(new Error(`vnc disconnected: clean=${e.detail.clean}`)), { once: true });
  });
}
function closeVNC() {
  if (rfb) { rfb.disconnect(); rfb = null; }
  vncBox.hidden = true; screen.hidden = false; overlay.hidden = false;
}
async function takeControl() {
  const r = await fetch(`${api}/control`, { method: 'POST' });
  if (!r.ok) throw new Error(`take control: ${r.status} ${await r.text()}`);
  token = (await r.json()).control_token;
  await openVNC(token, false);
  take.hidden = true; giveback.hidden = false;
  mode.textContent = 'YOU HAVE CONTROL: agent actions are refused';
  mode.className = 'human';
}
async function handBack() {
  closeVNC();
  await fetch(`${api}/control`, { method: 'DELETE' });
  token = '';
  take.hidden = false; giveback.hidden = true;
  mode.textContent = 'watching (read-only)'; mode.className = 'status';
}
take.onclick = () => takeControl().catch((e) => { mode.textContent = String(e); });
giveback.onclick = () => handBack().catch((e) => { mode.textContent = String(e); });

// The VM's recorded trajectories, newest first, each a link to its page.
fetchTrajectories().then((list) => {
  const mine = ((list && list.trajectories) || []).filter((t) => t.vm === vm).slice(0, 10); // the rest: the header's link
  document.getElementById('recorded').hidden = !mine.length;
  document.getElementById('trajectories').replaceChildren(...mine.map((t) => el('li', { 'data-trajectory': t.id },
    el('a', { href: trajectoryURL(t.id) }, t.id), ` ${t.state}, ${t.steps} steps`)));
}).catch(() => {});

// For tests and the console.
window.deskfarm = { stats, events: [], openVNC, closeVNC, takeControl, handBack, rfb: () => rfb };
