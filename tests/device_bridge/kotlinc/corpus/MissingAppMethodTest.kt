package com.droidwire.demo.test

import android.os.SystemClock
import android.util.Log
import androidx.test.core.app.ActivityScenario
import androidx.test.ext.junit.runners.AndroidJUnit4
import com.droidwire.demo.MainActivity
import org.junit.Test
import org.junit.runner.RunWith

@RunWith(AndroidJUnit4::class)
class MissingAppMethodTest {

    @Test
    fun missingAppMethodIsChecked() {
        ActivityScenario.launch(MainActivity::class.java).use { scenario ->
            scenario.onActivity { activity ->
                val start = SystemClock.elapsedRealtime()
                activity.loadSettingsFromDiskSync()
                activity.decodeThumbnail(true)
                MainActivity.SETTINGS_PATH
                Log.i("DroidUnblocker", "elapsed=${SystemClock.elapsedRealtime() - start}ms")
            }
        }
    }
}
