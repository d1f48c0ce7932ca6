// The web page of `strata serve` in a real browser: Debian's chromium, headless, driven by
// puppeteer-core (nothing downloaded). Loads /, sends a prompt, waits for streamed text, for the
// expert-tier panel's figures to change from their first values and for the heat map to draw,
// presses stop and checks that the server freed the slot. Screenshots go to STRATA_ARTIFACTS.
// Every wait polls a condition (waitForFunction); the timeouts only catch a stuck run.
import puppeteer from 'puppeteer-core';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';

const base = process.env.STRATA_URL;
const out = process.env.STRATA_ARTIFACTS;
const chromium = process.env.STRATA_CHROMIUM || '/usr/bin/chromium';
const TIMEOUT = 60000;
if (!base || !out) throw new Error('STRATA_URL and STRATA_ARTIFACTS must be set');
mkdirSync(out, { recursive: true });

function check(cond, what) {
  if (!cond) throw new Error('check failed: ' + what);
  console.log('ok: ' + what);
}

// Figures of the panel and the heat map's pixels that are not the background.
function panel() {
  const ids = ['tier-mode', 'stat-tps', 'stat-hit-rate', 'stat-bytes-per-token', 'stat-read-bw', 'stat-limit', 'stat-precision', 'stat-recall', 'stat-totals'];
  const figures = {};
  for (const id of ids) figures[id] = document.getElementById(id).textContent;
  const cv = document.getElementById('heatmap');
  const px = cv.getContext('2d').getImageData(0, 0, cv.width, cv.height).data;
  let hot = 0;
  for (let i = 0; i < px.length; i += 4) if (px[i + 3] !== 0 && (px[i] !== 16 || px[i + 1] !== 16 || px[i + 2] !== 24)) hot++;
  return { figures, hot };
}

async function slotsIdle() {
  const r = await fetch(base + '/slots');
  const slots = await r.json();
  return slots.every((s) => s.state === 'idle');
}

const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'],
});
try {
  const page = await browser.newPage();
  page.setDefaultTimeout(TIMEOUT);
  const failures = [];
  page.on('pageerror', (e) => failures.push('page error: ' + e.message));
  page.on('requestfailed', (r) => { if (!r.url().includes('/v1/chat/completions')) failures.push('request failed: ' + r.url()); });
  await page.setViewport({ width: 1400, height: 900 });
  await page.goto(base + '/', { waitUntil: 'load' });
  await page.evaluate(`window.panel = ${panel.toString()}`);  // for the waits below, which run in the page
  // The first /stats poll has drawn the panel: the tier is streaming, nothing read yet.
  await page.waitForFunction(() => document.getElementById('tier-mode').textContent === 'streaming');
  const before = await page.evaluate(panel);
  check(before.hot === 0, 'the heat map starts empty (' + before.hot + ' hot pixels)');
  check(await page.evaluate(() => document.getElementById('model-name').textContent.includes('MoE layers')), 'the header shows the model from /props');
  await page.screenshot({ path: join(out, '1-loaded.png') });

  // A long reply (ignore_eos through the page's extra fields) so that stop has something to stop.
  await page.$eval('#max_tokens', (el) => { el.value = '2000'; });
  await page.type('#extra', '{"ignore_eos": true}');
  await page.type('#system', 'You are a storyteller.');
  await page.type('#prompt', 'And God said unto Moses,');
  await page.click('#send');
  await page.waitForFunction(() => {
    const c = document.querySelector('.msg.assistant .content');
    return c && c.textContent.length >= 40;
  });
  check(await page.$eval('#stop', (b) => !b.disabled), 'the stop button is enabled while streaming');
  // The panel's figures move from their first values and the heat map draws.
  await page.waitForFunction((first) => {
    const now = window.panel();
    const f = now.figures;
    return now.hot > 0 && f['stat-hit-rate'] !== first['stat-hit-rate'] && f['stat-bytes-per-token'] !== first['stat-bytes-per-token'] &&
      f['stat-totals'] !== first['stat-totals'] && /^[0-9.]+$/.test(f['stat-tps']) && f['stat-read-bw'] !== first['stat-read-bw'];
  }, { polling: 100 }, before.figures);
  const during = await page.evaluate(panel);
  console.log('panel while streaming: ' + JSON.stringify(during.figures) + ', ' + during.hot + ' hot pixels');
  check(during.hot > 0, 'the heat map has drawn');
  await page.screenshot({ path: join(out, '2-streaming.png') });

  await page.click('#stop');
  await page.waitForFunction(() => {
    const m = document.querySelector('.msg.assistant .meta');
    return m && m.textContent === 'stopped' && !document.getElementById('send').disabled;
  });
  check(true, 'stop ended the reply');
  // The server noticed the hang-up and freed the slot.
  await page.waitForFunction(async (b) => (await (await fetch(b + '/slots')).json()).every((s) => s.state === 'idle'), { polling: 100 }, base);
  check(await slotsIdle(), 'the server cancelled the request (every slot idle)');
  const text = await page.$eval('.msg.assistant .content', (c) => c.textContent);
  console.log('streamed text: ' + JSON.stringify(text.slice(0, 200)));
  await page.screenshot({ path: join(out, '3-stopped.png') });
  check(failures.length === 0, 'no page errors (' + failures.join('; ') + ')');
} finally {
  await browser.close();
}
console.log('webui e2e: all checks passed');
