package androidx.test.espresso.matcher;

import android.view.View;
import org.hamcrest.Matcher;

public final class ViewMatchers {
    private ViewMatchers() {}
    public static Matcher<View> withId(int id) { throw new RuntimeException("Stub!"); }
    public static Matcher<View> withId(Matcher<Integer> integerMatcher) { throw new RuntimeException("Stub!"); }
    public static Matcher<View> withText(String text) { throw new RuntimeException("Stub!"); }
    public static Matcher<View> withText(Matcher<String> stringMatcher) { throw new RuntimeException("Stub!"); }
    public static Matcher<View> withText(int resourceId) { throw new RuntimeException("Stub!"); }
    public static Matcher<View> withContentDescription(String text) { throw new RuntimeException("Stub!"); }
    public static Matcher<View> withContentDescription(int resourceId) { throw new RuntimeException("Stub!"); }
    public static Matcher<View> withHint(String hintText) { throw new RuntimeException("Stub!"); }
    public static Matcher<View> isDisplayed() { throw new RuntimeException("Stub!"); }
    public static Matcher<View> isCompletelyDisplayed() { throw new RuntimeException("Stub!"); }
    public static Matcher<View> isEnabled() { throw new RuntimeException("Stub!"); }
    public static Matcher<View> isClickable() { throw new RuntimeException("Stub!"); }
    public static Matcher<View> isChecked() { throw new RuntimeException("Stub!"); }
    public static Matcher<View> isNotChecked() { throw new RuntimeException("Stub!"); }
    public static Matcher<View> isRoot() { throw new RuntimeException("Stub!"); }
    public static Matcher<View> hasDescendant(Matcher<View> descendantMatcher) { throw new RuntimeException("Stub!"); }
    public static Matcher<View> withParent(Matcher<View> parentMatcher) { throw new RuntimeException("Stub!"); }
    public static Matcher<View> isAssignableFrom(Class<? extends View> clazz) { throw new RuntimeException("Stub!"); }
    public static Matcher<View> withClassName(Matcher<String> classNameMatcher) { throw new RuntimeException("Stub!"); }
    public static Matcher<View> withEffectiveVisibility(Visibility visibility) { throw new RuntimeException("Stub!"); }

    public enum Visibility { VISIBLE, INVISIBLE, GONE }
}
