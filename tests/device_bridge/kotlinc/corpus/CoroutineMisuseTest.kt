package com.droidwire.demo.test

import android.os.SystemClock
import android.util.Log
import androidx.test.core.app.ActivityScenario
import androidx.test.ext.junit.runners.AndroidJUnit4
import com.droidwire.demo.MainActivity
import org.junit.Test
import org.junit.runner.RunWith
import kotlinx.coroutines.delay
import kotlinx.coroutines.withContext
import kotlinx.coroutines.Dispatchers

@RunWith(AndroidJUnit4::class)
class CoroutineMisuseTest {

    @Test
    fun coroutineMisuseIsChecked() {
        ActivityScenario.launch(MainActivity::class.java).use { scenario ->
            scenario.onActivity { activity ->
                val start = SystemClock.elapsedRealtime()
                delay(10)
                withContext(Dispatchers.IO) { activity.loadSettingsFromDisk() }
                Log.i("DroidUnblocker", "elapsed=${SystemClock.elapsedRealtime() - start}ms")
            }
        }
    }
}
