package android.view;

import android.content.Context;

public abstract class LayoutInflater {
    protected LayoutInflater(Context context) { throw new RuntimeException("Stub!"); }
    public static LayoutInflater from(Context context) { throw new RuntimeException("Stub!"); }
    public View inflate(int resource, ViewGroup root) { throw new RuntimeException("Stub!"); }
}
