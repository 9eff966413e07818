@file:JvmName("ActivityScenarioRuleKt")

package androidx.test.ext.junit.rules

import android.app.Activity
import android.content.Intent
import android.os.Bundle

inline fun <reified A : Activity> activityScenarioRule(
    intent: Intent? = null,
    activityOptions: Bundle? = null,
): ActivityScenarioRule<A> = throw UnsupportedOperationException("Stub!")
