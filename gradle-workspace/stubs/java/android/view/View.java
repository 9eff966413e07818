package android.view;

import android.content.Context;

public class View {
    public static final int VISIBLE = 0;
    public static final int INVISIBLE = 4;
    public static final int GONE = 8;
    public View(Context context) { throw new RuntimeException("Stub!"); }
    public int getId() { throw new RuntimeException("Stub!"); }
    public void setId(int id) { throw new RuntimeException("Stub!"); }
    public Context getContext() { throw new RuntimeException("Stub!"); }
    public int getVisibility() { throw new RuntimeException("Stub!"); }
    public void setVisibility(int visibility) { throw new RuntimeException("Stub!"); }
    public boolean isEnabled() { throw new RuntimeException("Stub!"); }
    public void setEnabled(boolean enabled) { throw new RuntimeException("Stub!"); }
    public boolean performClick() { throw new RuntimeException("Stub!"); }
    public void setOnClickListener(OnClickListener l) { throw new RuntimeException("Stub!"); }
    public boolean post(Runnable action) { throw new RuntimeException("Stub!"); }
    public boolean postDelayed(Runnable action, long delayMillis) { throw new RuntimeException("Stub!"); }
    public void invalidate() { throw new RuntimeException("Stub!"); }
    public void requestLayout() { throw new RuntimeException("Stub!"); }
    public <T extends View> T findViewById(int id) { throw new RuntimeException("Stub!"); }
    public View getRootView() { throw new RuntimeException("Stub!"); }

    public interface OnClickListener {
        void onClick(View v);
    }
}
