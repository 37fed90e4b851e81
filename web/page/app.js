// prima serve's page: a chat over /v1/chat/completions (streamed) and a view of the ring that
// polls /cluster. Everything it loads comes from the server that served it.
'use strict';
const $ = (sel) => document.querySelector(sel);
const store = {
  get(key, fallback) {
    try { return JSON.parse(localStorage.getItem(key)) ?? fallback; } catch { return fallback; }
  },
  set(key, value) { localStorage.setItem(key, JSON.stringify(value)); },
};
const defaults = { apiKey: '', system: '', temperature: 0.8, top_p: 0.95, top_k: 40, min_p: 0.05, max_tokens: 512, seed: '' };
let settings = { ...defaults, ...store.get('prima.settings', {}) };
let conversations = store.get('prima.conversations', []);
let current = store.get('prima.current', null);
let controller = null;

const plural = (n, word) => `${n} ${word}${n === 1 ? '' : 's'}`;

function headers() {
  const h = { 'Content-Type': 'application/json' };
  if (settings.apiKey) h.Authorization = `Bearer ${settings.apiKey}`;
  return h;
}

// ---- markdown, with raw HTML shown as text and only http(s)/mailto links
function escapeHtml(s) {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));
}
marked.use({
  gfm: true,
  breaks: true,
  renderer: {
    html(token) { return escapeHtml(token.text ?? token.raw ?? ''); },
    link(token) {
      const text = this.parser.parseInline(token.tokens);
      return /^(https?:|mailto:)/i.test(token.href) ? `<a href="${escapeHtml(token.href)}" rel="noreferrer noopener" target="_blank">${text}</a>` : text;
    },
    image(token) { return escapeHtml(token.text ?? ''); },
  },
});
const render = (text) => marked.parse(text);

// ---- conversations
function save() {
  store.set('prima.conversations', conversations);
  store.set('prima.current', current);
}
function conversation() {
  let c = conversations.find((x) => x.id === current);
  if (!c) {
    c = { id: Date.now().toString(36) + Math.random().toString(36).slice(2, 6), title: 'New chat', messages: [] };
    conversations.unshift(c);
    current = c.id;
  }
  return c;
}
function showConversations() {
  const ul = $('#conversations');
  ul.replaceChildren();
  for (const c of conversations) {
    const li = document.createElement('li');
    li.className = c.id === current ? 'current' : '';
    const span = document.createElement('span');
    span.textContent = c.title;
    const del = document.createElement('button');
    del.textContent = '×';
    del.title = 'Delete';
    del.onclick = (e) => {
      e.stopPropagation();
      conversations = conversations.filter((x) => x.id !== c.id);
      if (current === c.id) current = conversations[0]?.id ?? null;
      save();
      showAll();
    };
    li.onclick = () => { if (!controller) { current = c.id; save(); showAll(); sidebar(false); } };
    li.append(span, del);
    ul.append(li);
  }
}
function messageElement(m) {
  const div = document.createElement('div');
  div.className = `msg ${m.role}${m.error ? ' error' : ''}`;
  div.dataset.testid = `msg-${m.role}`;
  const role = document.createElement('div');
  role.className = 'role';
  role.textContent = m.role;
  const body = document.createElement('div');
  body.className = 'body';
  body.innerHTML = m.role === 'assistant' ? render(m.content) : escapeHtml(m.content).replace(/\n/g, '<br>');
  const info = document.createElement('div');
  info.className = 'info';
  info.textContent = m.info ?? '';
  div.append(role, body, info);
  return div;
}
function showMessages() {
  const box = $('#messages');
  box.replaceChildren(...conversation().messages.map(messageElement));
  box.scrollTop = box.scrollHeight;
}
function showAll() {
  conversation();
  showConversations();
  showMessages();
}

