// scalpel load --dashboard in a real browser: the latency chart advances while a ramp runs
// against a real loopback server, the SLO line is drawn, and at the end the page shows
// the same report as --html.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { SCALPEL, browser, freePort, http, screenshot, settleForShot, start, tempDir, until, watchConsole } from './lib.mjs';

test('load --dashboard: the chart advances during the run, then the page is the report', async () => {
  // A target process of its own (so --watch-pid has a tree to sample) whose latency grows
  // with the requests in flight, so the chart has a shape.
  const port = await freePort();
  const target = start(process.execPath, ['-e', `
    let inFlight = 0;
    require('node:http').createServer((req, res) => {
      inFlight++;
      setTimeout(() => {
        inFlight--;
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{"ok":true}');
      }, 2 + Math.min(inFlight, 20));
    }).listen(${port}, '127.0.0.1');
  `]);
  await until('the target', async () => (await http(`http://127.0.0.1:${port}/`)).status === 200, 30000);
  const dir = tempDir('scalpel-live-load-');
  const html = join(dir, 'report.html');
  const dash = await freePort();
  const load = start(SCALPEL, [
    'load', '--ramp', '40,40,240', '--step-duration', '3s', '--slo', 'p99<500ms,errors<5%',
    '--watch-pid', String(target.child.pid), '--threads', '1', '-c', '4',
    '--dashboard', `127.0.0.1:${dash}`, '--dashboard-linger', '10s', '--html', html,
    `http://127.0.0.1:${port}/v1/accounts`,
  ]);
  const chrome = await browser();
  after(async () => {
    await chrome.close();
    await load.stop();
    await target.stop();
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
  assert.match(await page.textContent('[data-chart="load-latency"]'), /SLO p99 < 500 ms/);
  assert.match(await page.textContent('[data-section="progress"]'), /step \d of 6/);
  assert.ok(await page.$('[data-chart="load-cpu"] svg'), 'the watched process has a CPU chart');
  await settleForShot(6000);
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
