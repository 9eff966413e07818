package com.droidwire.demo.test

import android.os.SystemClock
import android.util.Log
import androidx.test.core.app.ActivityScenario
import androidx.test.ext.junit.runners.AndroidJUnit4
import com.droidwire.demo.MainActivity
import org.junit.Test
import org.junit.runner.RunWith

@RunWith(AndroidJUnit4::class)
class QualifiedNameTest {

    @Test
    fun qualifiedNameIsChecked() {
        ActivityScenario.launch(MainActivity::class.java).use { scenario ->
            scenario.onActivity { activity ->
                val start = SystemClock.elapsedRealtime()
                androidx.test.platform.app.InstrumentationRegistry.getInstrumentation().waitForIdleSync()
                val prefs: android.content.SharedPreferences = activity.getSharedPreferences(MainActivity.DRAFTS_PREFS, android.content.Context.MODE_PRIVATE)
                prefs.edit().putString(MainActivity.DRAFT_KEY, activity.formatTitle("inbox", 3)).apply()
                Log.i("DroidUnblocker", "elapsed=${SystemClock.elapsedRealtime() - start}ms")
            }
        }
    }
}
