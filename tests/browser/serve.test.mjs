// scalpel serve's live page in a real browser: the workers, a blocked worker's successor
// appearing without a reload, and the reload button reached by keyboard.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  ROOT, SCALPEL, browser, freeBase, freePort, http, screenshot, settleForShot, sleep, start, tempDir, until, watchConsole,
} from './lib.mjs';

const APP = join(ROOT, 'crates/serve/tests/apps/app.js');

test('serve: the page shows the workers, then a blocked worker\'s successor without a reload', async () => {
  const dir = tempDir('scalpel-live-serve-');
  const [listen, admin, base, nextBase] = [await freePort(), await freePort(), await freeBase(4), await freeBase(2)];
  const config = join(dir, 'serve.toml');
  writeFileSync(config, `
[server]
listen = "127.0.0.1:${listen}"
admin = "127.0.0.1:${admin}"

[[app]]
name = "web"
command = ["node", "${APP}"]
workers = 2
port_base = ${base}
start_timeout_ms = 60000

[app.health]
path = "/healthz"
interval_ms = 300
timeout_ms = 300
failures = 2

[[app]]
name = "next"
command = ["node", "${APP}"]
workers = 1
port_base = ${nextBase}
start_timeout_ms = 60000
env = { APP_TAG = "next" }

[[route]]
prefix = "/block"
app = "web"

[[route]]
prefix = "/"
split = [{ app = "web", weight = 3 }, { app = "next", weight = 1 }]
`);
  const serve = start(SCALPEL, ['serve', '--config', config], { cwd: dir });
  const chrome = await browser();
  let traffic = true;
  after(async () => {
    traffic = false;
    await chrome.close();
    await serve.stop();
  });
  const status = async () => JSON.parse((await http(`http://127.0.0.1:${admin}/status`)).text);
  await until('every worker ready', async () => (await status()).apps.every((a) => a.ready === a.workers.length), 90000)
    .catch((e) => { throw new Error(e.message + '\n' + serve.output()); });

  // A little steady traffic so the route table and charts have figures.
  (async () => {
    while (traffic) {
      await http(`http://127.0.0.1:${listen}/`).catch(() => {});
      await sleep(50);
    }
  })();

  const page = await chrome.context.newPage();
  const problems = watchConsole(page);
  await page.goto(`http://127.0.0.1:${admin}/`);
  await page.waitForSelector('tr[data-worker="web/0"][data-state="ready"]');
  await page.waitForSelector('tr[data-worker="web/1"][data-state="ready"]');
  const before = await page.$$eval('tr[data-worker^="web/"]', (rows) => rows.map((r) => r.dataset.pid));
  assert.equal(before.length, 2);
  // Marks this document: if the page reloaded, the mark would be gone.
  await page.evaluate(() => { window.__notReloaded = true; });

  // Block one worker's event loop with a request that is never resent (POST).
  const blocked = http(`http://127.0.0.1:${listen}/block?ms=30000`, { method: 'POST', body: 'x' }, 60000).catch(() => null);
  const successor = await page.waitForFunction((old) => {
    for (const row of document.querySelectorAll('tr[data-worker^="web/"]')) {
      if (row.dataset.state === 'ready' && row.dataset.pid && !old.includes(row.dataset.pid)
        && row.textContent.includes('unhealthy')) return row.dataset.worker;
    }
    return false;
  }, before, { timeout: 60000, polling: 200 })
    .catch(async (e) => { throw new Error(e.message + '\n' + await page.textContent('#content') + '\n' + serve.output().slice(-3000)); });
  const slot = await successor.jsonValue();
  assert.match(slot, /^web\/[01]$/);
  assert.equal(await page.evaluate(() => window.__notReloaded), true, 'the page was not reloaded');
  const statusNow = await status();
  const w = statusNow.apps[0].workers[Number(slot.split('/')[1])];
  assert.ok(!before.includes(String(w.pid)), 'the /status pid is the new one too');
  assert.ok(w.restarts >= 1);

  await page.waitForSelector('[data-section="routes"] td');
  await page.waitForFunction(() => document.querySelectorAll('[data-chart="route-rate"] polyline').length === 3);
  await settleForShot(20000);
  await screenshot(page, 'live-serve.png');

  // The blocked process is gone (SIGKILL after stop_grace_ms) before the reload, whose
  // new incarnation of that slot takes the port the blocked one held.
  await blocked;
  await until('the blocked process gone', async () => {
    try { process.kill(Number(before.find((p) => !(statusNow.apps[0].workers.some((x) => String(x.pid) === p)))), 0); return false; } catch (e) { return true; }
  }, 30000);

  // The reload button, reached by keyboard: skip link, then the button.
  await page.keyboard.press('Tab');
  await page.keyboard.press('Tab');
  assert.equal(await page.evaluate(() => document.activeElement.textContent), 'Reload config');
  const pidsBeforeReload = await page.$$eval('tr[data-worker]', (rows) => rows.map((r) => r.dataset.pid));
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => document.getElementById('live-result').textContent === 'Reload config: done', null, { timeout: 90000 })
    .catch(async (e) => { throw new Error(e.message + '\nresult: ' + await page.textContent('#live-result') + '\n' + serve.output().slice(-4000)); });
  await page.waitForFunction((old) => {
    const rows = [...document.querySelectorAll('tr[data-worker]')];
    return rows.length === 3 && rows.every((r) => r.dataset.state === 'ready' && !old.includes(r.dataset.pid));
  }, pidsBeforeReload, { timeout: 30000 });

  traffic = false;
  assert.deepEqual(problems, []);
});

test('serve: the page in dark mode', async () => {
  // Only the screenshot differs; the colours come from prefers-color-scheme.
  const dir = tempDir('scalpel-live-serve-dark-');
  const [listen, admin, base] = [await freePort(), await freePort(), await freeBase(4)];
  const config = join(dir, 'serve.toml');
  writeFileSync(config, `
[server]
listen = "127.0.0.1:${listen}"
admin = "127.0.0.1:${admin}"

[[app]]
name = "web"
command = ["node", "${APP}"]
workers = 2
port_base = ${base}
start_timeout_ms = 60000

[app.health]
path = "/healthz"
`);
  const serve = start(SCALPEL, ['serve', '--config', config], { cwd: dir });
  const chrome = await browser({ colorScheme: 'dark' });
  after(async () => {
    await chrome.close();
    await serve.stop();
  });
  await until('the admin address', async () => (await http(`http://127.0.0.1:${admin}/status`)).status === 200, 90000);
  let traffic = true;
  (async () => {
    while (traffic) {
      await http(`http://127.0.0.1:${listen}/`).catch(() => {});
      await sleep(100);
    }
  })();
  const page = await chrome.context.newPage();
  const problems = watchConsole(page);
  await page.goto(`http://127.0.0.1:${admin}/`);
  await page.waitForSelector('tr[data-worker="web/1"][data-state="ready"]', { timeout: 60000 });
  const bg = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  assert.equal(bg, 'rgb(15, 22, 29)', 'dark background from prefers-color-scheme');
  await page.waitForSelector('[data-chart="route-rate"] svg');
  await settleForShot(12000);
  await screenshot(page, 'live-serve-dark.png');
  traffic = false;
  assert.deepEqual(problems, []);
});