// ---- sending, streamed as server-sent events
function request(messages) {
  const body = { messages, stream: true, stream_options: { include_usage: true } };
  for (const k of ['temperature', 'top_p', 'top_k', 'min_p', 'max_tokens'])
    if (settings[k] !== '' && settings[k] !== null) body[k] = Number(settings[k]);
  if (settings.seed !== '' && settings.seed !== null) body.seed = Number(settings.seed);
  return body;
}
async function send(text) {
  const c = conversation();
  if (c.messages.length === 0) c.title = text.slice(0, 40);
  c.messages.push({ role: 'user', content: text });
  const reply = { role: 'assistant', content: '' };
  const history = c.messages.map(({ role, content }) => ({ role, content }));
  if (settings.system) history.unshift({ role: 'system', content: settings.system });
  c.messages.push(reply);
  save();
  showAll();
  const el = $('#messages').lastElementChild;
  const body = el.querySelector('.body'), info = el.querySelector('.info');
  controller = new AbortController();
  $('#send').disabled = true;
  $('#stop').disabled = false;
  const t0 = performance.now();
  try {
    const res = await fetch('/v1/chat/completions', { method: 'POST', headers: headers(), body: JSON.stringify(request(history)), signal: controller.signal });
    if (res.status === 401) {
      askKey();
      throw new Error('the server wants an API key: enter it, then send again');
    }
    if (!res.ok) {
      const e = await res.json().catch(() => ({}));
      throw new Error(e.error?.message ?? `HTTP ${res.status}`);
    }
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buf = '', usage = null, finish = null;
    // The reply is rendered whole (markdown), at most once a frame: once a token made a long
    // reply cost the page more than the server's generation and starved everything else on it.
    let frame = 0;
    const paint = () => {
      frame = 0;
      body.innerHTML = render(reply.content);
      $('#messages').scrollTop = $('#messages').scrollHeight;
    };
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true });
      let at;
      while ((at = buf.indexOf('\n\n')) >= 0) {
        const event = buf.slice(0, at);
        buf = buf.slice(at + 2);
        if (!event.startsWith('data: ')) continue;
        const data = event.slice(6);
        if (data === '[DONE]') continue;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new Error(chunk.error.message);
        reply.content += chunk.choices?.[0]?.delta?.content ?? '';
        finish = chunk.choices?.[0]?.finish_reason ?? finish;
        usage = chunk.usage ?? usage;
        if (!frame) frame = requestAnimationFrame(paint);
      }
    }
    cancelAnimationFrame(frame);
    paint();
    const s = (performance.now() - t0) / 1000;
    reply.info = usage ? `${usage.completion_tokens} tokens in ${s.toFixed(2)} s (${finish}); prompt ${usage.prompt_tokens}, ${usage.prompt_tokens_details?.cached_tokens ?? 0} from the cache` : finish ?? '';
  } catch (e) {
    if (e.name === 'AbortError') reply.info = 'stopped';
    else { reply.error = true; reply.info = `error: ${e.message}`; }
  } finally {
    controller = null;
    $('#send').disabled = false;
    $('#stop').disabled = true;
    info.textContent = reply.info ?? '';
    if (reply.error) el.classList.add('error');
    save();
  }
}

