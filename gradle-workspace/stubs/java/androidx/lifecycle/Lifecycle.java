package androidx.lifecycle;

public abstract class Lifecycle {
    public Lifecycle() { throw new RuntimeException("Stub!"); }
    public abstract State getCurrentState();

    public enum State { DESTROYED, INITIALIZED, CREATED, STARTED, RESUMED;
        public boolean isAtLeast(State state) { throw new RuntimeException("Stub!"); }
    }
}
