// A JIT-hot Java program with a known CPU split: hotA runs 3 times the iterations of hotB (75/25 of
// the worker's time), each with the same loop body, under a few frames of its own (main -> run ->
// round -> hotA/hotB). Usage: java JvmSplit SECONDS [wait]. With `wait` it warms up (the JIT compiles
// both methods), prints its pid and waits for a line on stdin before the timed part, so a profiler can
// attach to a JIT-compiled program; it prints its checksum at the end so no loop is optimised away.
// Run it with -XX:CompileCommand=dontinline,JvmSplit::hot* so each method keeps its own frame: the
// program's structure, not a profiler's need.
import java.io.BufferedReader;
import java.io.InputStreamReader;

public class JvmSplit {
    static long hotA(long x, int n) {
        for (int i = 0; i < n; i++) {
            x ^= x << 13;
            x ^= x >>> 7;
            x ^= x << 17;
        }
        return x;
    }

    static long hotB(long x, int n) {
        for (int i = 0; i < n; i++) {
            x ^= x << 13;
            x ^= x >>> 7;
            x ^= x << 17;
        }
        return x;
    }

    // Each round draws its length from the state (80,000-119,999 iterations of hotB, 3 times that of
    // hotA): rounds all of one length could keep step with a sampling clock and put its samples at one
    // place in them.
    static long round(long x) {
        int n = 80_000 + (int) ((x >>> 33) % 40_000);
        x = hotA(x, 3 * n);
        return hotB(x, n);
    }

    static long run(long x, long untilNanos) {
        while (System.nanoTime() < untilNanos) {
            for (int i = 0; i < 20; i++) {
                x = round(x);
            }
        }
        return x;
    }

    public static void main(String[] args) throws Exception {
        double seconds = Double.parseDouble(args[0]);
        boolean wait = args.length > 1 && args[1].equals("wait");
        long x = 88172645463325252L;
        // Warm-up: both methods compiled by C2 before anyone looks.
        x = run(x, System.nanoTime() + 1_500_000_000L);
        if (wait) {
            System.out.println(ProcessHandle.current().pid());
            System.out.flush();
            new BufferedReader(new InputStreamReader(System.in)).readLine();
        }
        x = run(x, System.nanoTime() + (long) (seconds * 1e9));
        System.out.println("checksum " + x);
    }
}
