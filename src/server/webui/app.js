// Strata's web page: a chat over /v1/chat/completions (SSE) and the expert tier's live panel
// (/stats, polled). Plain JS, no dependencies, nothing loaded from the network.
'use strict';

const $ = (id) => document.getElementById(id);
const HEAT_BG = [16, 16, 24];  // the canvas background (style.css #heatmap), also empty cells

const state = {
  history: [],        // {role, content} sent with each request
  controller: null,   // AbortController of the reply in flight
  statsTimer: null,
};

// ---------------------------------------------------------------- settings and requests

for (const id of ['system', 'temperature', 'top_p', 'max_tokens', 'extra', 'api_key']) {
  const v = localStorage.getItem('strata.' + id);
  if (v !== null) $(id).value = v;
  $(id).addEventListener('change', () => localStorage.setItem('strata.' + id, $(id).value));
}

function headers() {
  const h = { 'Content-Type': 'application/json' };
  const key = $('api_key').value.trim();
  if (key) h.Authorization = 'Bearer ' + key;
  return h;
}

async function getJson(path) {
  const r = await fetch(path, { headers: headers() });
  if (!r.ok) throw new Error(path + ': HTTP ' + r.status);
  return r.json();
}

function numberOr(id, fallback) {
  const v = parseFloat($(id).value);
  return Number.isFinite(v) ? v : fallback;
}

// ---------------------------------------------------------------- messages

function addMessage(role, text) {
  const div = document.createElement('div');
  div.className = 'msg ' + role;
  const label = document.createElement('span');
  label.className = 'role';
  label.textContent = role;
  div.appendChild(label);
  const content = document.createElement('div');
  content.className = 'content';
  content.textContent = text || '';
  div.appendChild(content);
  $('messages').appendChild(div);
  div.scrollIntoView({ block: 'end' });
  return div;
}

// The parts of an assistant message, created when first needed.
function replyView(div) {
  const view = { div, content: div.querySelector('.content'), reasoning: null, tools: new Map() };
  view.addReasoning = (text) => {
    if (!view.reasoning) {
      const d = document.createElement('details');
      d.className = 'reasoning';
      const s = document.createElement('summary');
      s.textContent = 'Reasoning';
      d.appendChild(s);
      view.reasoning = document.createElement('div');
      d.appendChild(view.reasoning);
      div.insertBefore(d, view.content);
    }
    view.reasoning.textContent += text;
  };
  view.addToolCall = (tc) => {
    let t = view.tools.get(tc.index);
    if (!t) {
      t = { name: '', args: '', el: document.createElement('div') };
      t.el.className = 'tool-call';
      div.insertBefore(t.el, view.content.nextSibling);
      view.tools.set(tc.index, t);
    }
    if (tc.function && tc.function.name) t.name += tc.function.name;
    if (tc.function && tc.function.arguments) t.args += tc.function.arguments;
    t.el.textContent = 'tool call: ' + t.name + '(' + t.args + ')';
  };
  view.meta = (text) => {
    let m = div.querySelector('.meta');
    if (!m) {
      m = document.createElement('div');
      m.className = 'meta';
      div.appendChild(m);
    }
    m.textContent = text;
  };
  return view;
}

// Reads a server-sent event stream; calls onData with each parsed `data:` payload.
async function readSse(response, onData) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buf.indexOf('\n\n')) >= 0) {
      const event = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      for (const line of event.split('\n')) {
        if (!line.startsWith('data: ')) continue;
        const payload = line.slice(6);
        if (payload === '[DONE]') return;
        onData(JSON.parse(payload));
      }
    }
  }
}

function applyChunk(view, chunk, reply) {
  if (chunk.error) throw new Error(chunk.error.message || 'server error');
  if (chunk.usage) reply.usage = chunk.usage;
  for (const ch of chunk.choices || []) {
    const d = ch.delta || {};
    if (d.reasoning_content) view.addReasoning(d.reasoning_content);
    if (d.content) {
      view.content.textContent += d.content;
      reply.content += d.content;
    }
    for (const tc of d.tool_calls || []) view.addToolCall(tc);
    if (ch.finish_reason) reply.finish = ch.finish_reason;
  }
  view.div.scrollIntoView({ block: 'end' });
}

