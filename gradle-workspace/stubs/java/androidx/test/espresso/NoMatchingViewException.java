package androidx.test.espresso;

public final class NoMatchingViewException extends RuntimeException {
    private NoMatchingViewException() {}
}
