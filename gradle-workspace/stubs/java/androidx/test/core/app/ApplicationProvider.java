package androidx.test.core.app;

import android.content.Context;

public final class ApplicationProvider {
    private ApplicationProvider() {}
    public static <T extends Context> T getApplicationContext() { throw new RuntimeException("Stub!"); }
}
