package androidx.test.espresso;

public final class ViewInteraction {
    private ViewInteraction() {}
    public ViewInteraction perform(ViewAction... viewActions) { throw new RuntimeException("Stub!"); }
    public ViewInteraction check(ViewAssertion viewAssert) { throw new RuntimeException("Stub!"); }
}