async function send(text) {
  const messages = [];
  const system = $('system').value.trim();
  if (system) messages.push({ role: 'system', content: system });
  state.history.push({ role: 'user', content: text });
  messages.push(...state.history);
  addMessage('user', text);
  const view = replyView(addMessage('assistant', ''));
  const reply = { content: '', finish: null, usage: null };
  const body = {
    messages, stream: true, stream_options: { include_usage: true },
    temperature: numberOr('temperature', 0.7), top_p: numberOr('top_p', 0.95), max_tokens: Math.round(numberOr('max_tokens', 256)),
  };
  const extra = $('extra').value.trim();
  try {
    if (extra) Object.assign(body, JSON.parse(extra));
  } catch (e) {
    view.div.classList.add('error');
    view.meta('extra request fields: ' + e.message);
    state.history.pop();
    return;
  }
  state.controller = new AbortController();
  setBusy(true);
  const t0 = performance.now();
  try {
    const r = await fetch('/v1/chat/completions', { method: 'POST', headers: headers(), body: JSON.stringify(body), signal: state.controller.signal });
    if (!r.ok) {
      let msg = 'HTTP ' + r.status;
      try { msg += ': ' + (await r.json()).error.message; } catch (e) { /* not JSON */ }
      throw new Error(msg);
    }
    await readSse(r, (chunk) => applyChunk(view, chunk, reply));
    const secs = (performance.now() - t0) / 1000;
    const n = reply.usage ? reply.usage.completion_tokens : null;
    view.meta((reply.finish || 'done') + (n !== null ? ' · ' + n + ' tokens · ' + (n / secs).toFixed(1) + ' tokens/s' : ''));
  } catch (e) {
    if (e.name === 'AbortError') {
      view.meta('stopped');
      view.div.classList.add('stopped');
    } else {
      view.div.classList.add('error');
      view.meta('error: ' + e.message);
    }
  } finally {
    state.history.push({ role: 'assistant', content: reply.content });
    state.controller = null;
    setBusy(false);
  }
}

function setBusy(busy) {
  $('send').disabled = busy;
  $('stop').disabled = !busy;
  document.body.classList.toggle('busy', busy);
  scheduleStats(busy ? 300 : 2000);
}

$('composer').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const text = $('prompt').value.trim();
  if (!text || state.controller) return;
  $('prompt').value = '';
  send(text);
});
$('prompt').addEventListener('keydown', (ev) => {
  if (ev.key === 'Enter' && !ev.shiftKey) {
    ev.preventDefault();
    $('composer').requestSubmit();
  }
});
$('stop').addEventListener('click', () => { if (state.controller) state.controller.abort(); });
$('clear').addEventListener('click', () => {
  if (state.controller) state.controller.abort();
  state.history = [];
  $('messages').textContent = '';
});

// ---------------------------------------------------------------- the expert-tier panel

function fmtBytes(b) {
  if (b === null || b === undefined) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (b >= 1024 && i < units.length - 1) { b /= 1024; i++; }
  return b.toFixed(i ? 1 : 0) + ' ' + units[i];
}
const fmtPct = (x) => (x === null || x === undefined ? '–' : (100 * x).toFixed(1) + '%');
const fmtBw = (x) => (x === null || x === undefined ? '–' : x >= 1e9 ? (x / 1e9).toFixed(2) + ' GB/s' : (x / 1e6).toFixed(1) + ' MB/s');

