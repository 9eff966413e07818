package com.example.demo

import android.app.Activity
import android.os.Bundle
import com.example.demo.util.*

class MainActivity : Activity() {
    override fun onCreate(savedInstanceState: Bundle?) {
        super.onCreate(savedInstanceState)
        loadConfig()
    }

    fun loadConfig(): String {
        val text = ConfigStore.read(this)
        return text.trim()
    }

    private suspend fun <T> remember(value: T): T = value

    companion object {
        const val TAG = "Demo"

        fun newIntentName(id: Int): String = "demo-$id"
    }

    inner class Helper {
        fun help(): Int = 42
    }
}

fun topLevelHelper(x: Int): Int = x * 2
