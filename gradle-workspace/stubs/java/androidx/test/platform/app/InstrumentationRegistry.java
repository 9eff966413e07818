package androidx.test.platform.app;

import android.app.Instrumentation;
import android.os.Bundle;

public final class InstrumentationRegistry {
    private InstrumentationRegistry() {}
    public static Instrumentation getInstrumentation() { throw new RuntimeException("Stub!"); }
    public static Bundle getArguments() { throw new RuntimeException("Stub!"); }
}
