\set id random(1, 200000)
\set v random(1, 1000000)
\set nid :id + 1000000
UPDATE items SET v = :v WHERE id = :id;
SELECT v FROM items WHERE id = :id;
INSERT INTO items (id, v, note) VALUES (:nid, :v, 'b') ON CONFLICT (id) DO UPDATE SET v = excluded.v;