// ---- the cluster view
const series = { tpot: [], tps: [] };
let last = null, timer = null;
const fmtBytes = (b) => (b >= 1 << 30 ? `${(b / (1 << 30)).toFixed(1)} GiB` : `${(b / (1 << 20)).toFixed(1)} MiB`);
function deviceElement(d, prev, k) {
  const div = document.createElement('div');
  div.className = 'device';
  div.dataset.testid = 'device';
  const h = document.createElement('h3');
  h.textContent = `${d.rank}: ${d.addr}`;
  const lines = [`window ${plural(d.window, 'layer')} × ${plural(k, 'round')}${d.layers ? ` (layers ${d.layers})` : ''}`, `GPU layers ${d.gpu_layers}`];
  if (d.compute_seconds !== undefined && last.batches > 0) {
    // per step (a batch round the ring: one token when decoding) since the last poll; when
    // nothing ran since, the average over the ring's life
    const pd = prev?.devices.find((x) => x.rank === d.rank);
    const live = pd && last.batches > prev.batches;
    const base = live ? pd : { compute_seconds: 0, wait_seconds: 0, disk_bytes: 0 };
    const steps = live ? last.batches - prev.batches : last.batches;
    lines.push(`compute ${((d.compute_seconds - base.compute_seconds) * 1e3 / steps).toFixed(2)} ms, wait ${((d.wait_seconds - base.wait_seconds) * 1e3 / steps).toFixed(2)} ms, disk ${fmtBytes((d.disk_bytes - base.disk_bytes) / steps)} per step${live ? '' : ' (average)'}`);
  }
  if (d.pages) lines.push(`window pages resident at compute: ${(100 * d.pages_resident / d.pages).toFixed(0)}%`);
  const p = document.createElement('div');
  p.innerHTML = lines.map(escapeHtml).join('<br>');
  div.append(h, p);
  if (d.mem_budget) {
    // what its counters say is in memory (the window pages resident when it computed them)
    const bar = document.createElement('div');
    bar.className = 'bar';
    bar.title = 'memory its windows hold (resident pages, from its counters) against its memory budget';
    const fill = document.createElement('div');
    fill.style.width = `${Math.min(100, 100 * d.resident_bytes / d.mem_budget)}%`;
    bar.append(fill);
    const note = document.createElement('div');
    note.className = 'muted';
    note.textContent = `in memory ${fmtBytes(d.resident_bytes)} of ${fmtBytes(d.mem_budget)} budget (weights ${fmtBytes(d.weight_bytes)})`;
    div.append(bar, note);
  } else {
    const note = document.createElement('div');
    note.className = 'muted';
    note.textContent = `weights ${fmtBytes(d.weight_bytes)}`;
    div.append(note);
  }
  return div;
}
// A chart of timed samples ({t: seconds, v}) over the last CHART_SECONDS: the values' axis in
// unit, the time axis in seconds before now; a dot a sample, and a line only between samples
// that follow each other (a poll missed or a decode idle leaves a gap, one sample a dot).
const CHART_SECONDS = 120, CHART_GAP = 3;
function niceMax(v) {
  const p = 10 ** Math.floor(Math.log10(v));
  return [1, 2, 5, 10].map((m) => m * p).find((x) => x >= v);
}
function chart(canvas, samples, unit, now) {
  const g = canvas.getContext('2d');
  const w = canvas.width, h = canvas.height, left = 64, right = 12, top = 10, bottom = 24;
  const max = niceMax(Math.max(1e-3, ...samples.map((p) => p.v)) * 1.1);
  const X = (t) => left + (w - left - right) * (1 - (now - t) / CHART_SECONDS);
  const Y = (v) => h - bottom - ((h - top - bottom) * v) / max;
  g.clearRect(0, 0, w, h);
  g.font = '11px sans-serif';
  g.fillStyle = '#777';
  g.strokeStyle = '#e4e4e4';
  g.lineWidth = 1;
  g.textAlign = 'right';
  g.textBaseline = 'middle';
  for (const v of [0, max / 2, max]) {
    g.beginPath();
    g.moveTo(left, Math.round(Y(v)) + 0.5);
    g.lineTo(w - right, Math.round(Y(v)) + 0.5);
    g.stroke();
    g.fillText(`${+v.toPrecision(3)} ${unit}`, left - 6, Y(v));
  }
  g.textAlign = 'center';
  g.textBaseline = 'top';
  for (let ago = 0; ago <= CHART_SECONDS; ago += 30)
    g.fillText(ago ? `−${ago} s` : 'now', Math.min(X(now - ago), w - right - 10), h - bottom + 6);
  g.fillStyle = g.strokeStyle = '#2f6fdf';
  g.lineWidth = 2;
  samples.forEach((p, i) => {
    const q = samples[i - 1];
    if (q && p.t - q.t <= CHART_GAP) {
      g.beginPath();
      g.moveTo(X(q.t), Y(q.v));
      g.lineTo(X(p.t), Y(p.v));
      g.stroke();
    }
    g.beginPath();
    g.arc(X(p.t), Y(p.v), 2.5, 0, 2 * Math.PI);
    g.fill();
  });
}
async function poll() {
  try {
    const res = await fetch('/cluster', { headers: headers() });
    if (res.status === 401) askKey();
    const c = await res.json();
    if (!res.ok) throw new Error(c.error?.message ?? `HTTP ${res.status}`);
    const prev = last;
    last = c;
    $('#cluster-state').textContent = `${c.ring ? `ring of ${plural(c.devices.length, 'device')}, ${plural(c.rounds, 'round')} per token` : 'one device'}, ${c.n_layer} layers, context ${c.n_ctx}; ${c.state}${c.detail ? `: ${c.detail}` : ''}; slots busy ${c.slots.busy}/${c.slots.total}, queued ${c.slots.queued}; ${c.generated_tokens} tokens generated`;
    const ring = $('#ring');
    ring.replaceChildren();
    c.devices.forEach((d, i) => {
      ring.append(deviceElement(d, prev, c.rounds));
      const arrow = document.createElement('span');
      arrow.className = 'arrow';
      arrow.textContent = i + 1 < c.devices.length ? '→' : '↩';
      ring.append(arrow);
    });
    c.at = performance.now() / 1000;
    if (prev) {
      const dtok = c.generated_tokens - prev.generated_tokens;
      series.tps.push({ t: c.at, v: dtok / Math.max(1e-3, c.at - prev.at) });
      // a time per token only where tokens were generated
      if (dtok > 0) series.tpot.push({ t: c.at, v: (1e3 * (c.decode_seconds - prev.decode_seconds)) / dtok });
      for (const k of ['tps', 'tpot']) series[k] = series[k].filter((p) => p.t > c.at - CHART_SECONDS);
      chart($('#chart-tpot'), series.tpot, 'ms', c.at);
      chart($('#chart-tps'), series.tps, 'tok/s', c.at);
    }
    const lo = $('#left-out');
    lo.replaceChildren();
    for (const d of c.left_out) {
      const p = document.createElement('p');
      p.textContent = `left out: ${d.addr} — ${d.why}`;
      lo.append(p);
    }
  } catch (e) {
    $('#cluster-state').textContent = `cannot read /cluster: ${e.message}`;
  }
}

