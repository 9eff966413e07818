package android.widget;

import android.content.Context;

public class EditText extends TextView {
    public EditText(Context context) { super(context); throw new RuntimeException("Stub!"); }
    public void selectAll() { throw new RuntimeException("Stub!"); }
}
