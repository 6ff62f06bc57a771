// SPDX-License-Identifier: MIT
// What the driver programs share: the connection settings from the
// environment (PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE) and check().
'use strict';

const conn = {
  host: process.env.PGHOST || '127.0.0.1',
  port: Number(process.env.PGPORT),
  user: process.env.PGUSER,
  password: process.env.PGPASSWORD,
  database: process.env.PGDATABASE,
};

function check(cond, what) {
  if (!cond) throw new Error(what);
}

module.exports = { conn, check };
