package android.view;

import android.content.Context;

public abstract class Window {
    public Window(Context context) { throw new RuntimeException("Stub!"); }
    public abstract View getDecorView();
    public void addFlags(int flags) { throw new RuntimeException("Stub!"); }
    public void clearFlags(int flags) { throw new RuntimeException("Stub!"); }
}
