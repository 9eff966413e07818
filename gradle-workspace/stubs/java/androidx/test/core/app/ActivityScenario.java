package androidx.test.core.app;

import android.app.Activity;
import android.app.Instrumentation;
import android.content.Intent;
import android.os.Bundle;
import androidx.lifecycle.Lifecycle;
import java.io.Closeable;

public final class ActivityScenario<A extends Activity> implements AutoCloseable, Closeable {
    private ActivityScenario() {}
    public static <A extends Activity> ActivityScenario<A> launch(Class<A> activityClass) { throw new RuntimeException("Stub!"); }
    public static <A extends Activity> ActivityScenario<A> launch(Class<A> activityClass, Bundle activityOptions) { throw new RuntimeException("Stub!"); }
    public static <A extends Activity> ActivityScenario<A> launch(Intent startActivityIntent) { throw new RuntimeException("Stub!"); }
    public static <A extends Activity> ActivityScenario<A> launch(Intent startActivityIntent, Bundle activityOptions) { throw new RuntimeException("Stub!"); }
    public static <A extends Activity> ActivityScenario<A> launchActivityForResult(Class<A> activityClass) { throw new RuntimeException("Stub!"); }
    public static <A extends Activity> ActivityScenario<A> launchActivityForResult(Intent startActivityIntent) { throw new RuntimeException("Stub!"); }
    @Override public void close() { throw new RuntimeException("Stub!"); }
    public ActivityScenario<A> moveToState(Lifecycle.State newState) { throw new RuntimeException("Stub!"); }
    public ActivityScenario<A> recreate() { throw new RuntimeException("Stub!"); }
    public ActivityScenario<A> onActivity(ActivityAction<A> action) { throw new RuntimeException("Stub!"); }
    public Instrumentation.ActivityResult getResult() { throw new RuntimeException("Stub!"); }
    public Lifecycle.State getState() { throw new RuntimeException("Stub!"); }

    public interface ActivityAction<A extends Activity> {
        void perform(A activity);
    }
}
