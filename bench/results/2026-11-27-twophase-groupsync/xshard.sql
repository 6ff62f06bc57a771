\set amt random(1, 1000)
\set neg -1 * :amt
INSERT INTO ledger (id, amount) VALUES (1, :neg), (3, :amt);
