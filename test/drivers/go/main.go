// SPDX-License-Identifier: MIT

// pgx (statement cache = named prepared statements, batches, transactions)
// and pgxpool through pgcat in transaction mode with more clients than
// server connections. Prints "ok" or exits 1. The connection string is the
// first argument.
package main

import (
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func conn(ctx context.Context, url string, id int, errs chan<- error) {
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		errs <- err
		return
	}
	defer c.Close(ctx)
	for j := 0; j < 300; j++ {
		var v int
		var s string
		err := c.QueryRow(ctx, fmt.Sprintf("SELECT $1::int + %d, $2::text", j%4), id, fmt.Sprint("k", id)).Scan(&v, &s)
		if err != nil || v != id+j%4 || s != fmt.Sprint("k", id) {
			errs <- fmt.Errorf("statement cache: %v (%d, %q)", err, v, s)
			return
		}
		if j%60 == 0 {
			tx, err := c.Begin(ctx)
			if err != nil {
				errs <- err
				return
			}
			var k int
			if err := tx.QueryRow(ctx, "SELECT $1::int * 3", j).Scan(&k); err != nil || k != 3*j {
				errs <- fmt.Errorf("transaction: %v (%d)", err, k)
				return
			}
			if err := tx.Commit(ctx); err != nil {
				errs <- err
				return
			}
		}
		if j%50 == 0 { // a pipelined batch of extended-protocol queries
			b := &pgx.Batch{}
			for q := 0; q < 5; q++ {
				b.Queue("SELECT $1::int", q)
			}
			br := c.SendBatch(ctx, b)
			for q := 0; q < 5; q++ {
				var x int
				if err := br.QueryRow().Scan(&x); err != nil || x != q {
					errs <- fmt.Errorf("batch: %v (%d)", err, x)
					br.Close()
					return
				}
			}
			if err := br.Close(); err != nil {
				errs <- err
				return
			}
		}
	}
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: drivers postgres://user:pw@host:port/db [seams]")
		os.Exit(2)
	}
	url := os.Args[1]
	ctx := context.Background()
	if len(os.Args) > 2 && os.Args[2] == "seams" {
		if err := seams(ctx, url); err != nil {
			fmt.Println("FAIL", err)
			os.Exit(1)
		}
		fmt.Println("ok")
		return
	}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(id int) { defer wg.Done(); conn(ctx, url, id, errs) }(i)
	}
	pool, err := pgxpool.New(ctx, withParam(url, "pool_max_conns=4"))
	if err != nil {
		fmt.Println("FAIL", err)
		os.Exit(1)
	}
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func(id int) {
			defer wg.Done()
			for j := 0; j < 300; j++ {
				var v int
				if err := pool.QueryRow(ctx, "SELECT $1::int", id*1000+j).Scan(&v); err != nil || v != id*1000+j {
					errs <- fmt.Errorf("pgxpool: %v (%d)", err, v)
					return
				}
			}
		}(i)
	}
	wg.Wait()
	pool.Close()
	close(errs)
	bad := 0
	for e := range errs {
		fmt.Println("FAIL", e)
		bad++
	}
	if bad > 0 {
		os.Exit(1)
	}
	fmt.Println("ok")
}
