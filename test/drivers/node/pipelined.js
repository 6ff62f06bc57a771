// SPDX-License-Identifier: MIT
// postgres.js with prepare: true, pipelined (issue 20, item 2): 10
// connections with 25 queries in flight on each. postgres.js sends a new
// statement as Parse + Describe + Flush and its Bind/Execute/Sync only
// after the answer, while the other queries of the connection queue behind
// it; a transaction runs among them. Through pgcat in transaction mode with
// fewer server connections than postgres.js connections. Prints "ok N" or
// exits 1. Environment: PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE.
'use strict';
const postgres = require('postgres');

const { conn, check } = require('./env');

async function main() {
  const sql = postgres({ ...conn, max: 10, prepare: true, onnotice: () => {} });
  let done = 0;
  for (let round = 0; round < 4; round++) {
    const jobs = [];
    for (let i = 0; i < 250; i++) {
      // a few distinct statements, so that some are new to a connection
      // (Parse + Describe + Flush) while others of it are queued
      const k = (round * 250 + i) % 7;
      if (k === 0) {
        jobs.push(sql`SELECT ${i}::int + ${round}::int AS v`.then((r) => {
          check(r[0].v === i + round, 'sum ' + JSON.stringify(r));
        }));
      } else if (k === 1) {
        jobs.push(sql`SELECT ${'t' + i}::text AS t, ${i}::int8 AS n`.then((r) => {
          check(r[0].t === 't' + i && Number(r[0].n) === i, 'text ' + JSON.stringify(r));
        }));
      } else if (k === 2) {
        jobs.push(sql.begin(async (tx) => {
          const a = await tx`SELECT ${i}::int AS a`;
          const b = await tx`SELECT ${i}::int * 2 AS b`;
          check(a[0].a === i && b[0].b === 2 * i, 'transaction ' + JSON.stringify([a, b]));
        }));
      } else {
        jobs.push(sql`SELECT ${i}::int * ${k}::int AS m, ${k}::int AS k`.then((r) => {
          check(r[0].m === i * k && r[0].k === k, 'product ' + JSON.stringify(r));
        }));
      }
    }
    await Promise.all(jobs);
    done += jobs.length;
  }
  await sql.end({ timeout: 5 });
  console.log('ok', done);
}

const timer = setTimeout(() => {
  console.error('FAIL: no answer within 60 s');
  process.exit(1);
}, 60000);
main().then(() => clearTimeout(timer)).catch((e) => {
  console.error('FAIL', e);
  process.exit(1);
});
