package worldgraph;

import java.io.IOException;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.neo4j.configuration.GraphDatabaseSettings;
import org.neo4j.configuration.connectors.BoltConnector;
import org.neo4j.configuration.connectors.HttpConnector;
import org.neo4j.configuration.connectors.HttpsConnector;
import org.neo4j.configuration.helpers.SocketAddress;
import org.neo4j.dbms.api.DatabaseManagementService;
import org.neo4j.dbms.api.DatabaseManagementServiceBuilder;
import org.neo4j.graphdb.GraphDatabaseService;

/**
 * A real Neo4j 5.26 Community DBMS, embedded in this JVM, reachable over Bolt.
 *
 * <p>Usage: {@code java -jar neo4j-local.jar [--port 7687] [--host 127.0.0.1] [--data DIR] [--pagecache 256m]}
 * (defaults also from env {@code NEO4J_LOCAL_PORT}, {@code NEO4J_LOCAL_HOST}, {@code NEO4J_LOCAL_DATA},
 * {@code NEO4J_LOCAL_PAGECACHE}). Authentication is disabled, so drivers may send any credentials.
 *
 * <p>Protocol for the launcher: exactly one line {@code NEO4J_LOCAL_READY bolt://HOST:PORT} is printed on stdout
 * once the default database is available and the Bolt port accepts connections. On SIGTERM/SIGINT a shutdown hook
 * stops the DBMS cleanly (checkpoint), then {@code NEO4J_LOCAL_STOPPED} is printed. Diagnostics go to stderr and to
 * {@code DIR/logs/}. Exit code 2 means bad arguments, 1 means the DBMS failed to start.
 */
public final class Neo4jLocal {

    private Neo4jLocal() {}

    private static final PrintStream OUT = System.out;

    public static void main(String[] args) throws Exception {
        String host = env("NEO4J_LOCAL_HOST", "127.0.0.1");
        int port = Integer.parseInt(env("NEO4J_LOCAL_PORT", "7687"));
        String data = env("NEO4J_LOCAL_DATA", "neo4j-local-data");
        String pagecache = env("NEO4J_LOCAL_PAGECACHE", "256m");
        long readyTimeoutSeconds = 300;

        try {
            for (int i = 0; i < args.length; i++) {
                String a = args[i];
                switch (a) {
                    case "--port" -> port = Integer.parseInt(args[++i]);
                    case "--host" -> host = args[++i];
                    case "--data" -> data = args[++i];
                    case "--pagecache" -> pagecache = args[++i];
                    case "--ready-timeout" -> readyTimeoutSeconds = Long.parseLong(args[++i]);
                    case "-h", "--help" -> {
                        OUT.println("usage: java -jar neo4j-local.jar [--port 7687] [--host 127.0.0.1] "
                                + "[--data DIR] [--pagecache 256m] [--ready-timeout SECONDS]");
                        return;
                    }
                    default -> throw new IllegalArgumentException("unknown argument: " + a);
                }
            }
        } catch (ArrayIndexOutOfBoundsException | IllegalArgumentException e) {
            System.err.println("neo4j-local: bad arguments: " + e.getMessage() + " (try --help)");
            System.exit(2);
            return;
        }

        Path home = Path.of(data).toAbsolutePath().normalize();
        Files.createDirectories(home);
        System.err.printf("neo4j-local: starting Neo4j (home=%s, bolt=%s:%d, pagecache=%s)%n", home, host, port, pagecache);

        long t0 = System.nanoTime();
        DatabaseManagementService dbms;
        try {
            dbms = new DatabaseManagementServiceBuilder(home)
                    .setConfig(BoltConnector.enabled, true)
                    .setConfig(BoltConnector.listen_address, new SocketAddress(host, port))
                    .setConfig(BoltConnector.encryption_level, BoltConnector.EncryptionLevel.DISABLED)
                    .setConfig(HttpConnector.enabled, false)
                    .setConfig(HttpsConnector.enabled, false)
                    .setConfig(GraphDatabaseSettings.auth_enabled, false)
                    .setConfig(GraphDatabaseSettings.pagecache_memory, parseBytes(pagecache))
                    .build();
        } catch (RuntimeException e) {
            System.err.println("neo4j-local: failed to start Neo4j: " + e);
            e.printStackTrace();
            System.exit(1);
            return;
        }

        CountDownLatch stopped = new CountDownLatch(1);
        final DatabaseManagementService managed = dbms;
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            System.err.println("neo4j-local: shutting down");
            try {
                managed.shutdown();
            } catch (RuntimeException e) {
                System.err.println("neo4j-local: error during shutdown: " + e);
            }
            OUT.println("NEO4J_LOCAL_STOPPED");
            OUT.flush();
            stopped.countDown();
        }, "neo4j-local-shutdown"));

        GraphDatabaseService db = dbms.database(GraphDatabaseSettings.DEFAULT_DATABASE_NAME);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(readyTimeoutSeconds);
        if (!db.isAvailable(TimeUnit.SECONDS.toMillis(readyTimeoutSeconds))) {
            System.err.println("neo4j-local: default database did not become available in time");
            System.exit(1);
        }
        String connectHost = host.equals("0.0.0.0") ? "127.0.0.1" : host;
        while (!portOpen(connectHost, port)) {
            if (System.nanoTime() > deadline) {
                System.err.println("neo4j-local: Bolt port " + port + " did not open in time");
                System.exit(1);
            }
            Thread.sleep(100);
        }

        System.err.printf("neo4j-local: ready in %.1fs%n", (System.nanoTime() - t0) / 1e9);
        OUT.println("NEO4J_LOCAL_READY bolt://" + connectHost + ":" + port);
        OUT.flush();

        // Block the main thread; the shutdown hook releases it (the JVM exits once the hooks finished).
        stopped.await();
    }

    private static String env(String name, String fallback) {
        String v = System.getenv(name);
        return v == null || v.isBlank() ? fallback : v;
    }

    private static boolean portOpen(String host, int port) {
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress(host, port), 500);
            return true;
        } catch (IOException e) {
            return false;
        }
    }

    /** Parses sizes like {@code 256m}, {@code 1g}, {@code 512k} or a plain byte count. */
    static long parseBytes(String s) {
        String v = s.trim().toLowerCase();
        long mult = 1;
        char last = v.charAt(v.length() - 1);
        switch (last) {
            case 'k' -> mult = 1024L;
            case 'm' -> mult = 1024L * 1024;
            case 'g' -> mult = 1024L * 1024 * 1024;
            default -> { }
        }
        if (mult != 1) {
            v = v.substring(0, v.length() - 1);
        }
        return Long.parseLong(v) * mult;
    }
}
