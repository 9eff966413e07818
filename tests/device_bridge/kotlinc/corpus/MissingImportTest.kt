package com.droidwire.demo.test

import android.os.SystemClock
import android.util.Log
import androidx.test.core.app.ActivityScenario
import androidx.test.ext.junit.runners.AndroidJUnit4
import com.droidwire.demo.MainActivity
import org.junit.Test
import org.junit.runner.RunWith

@RunWith(AndroidJUnit4::class)
class MissingImportTest {

    @Test
    fun missingImportIsChecked() {
        ActivityScenario.launch(MainActivity::class.java).use { scenario ->
            scenario.onActivity { activity ->
                val start = SystemClock.elapsedRealtime()
                StrictMode.setThreadPolicy(StrictMode.ThreadPolicy.Builder().detectAll().penaltyLog().build())
                assertTrue(activity.loadSettingsFromDisk().isNotEmpty())
                Log.i("DroidUnblocker", "elapsed=${SystemClock.elapsedRealtime() - start}ms")
            }
        }
    }
}
