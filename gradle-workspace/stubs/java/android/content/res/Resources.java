package android.content.res;

public class Resources {
    public Resources() { throw new RuntimeException("Stub!"); }
    public String getString(int id) { throw new RuntimeException("Stub!"); }
    public CharSequence getText(int id) { throw new RuntimeException("Stub!"); }
    public int getInteger(int id) { throw new RuntimeException("Stub!"); }

    public final Theme newTheme() { throw new RuntimeException("Stub!"); }

    public final class Theme {
        Theme() { throw new RuntimeException("Stub!"); }
        public void applyStyle(int resId, boolean force) { throw new RuntimeException("Stub!"); }
    }
}
