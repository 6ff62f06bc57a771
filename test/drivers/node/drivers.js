// SPDX-License-Identifier: MIT
// node-postgres (named prepared statements, unnamed ones, transactions) and
// postgres.js (prepare: true, transactions) through pgcat in transaction mode
// with more clients than server connections. Prints "ok N" or exits 1.
// Environment: PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE.
'use strict';
const { Client } = require('pg');
const postgres = require('postgres');

const { conn, check } = require('./env');

async function nodePg(id) {
  const c = new Client(conn);
  await c.connect();
  let n = 0;
  for (let i = 0; i < 200; i++) {
    const k = i % 3;
    const r = await c.query({ name: 'q' + k, text: 'SELECT $1::int + ' + k + ' AS v', values: [id] });
    check(r.rows[0].v === id + k, 'node-postgres named statement q' + k + ': ' + JSON.stringify(r.rows));
    const r2 = await c.query('SELECT $1::text AS t', ['x' + id]);
    check(r2.rows[0].t === 'x' + id, 'node-postgres unnamed statement: ' + JSON.stringify(r2.rows));
    if (i % 50 === 0) {
      await c.query('BEGIN');
      const r3 = await c.query({ name: 'dbl', text: 'SELECT $1::int * 2 AS d', values: [i] });
      check(r3.rows[0].d === 2 * i, 'node-postgres in a transaction');
      await c.query('COMMIT');
    }
    n++;
  }
  // A statement error must not break the named statements that follow.
  let failed = false;
  try {
    await c.query({ name: 'bad', text: 'SELECT 1/$1::int AS z', values: [0] });
  } catch (e) {
    failed = e.code === '22012';
  }
  check(failed, 'node-postgres: division by zero expected 22012');
  const r4 = await c.query({ name: 'q1', text: 'SELECT $1::int + 1 AS v', values: [id] });
  check(r4.rows[0].v === id + 1, 'node-postgres after an error');
  await c.end();
  return n;
}

async function postgresJs(id) {
  const sql = postgres({ ...conn, max: 2, prepare: true, onnotice: () => {} });
  let n = 0;
  for (let i = 0; i < 200; i++) {
    const r = await sql`SELECT ${id}::int + ${i % 5}::int AS v, ${'s' + id}::text AS s`;
    check(r[0].v === id + (i % 5) && r[0].s === 's' + id, 'postgres.js: ' + JSON.stringify(r));
    if (i % 40 === 0) {
      await sql.begin(async (tx) => {
        const q = await tx`SELECT ${i}::int AS k`;
        check(q[0].k === i, 'postgres.js in a transaction');
      });
    }
    n++;
  }
  await sql.end();
  return n;
}

(async () => {
  const jobs = [];
  for (let i = 0; i < 8; i++) {
    jobs.push(nodePg(i));
    jobs.push(postgresJs(100 + i));
  }
  const done = await Promise.all(jobs);
  console.log('ok', done.reduce((a, b) => a + b, 0));
})().catch((e) => {
  console.error('FAIL', e);
  process.exit(1);
});
