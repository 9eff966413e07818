package android.os;

public final class SystemClock {
    SystemClock() { throw new RuntimeException("Stub!"); }
    public static void sleep(long ms) { throw new RuntimeException("Stub!"); }
    public static long uptimeMillis() { throw new RuntimeException("Stub!"); }
    public static long elapsedRealtime() { throw new RuntimeException("Stub!"); }
    public static long elapsedRealtimeNanos() { throw new RuntimeException("Stub!"); }
    public static long currentThreadTimeMillis() { throw new RuntimeException("Stub!"); }
}
