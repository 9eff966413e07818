package androidx.test.ext.junit.rules;

import android.app.Activity;
import android.content.Intent;
import android.os.Bundle;
import androidx.test.core.app.ActivityScenario;
import org.junit.rules.ExternalResource;

public final class ActivityScenarioRule<A extends Activity> extends ExternalResource {
    public ActivityScenarioRule(Class<A> activityClass) { throw new RuntimeException("Stub!"); }
    public ActivityScenarioRule(Class<A> activityClass, Bundle activityOptions) { throw new RuntimeException("Stub!"); }
    public ActivityScenarioRule(Intent startActivityIntent) { throw new RuntimeException("Stub!"); }
    public ActivityScenarioRule(Intent startActivityIntent, Bundle activityOptions) { throw new RuntimeException("Stub!"); }
    public ActivityScenario<A> getScenario() { throw new RuntimeException("Stub!"); }
}
