package com.droidwire.demo

import android.os.StrictMode
import androidx.test.platform.app.InstrumentationRegistry
import org.junit.rules.TestRule
import org.junit.runner.Description
import org.junit.runners.model.Statement

/**
 * Turns StrictMode on for the duration of each test: `detectAll()` + `penaltyLog()` by default.
 *
 * A thread policy belongs to one thread, and the code under test usually runs on the main
 * thread (inside `onActivity {}` or `runOnMainSync {}`), so the policy is installed on the main
 * thread as well as on the test thread, and both previous policies are restored afterwards.
 * Violations then appear in logcat under the tag `StrictMode`.
 */
class StrictModeRule(
    private val policy: StrictMode.ThreadPolicy = defaultPolicy(),
) : TestRule {

    override fun apply(base: Statement, description: Description): Statement =
        object : Statement() {
            override fun evaluate() {
                val instrumentation = InstrumentationRegistry.getInstrumentation()
                val previousOnTestThread = StrictMode.getThreadPolicy()
                var previousOnMain: StrictMode.ThreadPolicy? = null
                instrumentation.runOnMainSync {
                    previousOnMain = StrictMode.getThreadPolicy()
                    StrictMode.setThreadPolicy(policy)
                }
                StrictMode.setThreadPolicy(policy)
                try {
                    base.evaluate()
                } finally {
                    StrictMode.setThreadPolicy(previousOnTestThread)
                    instrumentation.runOnMainSync {
                        previousOnMain?.let { StrictMode.setThreadPolicy(it) }
                    }
                }
            }
        }

    companion object {
        fun defaultPolicy(): StrictMode.ThreadPolicy =
            StrictMode.ThreadPolicy.Builder()
                .detectAll()
                .penaltyLog()
                .build()
    }
}
