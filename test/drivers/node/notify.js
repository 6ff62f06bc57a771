// SPDX-License-Identifier: MIT
// LISTEN/NOTIFY through pgcat in transaction mode (SPEC §11) with more
// clients than server connections: 8 node-postgres clients
// (client.on('notification')) and postgres.js's sql.listen() listen to one
// channel; a node-postgres client that listens too sends 200 notifications
// with pg_notify(), some inside transactions. Every listener must get every
// notification once, in order, each naming the notifier's processID (the
// pid pgcat gave it), and the notifier its own. Some listeners run
// transactions meanwhile. Prints "ok N" (N notifications received in all)
// or exits 1. Environment: PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE.
'use strict';
const { Client } = require('pg');
const postgres = require('postgres');

const { conn, check } = require('./env');
const CHANNEL = 'drv_events';
const COUNT = 200;

function waitFor(pred, what, ms) {
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const tick = () => {
      if (pred()) return resolve();
      if (Date.now() - t0 > ms) return reject(new Error('timed out waiting for ' + what()));
      setTimeout(tick, 20);
    };
    tick();
  });
}

async function main() {
  const listeners = [];
  for (let i = 0; i < 8; i++) {
    const c = new Client(conn);
    await c.connect();
    const got = [];
    c.on('notification', (m) => got.push(m));
    await c.query('LISTEN ' + CHANNEL);
    listeners.push({ c, got });
  }
  const jsGot = [];
  const sql = postgres({ ...conn, max: 1, onnotice: () => {} });
  await sql.listen(CHANNEL, (payload) => jsGot.push(payload));

  const notifier = new Client(conn);
  await notifier.connect();
  const own = [];
  notifier.on('notification', (m) => own.push(m));
  await notifier.query('LISTEN ' + CHANNEL);
  check(notifier.processID > 0, 'the notifier has a processID');

  // Listeners busy in transactions while notifications arrive: theirs come
  // after each COMMIT, still in order.
  let busy = true;
  const busyLoops = listeners.slice(0, 3).map(async ({ c }) => {
    while (busy) {
      await c.query('BEGIN');
      await c.query('SELECT pg_sleep(0.01)');
      await c.query('COMMIT');
    }
  });
  for (let i = 0; i < COUNT; i++) {
    if (i % 20 === 0) {
      await notifier.query('BEGIN');
      await notifier.query('SELECT pg_notify($1, $2)', [CHANNEL, 'n' + i]);
      await notifier.query('COMMIT');
    } else {
      await notifier.query('SELECT pg_notify($1, $2)', [CHANNEL, 'n' + i]);
    }
  }
  const all = () => listeners.every((l) => l.got.length >= COUNT) && jsGot.length >= COUNT && own.length >= COUNT;
  const counts = () => 'every notification (' + COUNT + ' each): listeners got ' +
    listeners.map((l) => l.got.length).join(' ') + ', postgres.js ' + jsGot.length + ', the notifier ' + own.length;
  await waitFor(all, counts, 30000);
  busy = false;
  await Promise.all(busyLoops);
  // Nothing arrives twice.
  await new Promise((r) => setTimeout(r, 200));

  const want = Array.from({ length: COUNT }, (_, i) => 'n' + i);
  let total = 0;
  for (const [k, l] of listeners.entries()) {
    check(JSON.stringify(l.got.map((m) => m.payload)) === JSON.stringify(want),
      'listener ' + k + ' got ' + l.got.length + ' notifications, not each once in order');
    check(l.got.every((m) => m.channel === CHANNEL && m.processId === notifier.processID),
      'listener ' + k + ': a notification with another channel or pid than the notifier\'s ' + notifier.processID +
      ': ' + JSON.stringify(l.got.find((m) => m.processId !== notifier.processID)));
    total += l.got.length;
  }
  check(JSON.stringify(jsGot) === JSON.stringify(want), 'postgres.js sql.listen got ' + jsGot.length + ', not each once in order');
  check(JSON.stringify(own.map((m) => m.payload)) === JSON.stringify(want), 'the notifier got ' + own.length + ' of its own');
  check(own.every((m) => m.processId === notifier.processID), 'the notifier\'s own notifications name it');
  total += jsGot.length + own.length;

  for (const { c } of listeners) await c.end();
  await notifier.end();
  await sql.end();
  console.log('ok ' + total);
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : e);
  process.exit(1);
});
