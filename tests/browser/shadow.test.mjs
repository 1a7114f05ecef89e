// scalpel shadow proxy's live page in a real browser: a difference planted in one field of
// one endpoint shows up with its field path, per-endpoint consistency and both latencies.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { SCALPEL, SHOTS, browser, freePort, http, screenshot, sleep, start, until, upstream, watchConsole } from './lib.mjs';

function account(req, res, candidate) {
  const url = new URL(req.url, 'http://x');
  const m = url.pathname.match(/^\/v1\/users\/(\d+)$/);
  if (!m) {
    res.writeHead(404, { 'content-type': 'application/json' });
    res.end('{"error":"not found"}');
    return;
  }
  const id = Number(m[1]);
  // The planted difference: the candidate gets user 7's balance wrong by one cent.
  const balance = candidate && id === 7 ? 10001 : 10000;
  const body = JSON.stringify({ id, balance, currency: 'EUR', stats: { orders: id * 3 } });
  // The candidate is a little slower, so its latency stands apart from the primary's.
  setTimeout(() => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(body);
  }, candidate ? 6 : 1);
}

test('shadow proxy: the page shows a planted difference with its field path', async () => {
  const primary = await upstream((q, s) => account(q, s, false));
  const candidate = await upstream((q, s) => account(q, s, true));
  const [listen, admin] = [await freePort(), await freePort()];
  const proxy = start(SCALPEL, [
    'shadow', 'proxy', '--listen', `127.0.0.1:${listen}`,
    '--primary', `http://127.0.0.1:${primary.port}`, '--candidate', `http://127.0.0.1:${candidate.port}`,
    '--admin', `127.0.0.1:${admin}`, '--route', '/v1/users/{id}',
  ]);
  const chrome = await browser();
  after(async () => {
    await chrome.close();
    await proxy.stop();
    await primary.close();
    await candidate.close();
  });
  await until('the proxy', async () => (await http(`http://127.0.0.1:${admin}/summary.json`)).status === 200, 30000)
    .catch((e) => { throw new Error(e.message + '\n' + proxy.output()); });

  const page = await chrome.context.newPage();
  const problems = watchConsole(page);
  await page.goto(`http://127.0.0.1:${admin}/`);
  await page.waitForSelector('[data-section="cards"]');

  // Ten users, twice: user 7 differs each time.
  for (let round = 0; round < 2; round++) {
    for (let id = 1; id <= 10; id++) {
      const r = await http(`http://127.0.0.1:${listen}/v1/users/${id}`);
      assert.equal(r.status, 200);
      assert.equal(JSON.parse(r.text).balance, 10000, 'clients always get the primary\'s answer');
    }
  }
  await until('20 pairs compared', async () => JSON.parse((await http(`http://127.0.0.1:${admin}/summary.json`)).text).compared === 20, 30000);

  const diff = await page.waitForSelector('tr[data-diff="$.balance"]', { timeout: 15000 });
  const text = await diff.textContent();
  assert.match(text, /GET \/v1\/users\/7/);
  assert.match(text, /\$\.balance \(value_changed\)/);
  const row = await page.waitForSelector('tr[data-endpoint="/v1/users/{id}"]');
  await page.waitForFunction(() => {
    const r = document.querySelector('tr[data-endpoint="/v1/users/{id}"]');
    return r && r.children[1].textContent === '20';
  });
  const cells = await row.$$eval('th, td', (c) => c.map((x) => x.textContent));
  // endpoint, compared, consistency, mismatched, errors, primary p50, candidate p50, …
  assert.deepEqual(cells.slice(0, 5), ['/v1/users/{id}', '20', '90.0%', '2', '0']);
  const p50 = Number(cells[5]);
  const c50 = Number(cells[6]);
  assert.ok(c50 > p50, `candidate p50 ${c50} ms above primary p50 ${p50} ms`);
  // The consistency card and the skipped counts.
  const cards = await page.textContent('[data-section="cards"]');
  assert.match(cards, /90\.0%/);
  assert.match(cards, /skipped/);
  await page.waitForFunction(() => document.querySelectorAll('[data-chart="shadow-latency"] polyline').length === 4);
  if (SHOTS) {
    // Some history for the charts: ten users a second for fifteen seconds.
    for (let s = 0; s < 15; s++) {
      for (let id = 1; id <= 10; id++) await http(`http://127.0.0.1:${listen}/v1/users/${id}`);
      await sleep(1000);
    }
    await sleep(1500);
  }
  await screenshot(page, 'live-shadow.png');
  assert.deepEqual(problems, []);
});
