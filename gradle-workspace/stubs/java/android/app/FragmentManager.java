package android.app;

@Deprecated
public abstract class FragmentManager {
    public FragmentManager() { throw new RuntimeException("Stub!"); }
    public abstract boolean executePendingTransactions();
}
