// The resource chart: CPU and memory over the last minutes, each in
// percent of the sandbox's own limit, with labelled axes and a time scale.

const COLORS = { cpu: '#2b59c3', mem: '#2f855a' };

/** "−30 s", "−2 min". */
function ago(seconds) {
  return seconds % 60 === 0 ? `−${seconds / 60} min` : `−${seconds} s`;
}

/**
 * Draws `samples` ({t, cpu, mem} with cpu and mem in percent of the limit,
 * either may be null) ending now. The time axis reaches back as far as the
 * samples do: one minute at first, growing to `windowMs`.
 */
export function drawChart(canvas, samples, { windowMs: longest = 5 * 60 * 1000, gapMs = 10000 } = {}) {
  const dpr = window.devicePixelRatio || 1;
  const width = Math.max(200, canvas.clientWidth || canvas.parentElement.clientWidth || 300);
  const height = canvas.clientHeight || 200;
  if (canvas.width !== Math.round(width * dpr) || canvas.height !== Math.round(height * dpr)) {
    canvas.width = Math.round(width * dpr);
    canvas.height = Math.round(height * dpr);
  }
  const ctx = canvas.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, width, height);
  const pad = { left: 44, right: 10, top: 10, bottom: 26 };
  const w = width - pad.left - pad.right;
  const h = height - pad.top - pad.bottom;
  const now = Date.now();
  const oldest = samples.length ? now - samples[0].t : 0;
  const windowMs = Math.min(longest, Math.max(60000, Math.ceil(oldest / 60000) * 60000));
  const x = (t) => pad.left + w * (1 - (now - t) / windowMs);
  const y = (p) => pad.top + h * (1 - Math.min(100, Math.max(0, p)) / 100);

  ctx.font = '11px system-ui, sans-serif';
  ctx.fillStyle = '#5b6475';
  ctx.strokeStyle = '#e3e6ec';
  ctx.lineWidth = 1;
  // The y axis: percent of the limit.
  ctx.textAlign = 'right';
  ctx.textBaseline = 'middle';
  for (const p of [0, 25, 50, 75, 100]) {
    const yy = Math.round(y(p)) + 0.5;
    ctx.beginPath(); ctx.moveTo(pad.left, yy); ctx.lineTo(pad.left + w, yy); ctx.stroke();
    ctx.fillText(`${p} %`, pad.left - 6, yy);
  }
  // The x axis: time before now, a tick every 15 s, 30 s or minute.
  ctx.textAlign = 'center';
  ctx.textBaseline = 'top';
  const span = windowMs / 1000;
  const step = span <= 60 ? 15 : span <= 150 ? 30 : 60;
  for (let sec = span; sec >= 0; sec -= step) {
    const xx = Math.round(x(now - sec * 1000)) + 0.5;
    ctx.beginPath(); ctx.moveTo(xx, pad.top); ctx.lineTo(xx, pad.top + h); ctx.stroke();
    ctx.fillText(sec === 0 ? 'now' : ago(sec), Math.min(Math.max(xx, pad.left + 14), width - 16), pad.top + h + 6);
  }
  ctx.strokeStyle = '#9aa3b2';
  ctx.beginPath(); ctx.moveTo(pad.left + 0.5, pad.top); ctx.lineTo(pad.left + 0.5, pad.top + h); ctx.lineTo(pad.left + w, pad.top + h + 0.5); ctx.stroke();

  const visible = samples.filter((s) => now - s.t <= windowMs);
  for (const key of ['mem', 'cpu']) {
    ctx.strokeStyle = COLORS[key];
    ctx.fillStyle = COLORS[key];
    ctx.lineWidth = 2;
    let prev = null;
    ctx.beginPath();
    for (const s of visible) {
      if (s[key] == null) { prev = null; continue; }
      const px = x(s.t); const py = y(s[key]);
      if (!prev || s.t - prev.t > gapMs) ctx.moveTo(px, py); else ctx.lineTo(px, py);
      prev = s;
    }
    ctx.stroke();
    const last = [...visible].reverse().find((s) => s[key] != null);
    if (last) { ctx.beginPath(); ctx.arc(x(last.t), y(last[key]), 3, 0, Math.PI * 2); ctx.fill(); }
  }
  if (!visible.length) {
    ctx.fillStyle = '#5b6475';
    ctx.textAlign = 'center';
    ctx.textBaseline = 'middle';
    ctx.fillText('No measurements yet (the sandbox must be running).', pad.left + w / 2, pad.top + h / 2);
  }
}

export const CHART_COLORS = COLORS;
