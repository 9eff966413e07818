package androidx.test.espresso;

import android.view.View;
import org.hamcrest.Matcher;

public final class Espresso {
    private Espresso() {}
    public static ViewInteraction onView(Matcher<View> viewMatcher) { throw new RuntimeException("Stub!"); }
    public static void pressBack() { throw new RuntimeException("Stub!"); }
    public static boolean pressBackUnconditionally() { throw new RuntimeException("Stub!"); }
    public static void closeSoftKeyboard() { throw new RuntimeException("Stub!"); }
    public static void onIdle() { throw new RuntimeException("Stub!"); }
}
