// SPDX-License-Identifier: MIT

// What pgx finds at the seams of a transaction pooler (issue 28), run as
// `drivers URL seams` against a pool of ONE server connection:
//   - a query cancelled by its context (pgx sends a CancelRequest with its
//     key and closes its socket at once) never cancels another client's
//     query, and its sleep does not survive;
//   - pgxpool replaces a connection released inside a transaction: the new
//     one never gets a BackendKeyData pid given before;
//   - one pipeline "select 4, Sync, select 5, Flush" gets every result;
//   - a statement prepared before a column was dropped fails with
//     PostgreSQL's 0A000, and works again once pgx prepared it afresh.
package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

func seamCancel(ctx context.Context, url string) error {
	pool, err := pgxpool.New(ctx, withParam(url, "pool_max_conns=6"))
	if err != nil {
		return err
	}
	defer pool.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	stop := make(chan struct{})
	// B: ordinary queries all along, never to be cancelled
	for b := 0; b < 2; b++ {
		wg.Add(1)
		go func(b int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				var v int
				if err := pool.QueryRow(ctx, "SELECT $1::int", i).Scan(&v); err != nil || v != i {
					errs <- fmt.Errorf("cancel: client B%d query %d: %v", b, i, err)
					return
				}
			}
		}(b)
	}
	// A: sleeps cut by their context
	for i := 0; i < 150; i++ {
		actx, cancel := context.WithTimeout(ctx, time.Duration(20+i%30)*time.Millisecond)
		_, err := pool.Exec(actx, "SELECT pg_sleep(30)")
		cancel()
		if err == nil {
			close(stop)
			wg.Wait()
			return fmt.Errorf("cancel: round %d: the sleep was not cut", i)
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for e := range errs {
		return e
	}
	return nil
}

func seamFreshPids(ctx context.Context, url string) error {
	pool, err := pgxpool.New(ctx, withParam(url, "pool_max_conns=1"))
	if err != nil {
		return err
	}
	defer pool.Close()
	closed := map[uint32]bool{}
	for i := 0; i < 60; i++ {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		pid := c.Conn().PgConn().PID()
		if closed[pid] {
			c.Release()
			return fmt.Errorf("fresh pids: round %d: a new connection got pid %d, which a closed one had", i, pid)
		}
		if _, err := c.Exec(ctx, "BEGIN"); err != nil {
			c.Release()
			return err
		}
		// released inside a transaction: pgxpool closes it and opens another
		c.Release()
		closed[pid] = true
	}
	return nil
}

func seamFlushAfterSync(ctx context.Context, url string) error {
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	p := c.PgConn().StartPipeline(tctx)
	p.SendQueryParams("select 4", nil, nil, nil, nil)
	p.SendPipelineSync()
	p.SendQueryParams("select 5", nil, nil, nil, nil)
	p.SendFlushRequest()
	if err := p.Flush(); err != nil {
		return fmt.Errorf("flush after sync: %v", err)
	}
	want := []string{"4", "sync", "5"}
	for _, w := range want {
		r, err := p.GetResults()
		if err != nil {
			return fmt.Errorf("flush after sync: waiting for %s: %v", w, err)
		}
		switch rr := r.(type) {
		case *pgconn.ResultReader:
			res := rr.Read()
			if res.Err != nil || len(res.Rows) != 1 || string(res.Rows[0][0]) != w {
				return fmt.Errorf("flush after sync: want %s, got %v %v", w, res.Rows, res.Err)
			}
		case *pgconn.PipelineSync:
			if w != "sync" {
				return fmt.Errorf("flush after sync: want %s, got a Sync", w)
			}
		default:
			return fmt.Errorf("flush after sync: want %s, got %T", w, r)
		}
	}
	p.SendPipelineSync()
	if err := p.Flush(); err != nil {
		return err
	}
	if r, err := p.GetResults(); err != nil {
		return err
	} else if _, ok := r.(*pgconn.PipelineSync); !ok {
		return fmt.Errorf("flush after sync: want the last Sync, got %T", r)
	}
	return p.Close()
}

func seamStaleStatement(ctx context.Context, url string) error {
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	other, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer other.Close(ctx)
	if _, err := other.Exec(ctx, "DROP TABLE IF EXISTS pgcat_seam_stale; CREATE TABLE pgcat_seam_stale (id int, a int, b int); INSERT INTO pgcat_seam_stale VALUES (1, 2, 3)"); err != nil {
		return err
	}
	defer other.Exec(ctx, "DROP TABLE IF EXISTS pgcat_seam_stale")
	q := "SELECT * FROM pgcat_seam_stale WHERE id = $1"
	var id, a, b int
	if err := c.QueryRow(ctx, q, 1).Scan(&id, &a, &b); err != nil || b != 3 {
		return fmt.Errorf("stale statement: first read: %v", err)
	}
	if _, err := other.Exec(ctx, "ALTER TABLE pgcat_seam_stale DROP COLUMN b"); err != nil {
		return err
	}
	err = c.QueryRow(ctx, q, 1).Scan(&id, &a)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "0A000" || !strings.Contains(pgErr.Message, "cached plan must not change result type") {
		return fmt.Errorf("stale statement: want PostgreSQL's 0A000, got %v", err)
	}
	// pgx dropped its description on that error: prepared again, it works
	if err := c.QueryRow(ctx, q, 1).Scan(&id, &a); err != nil || id != 1 || a != 2 {
		return fmt.Errorf("stale statement: after preparing again: %v", err)
	}
	return nil
}

// withParam adds one key=value to a connection URL that may have a query.
func withParam(url, kv string) string {
	if strings.Contains(url, "?") {
		return url + "&" + kv
	}
	return url + "?" + kv
}

func seams(ctx context.Context, url string) error {
	for _, s := range []struct {
		name string
		run  func(context.Context, string) error
	}{
		{"stale statement", seamStaleStatement},
		{"flush after sync", seamFlushAfterSync},
		{"fresh pids", seamFreshPids},
		{"cancel", seamCancel},
	} {
		if err := s.run(ctx, url); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return nil
}
