\set amt random(1, 1000)
INSERT INTO ledger (id, amount) VALUES (2, :amt);
