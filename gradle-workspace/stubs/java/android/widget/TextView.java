package android.widget;

import android.content.Context;
import android.view.View;

public class TextView extends View {
    public TextView(Context context) { super(context); throw new RuntimeException("Stub!"); }
    public CharSequence getText() { throw new RuntimeException("Stub!"); }
    public final void setText(CharSequence text) { throw new RuntimeException("Stub!"); }
    public final void setText(int resid) { throw new RuntimeException("Stub!"); }
    public void setTextSize(float size) { throw new RuntimeException("Stub!"); }
    public CharSequence getHint() { throw new RuntimeException("Stub!"); }
    public final void setHint(CharSequence hint) { throw new RuntimeException("Stub!"); }
}
