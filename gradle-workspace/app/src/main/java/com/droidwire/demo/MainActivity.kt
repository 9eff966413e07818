package com.droidwire.demo

import android.app.Activity
import android.content.Context
import android.os.Bundle
import android.os.SystemClock
import android.widget.TextView
import java.io.File
import java.io.IOException
import java.net.HttpURLConnection
import java.net.URL
import java.security.MessageDigest
import java.util.concurrent.ExecutorService
import java.util.concurrent.Executors

/**
 * The demo app under test. Each public method is a small, deliberate example of one kind of
 * main-thread behaviour, so that every verdict of the sandbox executor has a test to show it:
 *
 * | method                   | what it does on the calling thread        | expected verdict |
 * |--------------------------|-------------------------------------------|------------------|
 * | loadSettingsFromDisk()   | file reads for ~850 ms                    | CONFIRMED        |
 * | saveDraftSync()          | SharedPreferences.commit() (disk write)   | CONFIRMED        |
 * | fetchGreetingBlocking()  | opens an HTTP connection                  | CONFIRMED        |
 * | computeLayoutHash()      | ~450 ms of CPU work                       | CONFIRMED        |
 * | decodeThumbnail()        | ~120 ms of CPU work                       | PARTIAL          |
 * | formatTitle()            | string formatting, microseconds           | REFUTED          |
 * | loadAvatarAsync()        | hands its disk read to a background thread | REFUTED         |
 *
 * The durations are budgets, not accidents: the loops run until their budget is spent, so the
 * readings are comparable between a fast phone and a slow emulator.
 */
class MainActivity : Activity() {

    private val background: ExecutorService = Executors.newSingleThreadExecutor()
    private lateinit var titleView: TextView

    override fun onCreate(savedInstanceState: Bundle?) {
        super.onCreate(savedInstanceState)
        titleView = TextView(this)
        titleView.text = formatTitle("droidwire", 0)
        setContentView(titleView)
    }

    override fun onDestroy() {
        background.shutdownNow()
        super.onDestroy()
    }

    /** Reads the settings file on the calling thread, over and over, for ~850 ms. */
    fun loadSettingsFromDisk(): String {
        val file = File(filesDir, SETTINGS_FILE)
        val deadline = SystemClock.uptimeMillis() + SETTINGS_READ_BUDGET_MS
        var settings = DEFAULT_SETTINGS
        do {
            if (file.exists()) {
                settings = file.readText()
            }
        } while (SystemClock.uptimeMillis() < deadline)
        return settings
    }

    /** Saves a draft synchronously: commit() writes the preferences file before returning. */
    fun saveDraftSync(text: String = "draft"): Boolean {
        val prefs = getSharedPreferences(DRAFTS_PREFS, Context.MODE_PRIVATE)
        return prefs.edit().putString(DRAFT_KEY, text).commit()
    }

    /** Fetches a greeting over HTTP on the calling thread; falls back to a default on I/O errors. */
    fun fetchGreetingBlocking(): String {
        val connection = URL(GREETING_URL).openConnection() as HttpURLConnection
        connection.connectTimeout = NETWORK_TIMEOUT_MS
        connection.readTimeout = NETWORK_TIMEOUT_MS
        return try {
            connection.inputStream.bufferedReader().use { it.readText() }
        } catch (e: IOException) {
            DEFAULT_GREETING
        } finally {
            connection.disconnect()
        }
    }

    /** Hashes a synthetic layout tree for ~450 ms of pure CPU work (no StrictMode trigger). */
    fun computeLayoutHash(): String = hashUntil(LAYOUT_HASH_BUDGET_MS, "layout")

    /** Decodes a (synthetic) thumbnail: ~120 ms of CPU work, more than a frame, less than a hitch. */
    fun decodeThumbnail(): String = hashUntil(THUMBNAIL_BUDGET_MS, "thumbnail")

    /** Formats the title bar text: fast, no I/O. */
    fun formatTitle(name: String = "droidwire", unread: Int = 0): String =
        if (unread > 0) "$name ($unread)" else name

    /** Loads the avatar on a background thread and delivers it on the main thread. */
    fun loadAvatarAsync(onLoaded: (ByteArray) -> Unit = {}) {
        background.execute {
            val file = File(cacheDir, AVATAR_FILE)
            val bytes = if (file.exists()) file.readBytes() else ByteArray(0)
            runOnUiThread { onLoaded(bytes) }
        }
    }

    private fun hashUntil(budgetMs: Long, seed: String): String {
        val digest = MessageDigest.getInstance("SHA-256")
        val deadline = SystemClock.uptimeMillis() + budgetMs
        var block = seed.toByteArray()
        do {
            block = digest.digest(block)
        } while (SystemClock.uptimeMillis() < deadline)
        return block.joinToString("") { "%02x".format(it) }
    }

    companion object {
        const val SETTINGS_FILE = "settings.json"
        const val DRAFTS_PREFS = "drafts"
        const val DRAFT_KEY = "draft"
        const val AVATAR_FILE = "avatar.png"
        const val GREETING_URL = "https://example.com/greeting"
        const val DEFAULT_SETTINGS = "{}"
        const val DEFAULT_GREETING = "Hello"
        const val NETWORK_TIMEOUT_MS = 2_000
        const val SETTINGS_READ_BUDGET_MS = 850L
        const val LAYOUT_HASH_BUDGET_MS = 450L
        const val THUMBNAIL_BUDGET_MS = 120L
    }
}
