package android.content;

import android.os.Bundle;

public class Intent {
    public static final String ACTION_MAIN = "android.intent.action.MAIN";
    public static final String ACTION_VIEW = "android.intent.action.VIEW";
    public static final int FLAG_ACTIVITY_NEW_TASK = 268435456;
    public static final int FLAG_ACTIVITY_CLEAR_TASK = 32768;
    public Intent() { throw new RuntimeException("Stub!"); }
    public Intent(String action) { throw new RuntimeException("Stub!"); }
    public Intent(Context packageContext, Class<?> cls) { throw new RuntimeException("Stub!"); }
    public String getAction() { throw new RuntimeException("Stub!"); }
    public Intent setAction(String action) { throw new RuntimeException("Stub!"); }
    public Intent addFlags(int flags) { throw new RuntimeException("Stub!"); }
    public Intent setFlags(int flags) { throw new RuntimeException("Stub!"); }
    public Bundle getExtras() { throw new RuntimeException("Stub!"); }
    public Intent putExtra(String name, String value) { throw new RuntimeException("Stub!"); }
    public Intent putExtra(String name, int value) { throw new RuntimeException("Stub!"); }
    public Intent putExtra(String name, long value) { throw new RuntimeException("Stub!"); }
    public Intent putExtra(String name, boolean value) { throw new RuntimeException("Stub!"); }
    public String getStringExtra(String name) { throw new RuntimeException("Stub!"); }
    public int getIntExtra(String name, int defaultValue) { throw new RuntimeException("Stub!"); }
    public boolean getBooleanExtra(String name, boolean defaultValue) { throw new RuntimeException("Stub!"); }
}
