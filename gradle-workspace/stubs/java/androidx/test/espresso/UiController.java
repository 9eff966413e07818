package androidx.test.espresso;

public interface UiController {
    void loopMainThreadUntilIdle();
    void loopMainThreadForAtLeast(long millisDelay);
}
