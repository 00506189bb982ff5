import { bytes, el, seconds } from '/assets/trajlist.js';

// One trajectory (GET /v1/trajectories/{id}): its video, a timeline of its
// steps that the arrow keys scrub, and for the current step its screenshot
// after the step, with where it clicked, dragged or scrolled drawn over it
// (the step's neutral actions, in its screenshot_size coordinates: the
// overlay's viewBox is that size, so the marks scale with the image), its
// request and its answer. While the trajectory records, the page reloads
// its steps every few seconds.
const RELOAD_MS = 2000;
const MAX_JSON_CHARS = 200000; // a huge request is cut, not frozen on

const id = document.body.dataset.id;
const base = `/v1/trajectories/${encodeURIComponent(id)}`;
const $ = (x) => document.getElementById(x);
const video = $('video'), timeline = $('timeline'), shot = $('shot'), marks = $('marks'), noshot = $('noshot');
const SVG = 'http://www.w3.org/2000/svg';

let traj = null;
let steps = [];
let cur = -1;
let videoOf = ''; // the trajectory's state when the video was loaded

// fileURL is a file of the trajectory's deskfarm/ directory.
function fileURL(name) { return `${base}/files/${name.split('/').map(encodeURIComponent).join('/')}`; }

// size parses "WxH".
function size(s) {
  const m = /^(\d+)x(\d+)$/.exec(s || '');
  return m ? [Number(m[1]), Number(m[2])] : null;
}

// offset is where step s starts in the video, in seconds.
function offset(s) { return (Date.parse(s.time) - Date.parse(traj.started_at)) / 1000; }

function pretty(raw) {
  if (raw === undefined || raw === null) return '';
  let s = typeof raw === 'string' ? raw : JSON.stringify(raw, null, 2);
  if (s.length > MAX_JSON_CHARS) s = `${s.slice(0, MAX_JSON_CHARS)}\n… (${s.length - MAX_JSON_CHARS} more characters)`;
  return s;
}

// describe is one neutral action for people.
function describe(a) {
  let s = a.kind;
  if (a.from) s += ` (${a.from.x}, ${a.from.y}) →`;
  for (const p of a.via || []) s += ` (${p.x}, ${p.y}) →`;
  if (a.x !== undefined) s += ` (${a.x}, ${a.y})`;
  if (a.dx !== undefined) s += ` by (${a.dx}, ${a.dy})`;
  if (a.button && a.button !== 'left') s += ` ${a.button}`;
  if (a.count > 1) s += ` ×${a.count}`;
  if (a.direction) s += ` ${a.direction}${a.amount ? ` ${a.amount}` : ''}`;
  if (a.keys) s += ` ${a.keys.join('+')}`;
  if (a.modifiers) s += ` +${a.modifiers.join('+')}`;
  if (a.text !== undefined) s += ` ${JSON.stringify(a.text)}`;
  if (a.duration_ms) s += ` ${a.duration_ms} ms`;
  if (a.region) s += ` [${a.region.join(', ')}]`;
  return s;
}

function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  marks.append(e);
  return e;
}

// scaledCursor is a step's cursor (native pixels) in its screenshot's
// coordinates.
function scaledCursor(s, w, h) {
  const n = size(s.native_size) || size(traj.native_size);
  if (!s.cursor || !n) return null;
  return { x: s.cursor.x * w / n[0], y: s.cursor.y * h / n[1] };
}

