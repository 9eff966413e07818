package com.droidwire.demo.examples

import androidx.test.ext.junit.rules.ActivityScenarioRule
import androidx.test.ext.junit.runners.AndroidJUnit4
import com.droidwire.demo.DroidUnblocker
import com.droidwire.demo.MainActivity
import com.droidwire.demo.StrictModeRule
import org.junit.Rule
import org.junit.Test
import org.junit.rules.RuleChain
import org.junit.runner.RunWith

/**
 * One example per demo method, each showing the evidence its verdict rests on.
 * Enable with `-Pdroidwire.examples=true`; run one with `-e class <this class>#<method>`.
 */
@RunWith(AndroidJUnit4::class)
class MainActivityExamplesTest {

    private val scenarioRule = ActivityScenarioRule(MainActivity::class.java)

    @get:Rule
    val rules: RuleChain = RuleChain.outerRule(StrictModeRule()).around(scenarioRule)

    @Test
    fun loadSettingsFromDisk_readsOnMainThread() {
        scenarioRule.scenario.onActivity { activity ->
            DroidUnblocker.measure { activity.loadSettingsFromDisk() }
        }
    }

    @Test
    fun saveDraftSync_writesOnMainThread() {
        scenarioRule.scenario.onActivity { activity ->
            DroidUnblocker.measure { activity.saveDraftSync("hello") }
        }
    }

    @Test
    fun fetchGreetingBlocking_usesNetworkOnMainThread() {
        scenarioRule.scenario.onActivity { activity ->
            DroidUnblocker.measure { activity.fetchGreetingBlocking() }
        }
    }

    @Test
    fun computeLayoutHash_blocksWithCpuWork() {
        scenarioRule.scenario.onActivity { activity ->
            DroidUnblocker.measure { activity.computeLayoutHash() }
        }
    }

    @Test
    fun decodeThumbnail_takesMoreThanAFrame() {
        scenarioRule.scenario.onActivity { activity ->
            DroidUnblocker.measure { activity.decodeThumbnail() }
        }
    }

    @Test
    fun formatTitle_isFast() {
        scenarioRule.scenario.onActivity { activity ->
            DroidUnblocker.measure { activity.formatTitle("inbox", 3) }
        }
    }

    @Test
    fun loadAvatarAsync_leavesTheMainThreadFree() {
        scenarioRule.scenario.onActivity { activity ->
            DroidUnblocker.measure { activity.loadAvatarAsync() }
        }
    }
}