function renderStats(s) {
  const streaming = s.mode === 'streaming';
  const r = s.recent;
  const t = s.totals;
  const mode = $('tier-mode');
  mode.textContent = s.mode;
  mode.className = 'badge ' + s.mode;
  $('stat-tps').textContent = r ? r.tokens_per_s.toFixed(1) : '0.0 (idle)';
  const pick = (k) => (r && r[k] !== null && r[k] !== undefined ? r[k] : t[k]);
  if (streaming) {
    $('stat-hit-rate').textContent = fmtPct(pick('hit_rate'));
    $('stat-bytes-per-token').textContent = fmtBytes(pick('bytes_per_token'));
    $('stat-read-bw').textContent = r ? fmtBw(r.read_bw) : fmtBw(0);
    $('stat-disk-bw').textContent = s.disk.read_bw ? fmtBw(s.disk.read_bw) + ' (measured)' : 'not measured';
    const limit = r ? r.limit_fraction : null;
    $('stat-limit').textContent = fmtPct(limit);
    $('limit-bar').style.width = Math.min(100, 100 * (limit || 0)) + '%';
    $('stat-precision').textContent = fmtPct(pick('prefetch_precision'));
    $('stat-recall').textContent = fmtPct(pick('prefetch_recall'));
    $('stat-totals').textContent = t.hits + ' hits, ' + t.misses + ' misses, ' + fmtBytes(t.bytes_read) + ' read';
    $('tier-note').textContent = 'Experts stream from disk through a cache of ' + fmtBytes(s.plan.expert_cache) + ' (' + s.plan.cache_slots +
      ' slots) for ' + fmtBytes(s.plan.experts_total) + ' of experts. Figures over the last ' + (r ? r.window_s : 5) + ' s of passes.';
  } else {
    for (const id of ['stat-hit-rate', 'stat-bytes-per-token', 'stat-read-bw', 'stat-disk-bw', 'stat-limit', 'stat-precision', 'stat-recall', 'stat-totals'])
      $(id).textContent = id === 'stat-hit-rate' ? '100% (resident)' : 'n/a (resident)';
    $('tier-note').textContent = 'All ' + fmtBytes(s.plan.experts_total) + ' of experts are resident: nothing is read per token.';
  }
  const g = s.gpu;
  if (g) {
    $('stat-gpu').textContent = g.device + ', ' + g.gpu_layers + ' layers, ' + fmtBytes(g.vram_used) + ' VRAM' +
      (g.vram_budget ? ' of ' + fmtBytes(g.vram_budget) : '');
    $('stat-bus').textContent = fmtBytes(g.bus_up_per_token) + ' up, ' + fmtBytes(g.bus_down_per_token) + ' down';
    $('stat-gpu-share').textContent = g.gpu_timestamps ? fmtPct(g.gpu_share) : 'not measured';
    const x = g.experts;
    $('stat-vram-experts').textContent = x ? x.resident + '/' + x.slots + ' slots (' + x.tiers + '), ' + fmtPct(x.vram_hit_rate) + ' of uses on the GPU, ' +
      x.uploads_per_token.toFixed(2) + ' uploads per token' : 'none';
  }
  $('server-state').textContent = s.slots.busy + '/' + s.slots.total + ' slots busy' + (s.slots.queued ? ', ' + s.slots.queued + ' queued' : '');
  drawHeat(s.heat);
}

// Layers are rows, experts columns; a cell's colour runs from the background to yellow with its
// recent routing count (decayed), relative to the hottest cell.
function drawHeat(h) {
  const cv = $('heatmap');
  if (!h || !h.experts || !h.layers) return;
  const cw = Math.max(1, Math.floor(512 / h.experts));
  const ch = Math.max(2, Math.min(16, Math.floor(256 / h.layers)));
  if (cv.width !== cw * h.experts || cv.height !== ch * h.layers) {
    cv.width = cw * h.experts;
    cv.height = ch * h.layers;
  }
  const ctx = cv.getContext('2d');
  const img = ctx.createImageData(cv.width, cv.height);
  for (let l = 0; l < h.layers; l++) {
    for (let e = 0; e < h.experts; e++) {
      const v = h.cells[l][e] / 255;
      const rgb = v <= 0 ? HEAT_BG : [HEAT_BG[0] + (255 - HEAT_BG[0]) * Math.min(1, v * 1.6), HEAT_BG[1] + (220 - HEAT_BG[1]) * Math.max(0, v * 1.6 - 0.6) + 40 * v, HEAT_BG[2] + 30 * v];
      for (let y = l * ch; y < (l + 1) * ch; y++) {
        for (let x = e * cw; x < (e + 1) * cw; x++) {
          const i = 4 * (y * cv.width + x);
          img.data[i] = rgb[0];
          img.data[i + 1] = rgb[1];
          img.data[i + 2] = rgb[2];
          img.data[i + 3] = 255;
        }
      }
    }
  }
  ctx.putImageData(img, 0, 0);
  $('heat-caption').textContent = '(' + h.layers + ' layers × ' + h.experts + ' experts, half-life ' + h.half_life_tokens + ' tokens)';
}

async function pollStats() {
  try {
    renderStats(await getJson('/stats'));
  } catch (e) {
    $('server-state').textContent = 'stats: ' + e.message;
  }
}

function scheduleStats(ms) {
  clearInterval(state.statsTimer);
  state.statsTimer = setInterval(pollStats, ms);
  pollStats();
}

async function init() {
  try {
    const props = await getJson('/props');
    $('model-name').textContent = props.model_alias + ' · ' + props.model.architecture + ' · ' + props.model.n_moe_layers + ' MoE layers × ' +
      props.model.n_expert + ' experts (top-' + props.model.n_expert_used + ') · ctx ' + props.default_generation_settings.n_ctx;
  } catch (e) {
    $('model-name').textContent = 'model: ' + e.message + (e.message.includes('401') ? ' (set the API key in Settings)' : '');
  }
  scheduleStats(2000);
}
init();
