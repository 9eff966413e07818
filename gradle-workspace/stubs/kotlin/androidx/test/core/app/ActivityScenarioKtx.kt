@file:JvmName("ActivityScenarioKt")

package androidx.test.core.app

import android.app.Activity
import android.content.Intent
import android.os.Bundle

inline fun <reified A : Activity> launchActivity(
    intent: Intent? = null,
    activityOptions: Bundle? = null,
): ActivityScenario<A> = throw UnsupportedOperationException("Stub!")
