// SPDX-License-Identifier: MIT
// pgjdbc with prepareThreshold=1 (server-side named statements from the first
// execution), batches and transactions, through pgcat in transaction mode with
// more threads than server connections. Prints "ok N" or exits 1.
// Argument: the JDBC URL.
import java.sql.*;
import java.util.*;
import java.util.concurrent.*;

public class Drivers {
  static void check(boolean cond, String what) {
    if (!cond) throw new IllegalStateException(what);
  }

  static int worker(String url, int id) throws SQLException {
    int n = 0;
    try (Connection c = DriverManager.getConnection(url)) {
      PreparedStatement ps = c.prepareStatement("SELECT ?::int + 1, ?::text");
      for (int i = 0; i < 300; i++) {
        ps.setInt(1, id * 1000 + i);
        ps.setString(2, "j" + id);
        try (ResultSet rs = ps.executeQuery()) {
          check(rs.next(), "no row");
          check(rs.getInt(1) == id * 1000 + i + 1 && rs.getString(2).equals("j" + id), "wrong row");
        }
        if (i % 50 == 0) {
          c.setAutoCommit(false);
          try (PreparedStatement p2 = c.prepareStatement("SELECT ?::int * 2")) {
            p2.setInt(1, i);
            try (ResultSet rs = p2.executeQuery()) {
              check(rs.next() && rs.getInt(1) == 2 * i, "in a transaction");
            }
          }
          c.commit();
          c.setAutoCommit(true);
        }
        if (i % 100 == 0) {
          try (PreparedStatement bad = c.prepareStatement("SELECT 1 / ?::int")) {
            bad.setInt(1, 0);
            bad.executeQuery();
            check(false, "division by zero did not fail");
          } catch (SQLException e) {
            check("22012".equals(e.getSQLState()), "expected 22012, got " + e.getSQLState());
          }
        }
        n++;
      }
      // The test made this table; it counts the rows afterwards.
      try (PreparedStatement b = c.prepareStatement("INSERT INTO pgcat_drivers_jdbc (worker, k) VALUES (?, ?)")) {
        for (int k = 0; k < 10; k++) {
          b.setInt(1, id);
          b.setInt(2, k);
          b.addBatch();
        }
        int[] counts = b.executeBatch();
        check(counts.length == 10, "batch of 10 inserts");
      }
    }
    return n;
  }

  public static void main(String[] args) throws Exception {
    String url = args[0];
    ExecutorService ex = Executors.newFixedThreadPool(8);
    List<Future<Integer>> fs = new ArrayList<>();
    for (int t = 0; t < 8; t++) {
      final int id = t;
      fs.add(ex.submit(() -> worker(url, id)));
    }
    int total = 0;
    try {
      for (Future<Integer> f : fs) total += f.get();
    } catch (ExecutionException e) {
      System.out.println("FAIL " + e.getCause());
      System.exit(1);
    } finally {
      ex.shutdown();
    }
    System.out.println("ok " + total);
  }
}
