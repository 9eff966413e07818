package android.app;

public abstract class ActionBar {
    public ActionBar() { throw new RuntimeException("Stub!"); }
    public abstract void setTitle(CharSequence title);
    public abstract CharSequence getTitle();
    public abstract void show();
    public abstract void hide();
    public abstract boolean isShowing();
}
