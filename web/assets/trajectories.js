import { bytes, fetchTrajectories, fill } from '/assets/trajlist.js';

// The list of recorded trajectories; ?vm=ID or ?episode=ID keeps only
// that VM's or episode's.
const q = new URLSearchParams(location.search);
const total = document.getElementById('total');
const tbody = document.querySelector('#trajectories tbody');

async function load() {
  const list = await fetchTrajectories();
  if (!list) {
    total.textContent = 'this farm keeps no trajectories';
    fill(tbody, []);
    return;
  }
  let ts = list.trajectories || [];
  if (q.get('vm')) ts = ts.filter((t) => t.vm === q.get('vm'));
  if (q.get('episode')) ts = ts.filter((t) => t.episode === q.get('episode'));
  fill(tbody, ts);
  let s = `${ts.length} trajectories, ${bytes(list.total_bytes || 0)} kept`;
  if (list.budget_bytes) s += ` of ${bytes(list.budget_bytes)}`;
  if (q.get('vm')) s += ` · VM ${q.get('vm')}`;
  if (q.get('episode')) s += ` · episode ${q.get('episode')}`;
  total.textContent = s;
  document.body.dataset.loaded = 'true';
}
load().catch((e) => { total.textContent = String(e); });