// draw puts step i's actions on the overlay, w x h being its coordinates.
function draw(i, w, h) {
  const s = steps[i];
  marks.replaceChildren();
  marks.setAttribute('viewBox', `0 0 ${w} ${h}`);
  marks.setAttribute('class', s.actor === 'person' ? 'person' : 'agent');
  const r = Math.max(w, h) / 64;
  // Where the pointer is: an action without a point acts there. Before the
  // first action, it is where the previous step left it.
  let pos = i > 0 ? scaledCursor(steps[i - 1], w, h) : null;
  const acts = Array.isArray(s.actions) ? s.actions : [];
  const label = (n, p) => { if (acts.length > 1) svg('text', { x: p.x + r, y: p.y - r }, String(n)); };
  acts.forEach((a, k) => {
    const at = a.x !== undefined ? { x: a.x, y: a.y } : null;
    const p = at || pos;
    const inferred = at ? '' : ' inferred';
    const data = (e) => { e.dataset.action = k; e.dataset.kind = a.kind; return e; };
    switch (a.kind) {
      case 'click':
        if (!p) break;
        data(svg('circle', { class: `click${inferred}`, cx: p.x, cy: p.y, r }));
        for (let c = 1; c < (a.count || 1); c++) svg('circle', { class: 'click', cx: p.x, cy: p.y, r: r * (1 - c * 0.3) });
        if (a.button && a.button !== 'left') svg('text', { x: p.x - r, y: p.y + 2.2 * r }, a.button);
        label(k + 1, p);
        break;
      case 'button_down': case 'button_up':
        if (!p) break;
        data(svg('circle', { class: `press${inferred}`, cx: p.x, cy: p.y, r: r * 0.7 }));
        label(k + 1, p);
        break;
      case 'drag': {
        const pts = [a.from || pos, ...(a.via || []), at].filter(Boolean);
        data(svg('polyline', { class: 'drag', points: pts.map((q) => `${q.x},${q.y}`).join(' ') }));
        svg('circle', { class: 'drag', cx: pts[0].x, cy: pts[0].y, r: r * 0.5 });
        svg('circle', { class: 'drag', cx: at.x, cy: at.y, r });
        label(k + 1, at);
        break;
      }
      case 'scroll': {
        if (!p) break;
        const d = { up: [0, -1], down: [0, 1], left: [-1, 0], right: [1, 0] }[a.direction || 'down'];
        data(svg('circle', { class: `scroll${inferred}`, cx: p.x, cy: p.y, r: r * 0.6 }));
        svg('line', { class: 'scroll', x1: p.x, y1: p.y, x2: p.x + d[0] * 3 * r, y2: p.y + d[1] * 3 * r });
        label(k + 1, p);
        break;
      }
      case 'move':
        if (pos) svg('line', { class: 'move', x1: pos.x, y1: pos.y, x2: at.x, y2: at.y });
        data(svg('circle', { class: 'move', cx: at.x, cy: at.y, r: r * 0.3 }));
        break;
      case 'move_by':
        if (pos) {
          const to = { x: pos.x + a.dx, y: pos.y + a.dy };
          data(svg('line', { class: 'move', x1: pos.x, y1: pos.y, x2: to.x, y2: to.y }));
          pos = to;
        }
        return;
      default:
        return;
    }
    if (at) pos = at;
  });
  const c = scaledCursor(s, w, h);
  if (c) {
    svg('line', { class: 'cursor', x1: c.x - r / 2, y1: c.y, x2: c.x + r / 2, y2: c.y });
    svg('line', { class: 'cursor', x1: c.x, y1: c.y - r / 2, x2: c.x, y2: c.y + r / 2 });
  }
}

function meta(s) {
  const rows = [['time', new Date(s.time).toLocaleString()], ['actor', s.actor], ['kind', s.kind]];
  if (s.tool) rows.push(['tool', s.tool]);
  if (s.status) rows.push(['status', s.status]);
  if (s.duration_ms) rows.push(['took', `${s.duration_ms.toFixed(0)} ms`]);
  if (s.settle_ms) rows.push(['settle', `${s.settle_ms.toFixed(0)} ms`]);
  if (s.screenshot_size) rows.push(['screenshot', s.screenshot_size + (s.native_size ? ` (native ${s.native_size})` : '')]);
  if (s.cursor) rows.push(['cursor', `(${s.cursor.x}, ${s.cursor.y}) native`]);
  if (s.exec) rows.push(['exec', `${s.exec.argv.join(' ')} → exit ${s.exec.exit_code}, ${bytes(s.exec.stdout_bytes)} out, ${bytes(s.exec.stderr_bytes)} err`]);
  if (s.file) rows.push(['file', `${s.file.path}, ${bytes(s.file.bytes)}, sha256 ${s.file.sha256}`]);
  if (s.a11y_tree) rows.push(['a11y', el('a', { href: fileURL(s.a11y_tree) }, s.a11y_tree)]);
  if (s.dropped) rows.push(['dropped', s.dropped]);
  $('meta').replaceChildren(...rows.flatMap(([k, v]) => [el('dt', {}, k), el('dd', { 'data-field': k }, v)]));
}

// show makes step i current; seek moves the (paused) video to it.
function show(i, seek = true) {
  if (!steps.length) return;
  i = Math.max(0, Math.min(steps.length - 1, i));
  cur = i;
  const s = steps[i];
  for (const li of timeline.children) li.classList.toggle('current', Number(li.dataset.index) === i);
  timeline.children[i].scrollIntoView({ block: 'nearest', inline: 'nearest' });
  $('stepno').textContent = `step ${s.step} of ${steps.length}`;
  document.body.dataset.step = s.step;
  meta(s);
  const err = s.error ? `${s.error.code}: ${s.error.message}${s.error.field ? ` (field ${s.error.field})` : ''}`
    : s.is_error ? 'the answer is an error (is_error)' : '';
  $('error').hidden = !err;
  $('error').textContent = err;
  $('actions').replaceChildren(...(Array.isArray(s.actions) && s.actions.length
    ? s.actions.map((a) => el('li', { 'data-kind': a.kind }, describe(a))) : [el('li', {}, '-')]));
  $('model-box').hidden = !s.model_response;
  $('model').textContent = s.model_response || '';
  $('request').textContent = s.actor === 'person' ? '(a person\'s input)' : pretty(s.request) || '-';
  // An HTTP error's answer is its error body (kept apart in the step).
  $('response').textContent = pretty(s.response ?? (s.error ? { error: s.error } : undefined)) || '-';

  const after = s.screenshots && s.screenshots.after;
  shot.hidden = !after;
  marks.style.display = after ? '' : 'none';
  noshot.hidden = !!after;
  noshot.textContent = after ? '' : `no screenshot after this step${s.dropped ? ` (${s.dropped})` : ''}`;
  if (after) {
    const url = fileURL(after);
    if (shot.getAttribute('src') !== url) shot.src = url;
    const sz = size(s.screenshot_size);
    if (sz) draw(i, sz[0], sz[1]);
    else if (shot.complete && shot.naturalWidth) draw(i, shot.naturalWidth, shot.naturalHeight);
    else shot.onload = () => { if (cur === i) draw(i, shot.naturalWidth, shot.naturalHeight); };
  }
  if (seek && traj.video && video.paused && video.readyState > 0) video.currentTime = Math.max(0, offset(s));
  history.replaceState(history.state, '', `#step=${s.step}`);
}

