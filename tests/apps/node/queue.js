'use strict';
// A queue worker: it never listens; it takes "jobs" from a timer. GET nothing. With
// BLOCK_AFTER_MS=N it blocks its event loop for good N ms after start (a stuck job).
let done = 0;
setInterval(() => { done += 1; }, 50);
if (process.env.BLOCK_AFTER_MS) {
  setTimeout(() => { for (;;) { /* a stuck job */ } }, Number(process.env.BLOCK_AFTER_MS));
}
console.log('queue worker started');
