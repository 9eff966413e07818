package androidx.test.espresso.action;

import androidx.test.espresso.ViewAction;

public final class ViewActions {
    private ViewActions() {}
    public static ViewAction click() { throw new RuntimeException("Stub!"); }
    public static ViewAction longClick() { throw new RuntimeException("Stub!"); }
    public static ViewAction doubleClick() { throw new RuntimeException("Stub!"); }
    public static ViewAction typeText(String stringToBeTyped) { throw new RuntimeException("Stub!"); }
    public static ViewAction replaceText(String stringToBeSet) { throw new RuntimeException("Stub!"); }
    public static ViewAction clearText() { throw new RuntimeException("Stub!"); }
    public static ViewAction closeSoftKeyboard() { throw new RuntimeException("Stub!"); }
    public static ViewAction pressBack() { throw new RuntimeException("Stub!"); }
    public static ViewAction pressImeActionButton() { throw new RuntimeException("Stub!"); }
    public static ViewAction scrollTo() { throw new RuntimeException("Stub!"); }
    public static ViewAction swipeLeft() { throw new RuntimeException("Stub!"); }
    public static ViewAction swipeRight() { throw new RuntimeException("Stub!"); }
    public static ViewAction swipeUp() { throw new RuntimeException("Stub!"); }
    public static ViewAction swipeDown() { throw new RuntimeException("Stub!"); }
}
