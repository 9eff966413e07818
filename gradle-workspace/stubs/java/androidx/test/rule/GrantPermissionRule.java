package androidx.test.rule;

import org.junit.rules.TestRule;
import org.junit.runner.Description;
import org.junit.runners.model.Statement;

public class GrantPermissionRule implements TestRule {
    private GrantPermissionRule() {}
    public static GrantPermissionRule grant(String... permissions) { throw new RuntimeException("Stub!"); }
    @Override public Statement apply(Statement base, Description description) { throw new RuntimeException("Stub!"); }
}
