package android.content;

public class IntentFilter {
    public IntentFilter() { throw new RuntimeException("Stub!"); }
    public IntentFilter(String action) { throw new RuntimeException("Stub!"); }
    public final void addAction(String action) { throw new RuntimeException("Stub!"); }
}