// ---- wiring
for (const tab of document.querySelectorAll('.tab')) {
  tab.onclick = () => {
    for (const t of document.querySelectorAll('.tab')) t.classList.toggle('active', t === tab);
    for (const v of document.querySelectorAll('.view')) v.classList.toggle('active', v.id === `view-${tab.dataset.view}`);
    clearInterval(timer);
    if (tab.dataset.view === 'cluster') { poll(); timer = setInterval(poll, 1000); }
  };
}
$('#composer').onsubmit = (e) => {
  e.preventDefault();
  const text = $('#input').value.trim();
  if (!text || controller) return;
  $('#input').value = '';
  send(text);
};
$('#input').onkeydown = (e) => {
  if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); $('#composer').requestSubmit(); }
};
$('#stop').onclick = () => controller?.abort();
$('#new-chat').onclick = () => { if (!controller) { current = null; showAll(); save(); sidebar(false); } };
// On a narrow screen the conversations are a menu over the chat.
function sidebar(open) {
  document.body.classList.toggle('sidebar-open', open);
  $('#menu').setAttribute('aria-expanded', String(open));
}
$('#menu').onclick = () => {
  $('[data-view=chat]').click();
  sidebar(!document.body.classList.contains('sidebar-open'));
};
const form = $('#settings');
for (const [k, v] of Object.entries(settings)) if (form.elements[k]) form.elements[k].value = v;
form.oninput = () => {
  for (const k of Object.keys(defaults)) settings[k] = form.elements[k].value;
  store.set('prima.settings', settings);
};
// ---- the API key: asked for when the server answers 401, kept with the settings
function askKey() {
  const flag = document.createElement('code');
  flag.textContent = 'prima serve --api-key';
  $('#key-why').replaceChildren(settings.apiKey ? 'The server refused this API key: enter the one it was started with (' : 'This server wants an API key (',
    flag, settings.apiKey ? ').' : '): enter it to chat.');
  if (!$('#key-dialog').open) $('#key-dialog').showModal();
}
$('#key-form').onsubmit = () => {
  settings.apiKey = form.elements.apiKey.value = $('#key-input').value;
  store.set('prima.settings', settings);
  $('#key-input').value = '';
  loadModels();
};
async function loadModels() {
  try {
    const res = await fetch('/v1/models', { headers: headers() });
    if (res.status === 401) return askKey();
    $('#model').textContent = (await res.json()).data?.[0]?.id ?? '';
  } catch {
    $('#model').textContent = '';
  }
}
loadModels();
showAll();
