package android.app;

import android.content.Context;
import android.content.Intent;
import android.os.Bundle;

public class Instrumentation {
    public Instrumentation() { throw new RuntimeException("Stub!"); }
    public Context getContext() { throw new RuntimeException("Stub!"); }
    public Context getTargetContext() { throw new RuntimeException("Stub!"); }
    public void runOnMainSync(Runnable runner) { throw new RuntimeException("Stub!"); }
    public void waitForIdleSync() { throw new RuntimeException("Stub!"); }
    public void waitForIdle(Runnable recipient) { throw new RuntimeException("Stub!"); }
    public Activity startActivitySync(Intent intent) { throw new RuntimeException("Stub!"); }
    public void sendStatus(int resultCode, Bundle results) { throw new RuntimeException("Stub!"); }
    public void callActivityOnCreate(Activity activity, Bundle icicle) { throw new RuntimeException("Stub!"); }

    public static final class ActivityResult {
        public ActivityResult(int resultCode, Intent resultData) { throw new RuntimeException("Stub!"); }
        public int getResultCode() { throw new RuntimeException("Stub!"); }
        public Intent getResultData() { throw new RuntimeException("Stub!"); }
    }
}
