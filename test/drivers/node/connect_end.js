// SPDX-License-Identifier: MIT
// node-postgres's connect() and end() at once (issue 40, item 7): end()
// sends Terminate before the startup packet has gone, so the server's first
// bytes are 'X' with length 4. PostgreSQL closes without a word and the
// client's connect() settles quietly; an ErrorResponse there would be an
// unhandled rejection, which ends a Node.js process. Nothing catches it
// here on purpose. Then a normal client must work. Prints "ok 42".
// Environment: PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE.
'use strict';
const { Client } = require('pg');

const { conn, check } = require('./env');

async function main() {
  for (let i = 0; i < 20; i++) {
    const c = new Client(conn);
    c.connect();
    await c.end();
  }
  const c = new Client(conn);
  await c.connect();
  const r = await c.query('SELECT 41 + 1 AS v');
  await c.end();
  check(r.rows[0].v === 42, 'a normal client after them: ' + JSON.stringify(r.rows));
  console.log('ok', r.rows[0].v);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
