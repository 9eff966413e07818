package com.droidwire.demo

import android.os.SystemClock
import android.util.Log
import androidx.test.platform.app.InstrumentationRegistry

/**
 * Times the code under test and logs `DroidUnblocker: elapsed=<ms>ms` (tag `DroidUnblocker`,
 * priority INFO), the line the droidwire sandbox executor reads `blocking_time_ms` from.
 *
 * ```
 * scenario.onActivity { activity ->
 *     DroidUnblocker.measure { activity.loadSettingsFromDisk() }
 * }
 * ```
 */
object DroidUnblocker {
    const val TAG = "DroidUnblocker"

    /** Runs [block] on the current thread and logs how long it took. */
    inline fun <T> measure(block: () -> T): T {
        val start = SystemClock.elapsedRealtime()
        try {
            return block()
        } finally {
            report(SystemClock.elapsedRealtime() - start)
        }
    }

    /** Runs [block] on the main thread, waits for it, and logs how long the main thread was busy. */
    fun <T> measureOnMainThread(block: () -> T): T {
        var result: T? = null
        InstrumentationRegistry.getInstrumentation().runOnMainSync {
            result = measure(block)
        }
        @Suppress("UNCHECKED_CAST")
        return result as T
    }

    /** Logs one reading; use it when the timing is taken by hand. */
    fun report(elapsedMs: Long) {
        Log.i(TAG, "elapsed=${elapsedMs}ms")
    }
}