// stepAt is the index of the last step begun by t seconds into the video.
function stepAt(t) {
  let i = 0;
  while (i + 1 < steps.length && offset(steps[i + 1]) <= t) i++;
  return i;
}

function render() {
  const t = traj;
  let s = `${t.state}${t.stopped ? ` (${t.stopped})` : t.end_reason ? ` (${t.end_reason})` : ''} · VM ${t.vm}`;
  if (t.episode) s += ` · episode ${t.episode}`;
  if (t.pool) s += ` · pool ${t.pool}`;
  s += ` · started ${new Date(t.started_at).toLocaleString()}`;
  if (t.video_seconds) s += ` · video ${seconds(t.video_seconds)}`;
  s += ` · ${bytes(t.bytes || 0)}`;
  if (t.result !== undefined && t.result !== null) s += ` · result ${t.result}`;
  $('summary').textContent = s;
  $('summary').className = `status state-${t.state}`;
  $('count').textContent = `${steps.length} step${steps.length === 1 ? '' : 's'}`;
  timeline.replaceChildren(...steps.map((st, i) => {
    const cls = [st.actor === 'person' ? 'person' : 'agent'];
    if (st.is_error || st.error) cls.push('error');
    if (st.dropped) cls.push('dropped');
    const li = el('li', { class: cls.join(' '), 'data-index': i, 'data-step': st.step,
      title: `${st.step}: ${st.actor} ${st.kind}${st.tool ? ` (${st.tool})` : ''}` }, st.step);
    li.onclick = () => show(i);
    return li;
  }));
  // A recording's video grows until it ends: read again once it has.
  if (t.video && (!video.getAttribute('src') || (videoOf === 'recording' && t.state !== 'recording'))) {
    video.src = fileURL(t.video);
    video.load();
    video.hidden = false;
  }
  videoOf = t.state;
}

async function load() {
  const r = await fetch(base, { headers: { Accept: 'application/json' } });
  if (!r.ok) {
    let msg = `${r.status} ${r.statusText}`;
    try { msg = (await r.json()).error.message; } catch { /* not JSON */ }
    throw new Error(msg);
  }
  const follow = cur < 0 || cur === steps.length - 1;
  traj = await r.json();
  steps = traj.step_list || [];
  render();
  if (!steps.length) {
    $('stepno').textContent = 'no steps yet';
  } else if (cur < 0) {
    const m = /step=(\d+)/.exec(location.hash);
    const at = m ? steps.findIndex((st) => st.step === Number(m[1])) : -1;
    show(at >= 0 ? at : 0);
  } else {
    show(follow ? steps.length - 1 : cur, false);
  }
  document.body.dataset.loaded = 'true';
  if (traj.state === 'recording') setTimeout(reload, RELOAD_MS);
}

// reload reads a recording trajectory again; a failed read says so and
// tries again (the page already has what it had).
function reload() { load().catch((e) => { fail(e); setTimeout(reload, RELOAD_MS); }); }

function fail(e) {
  $('summary').textContent = String(e);
  $('summary').className = 'status error';
  document.body.dataset.loaded = 'error';
}

document.addEventListener('keydown', (e) => {
  if (e.altKey || e.ctrlKey || e.metaKey || e.target === video || e.target instanceof HTMLInputElement) return;
  switch (e.key) {
    case 'ArrowRight': show(cur + 1); break;
    case 'ArrowLeft': show(cur - 1); break;
    case 'Home': show(0); break;
    case 'End': show(steps.length - 1); break;
    default: return;
  }
  e.preventDefault();
});
// While the video plays, the timeline follows it.
video.addEventListener('timeupdate', () => {
  if (video.paused || !steps.length) return;
  const i = stepAt(video.currentTime);
  if (i !== cur) show(i, false);
});

load().catch(fail);

// For tests and the console.
window.deskfarm = { get trajectory() { return traj; }, get current() { return cur; }, show };
