// attachStream draws the frames of vm's /stream websocket on canvas and
// reconnects when it drops; base is the routes' prefix (default the VM's,
// /v1/vms/VM; an episode page's is /v1/episodes/ID). It returns a stats
// object (frames drawn) whose close() ends the stream for good.
export function attachStream(canvas, vm, fps, base) {
  const prefix = base || `/v1/vms/${encodeURIComponent(vm)}`;
  const ctx = canvas.getContext('2d');
  const stats = { frames: 0, bytes: 0, open: false, lastFrame: 0 };
  let chain = Promise.resolve();
  let ws = null, closed = false;
  stats.close = () => { closed = true; if (ws) ws.close(); };
  function connect() {
    if (closed) return;
    const proto = location.protocol === 'https:' ? 'wss' : 'ws';
    const q = fps ? `?fps=${fps}` : '';
    ws = new WebSocket(`${proto}://${location.host}${prefix}/stream${q}`);
    ws.binaryType = 'arraybuffer';
    ws.onopen = () => { stats.open = true; };
    ws.onmessage = (ev) => {
      const dv = new DataView(ev.data);
      const fw = dv.getUint16(1), fh = dv.getUint16(3);
      const x = dv.getUint16(5), y = dv.getUint16(7);
      const bmp = createImageBitmap(new Blob([new Uint8Array(ev.data, 13)], { type: 'image/jpeg' }));
      stats.bytes += ev.data.byteLength;
      // Draw in arrival order: deltas build on the frames before them.
      chain = chain.then(() => bmp).then((b) => {
        if (canvas.width !== fw || canvas.height !== fh) {
          canvas.width = fw; canvas.height = fh;
          canvas.dispatchEvent(new Event('resize'));
        }
        ctx.drawImage(b, x, y);
        b.close();
        stats.frames++;
        stats.lastFrame = performance.now();
      }).catch((e) => console.warn('frame', e));
    };
    ws.onclose = () => { stats.open = false; setTimeout(connect, 1000); };
  }
  connect();
  return stats;
}
