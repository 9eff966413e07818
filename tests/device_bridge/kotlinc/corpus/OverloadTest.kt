package com.droidwire.demo.test

import android.os.SystemClock
import android.util.Log
import androidx.test.core.app.ActivityScenario
import androidx.test.ext.junit.runners.AndroidJUnit4
import com.droidwire.demo.MainActivity
import org.junit.Test
import org.junit.runner.RunWith
import androidx.test.espresso.Espresso.onView
import androidx.test.espresso.matcher.ViewMatchers.withId
import org.junit.Assert.assertEquals

@RunWith(AndroidJUnit4::class)
class OverloadTest {

    @Test
    fun overloadIsChecked() {
        ActivityScenario.launch(MainActivity::class.java).use { scenario ->
            scenario.onActivity { activity ->
                val start = SystemClock.elapsedRealtime()
                activity.computeLayoutHash()
                onView(withId("title"))
                assertEquals("hash", 64, activity.computeLayoutHash())
                Log.i("DroidUnblocker", "elapsed=${SystemClock.elapsedRealtime() - start}ms")
            }
        }
    }
}
