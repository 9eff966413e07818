package androidx.test.espresso.assertion;

import android.view.View;
import androidx.test.espresso.ViewAssertion;
import org.hamcrest.Matcher;

public final class ViewAssertions {
    private ViewAssertions() {}
    public static ViewAssertion matches(Matcher<? super View> viewMatcher) { throw new RuntimeException("Stub!"); }
    public static ViewAssertion doesNotExist() { throw new RuntimeException("Stub!"); }
}
