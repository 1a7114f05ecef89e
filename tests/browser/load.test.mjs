// scalpel load --dashboard in a real browser: the latency chart advances while a ramp runs
// against a real loopback server, the SLO line is drawn, and at the end the page shows
// the same report as --html.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { SCALPEL, browser, freePort, http, screenshot, start, tempDir, until, upstream, watchConsole } from './lib.mjs';

test('load --dashboard: the chart advances during the run, then the page is the report', async () => {
  // A target whose latency grows with the rate, so the chart has a shape.
  let inFlight = 0;
  const target = await upstream((req, res) => {
    inFlight++;
    setTimeout(() => {
      inFlight--;
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"ok":true}');
    }, 2 + Math.min(inFlight, 20));
  });
  const dir = tempDir('scalpel-live-load-');
  const html = join(dir, 'report.html');
  const dash = await freePort();
  const load = start(SCALPEL, [
    'load', '--ramp', '40,40,160', '--step-duration', '3s', '--slo', 'p99<50ms,errors<1%',
    '--watch-pid', String(process.pid), '--threads', '1', '-c', '4',
    '--dashboard', `127.0.0.1:${dash}`, '--dashboard-linger', '10s', '--html', html,
    `http://127.0.0.1:${target.port}/v1/accounts`,
  ]);
  const chrome = await browser();
  after(async () => {
    await chrome.close();
    await load.stop();
    await target.close();
  });
  await until('the dashboard', async () => (await http(`http://127.0.0.1:${dash}/`)).status === 200, 30000)
    .catch((e) => { throw new Error(e.message + '\n' + load.output()); });

  const page = await chrome.context.newPage();
  const problems = watchConsole(page);
  await page.goto(`http://127.0.0.1:${dash}/`);
  const points = () => page.evaluate(() => {
    const line = document.querySelector('[data-chart="load-latency"] polyline[data-series$=" p99"]');
    const pts = line ? line.getAttribute('points').trim() : '';
    return pts ? pts.split(' ').length : 0;
  });
  await page.waitForFunction(() => {
    const line = document.querySelector('[data-chart="load-latency"] polyline[data-series$=" p99"]');
    return line && line.getAttribute('points').trim().split(' ').length >= 2;
  }, null, { timeout: 30000 });
  const first = await points();
  // The chart advances: more points a few seconds later, without a reload.
  await page.evaluate(() => { window.__notReloaded = true; });
  await page.waitForFunction((n) => {
    const line = document.querySelector('[data-chart="load-latency"] polyline[data-series$=" p99"]');
    return line && line.getAttribute('points').trim().split(' ').length >= n + 2;
  }, first, { timeout: 30000 });
  assert.equal(await page.evaluate(() => window.__notReloaded), true);
  // The SLO's latency bound is drawn, and the step is shown.
  assert.match(await page.textContent('[data-chart="load-latency"]'), /SLO p99 < 50 ms/);
  assert.match(await page.textContent('[data-section="progress"]'), /step \d of 4/);
  assert.ok(await page.$('[data-chart="load-cpu"] svg'), 'the watched process has a CPU chart');
  await screenshot(page, 'live-load.png');

  // At the end the page turns into the report, the same bytes as --html.
  await page.waitForFunction(() => document.title.startsWith('Load report'), null, { timeout: 60000 });
  assert.match(await page.content(), /Latency per step/);
  // Served while the dashboard lingers: the very bytes of the --html file.
  const served = await http(`http://127.0.0.1:${dash}/`);
  const written = await until('the --html file', async () => {
    const text = readFileSync(html, 'utf8');
    return text.includes('</html>') && text;
  }, 10000);
  assert.equal(served.text, written);
  const exit = await load.exited;
  assert.equal(exit.code, 0, load.output());
  assert.deepEqual(problems, []);
});
